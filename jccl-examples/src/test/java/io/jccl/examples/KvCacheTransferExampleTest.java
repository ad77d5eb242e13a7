package io.jccl.examples;

import io.jccl.services.kvcache.KvCacheLayout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import static org.junit.jupiter.api.Assertions.assertTrue;

/** Runs {@link KvCacheTransferExample} (this JVM prefill, a second JVM decode) over shm0 and tcp0. */
class KvCacheTransferExampleTest {
    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldHandOverEveryRequestWithMatchingChecksums(String device) throws Exception {
        // 12 requests of up to 40 tokens through a decode pool of 6 blocks of 8 tokens: later requests wait for
        // returned blocks.
        String report = KvCacheTransferExample.run(new KvCacheTransferExample.Settings(device, 12,
            new KvCacheLayout(8, 2, 2, 16, 2), 6, 40));
        assertTrue(report.contains("all 12 checksums match") && !report.contains("MISMATCH"), report);
    }
}
