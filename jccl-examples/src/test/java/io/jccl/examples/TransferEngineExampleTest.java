package io.jccl.examples;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import static org.junit.jupiter.api.Assertions.assertTrue;

/** Runs {@link TransferEngineExample} over shm0 and tcp0, as docs/services.md tells users to. */
class TransferEngineExampleTest {
    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldHandOverBlocksAndNotifyAfterLanding(String device) throws Exception {
        String report = TransferEngineExample.runBoth(device, 16, 64);
        assertTrue(report.contains("all landed") && report.contains("checksum matches")
            && report.contains("first block READ back identical"), report);
    }
}
