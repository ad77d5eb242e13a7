package io.jccl.examples;

import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.assertTrue;

/** Runs {@link CheckpointStagingExample} over shm0 and tcp0, as docs/services.md tells users to. */
class CheckpointStagingExampleTest {
    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldCheckpointWithFourRanksAndRestoreWithTwo(String device, @TempDir Path dir) throws Exception {
        String report = CheckpointStagingExample.run(device, (1 << 20) + 20, 6, 2, 0, dir);
        assertTrue(report.contains("restored rank 0 of 2: step 6 (expected 6)") && report.contains("restored rank 1 "
            + "of 2: step 6 (expected 6)") && !report.contains("DIFFER"), report);
        assertTrue(report.contains("on disk: [latest, step-0000000000000004, step-0000000000000006]"), report);
    }
}
