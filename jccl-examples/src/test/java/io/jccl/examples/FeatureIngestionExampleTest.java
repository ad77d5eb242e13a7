package io.jccl.examples;

import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.assertTrue;

/** Runs {@link FeatureIngestionExample} over shm0 and tcp0, as docs/services.md tells users to. */
class FeatureIngestionExampleTest {
    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldIngestSnapshotAndRebuildTheSameTable(String device, @TempDir Path dir) throws Exception {
        String report = FeatureIngestionExample.run(device, 2, 1000, 100, dir);
        assertTrue(report.contains("appended 1000 feature updates") && report.contains("durable (acknowledged): 1000")
            && report.contains("identical to the online table") && report.contains("[500, 500]"), report);
    }
}
