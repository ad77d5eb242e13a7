package io.jccl.examples;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import static org.junit.jupiter.api.Assertions.assertTrue;

/** Runs {@link EmbeddingCacheExample} over shm0 and tcp0, as docs/services.md tells users to. */
class EmbeddingCacheExampleTest {
    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldLookUpCacheAndInvalidate(String device) throws Exception {
        String report = EmbeddingCacheExample.runBoth(device, 1000, 16, 32);
        assertTrue(report.contains("all succeeded") && report.contains("row 7 invalidated")
            && report.contains("version 4") && report.contains("every value checked"), report);
    }
}
