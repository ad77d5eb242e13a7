package io.jccl.verbs;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The link timeout (4.096 µs × 2^timeout × (retry_cnt + 1)) and the codes chosen for a wanted duration. */
class LinkTimeoutTest {
    @Test
    void shouldComputeTheIbvFormula() {
        assertEquals(4096L << 14, QueuePairAttributes.linkTimeoutNs(14, 0)); // 67 ms, perftest's default
        assertEquals((4096L << 14) * 8, QueuePairAttributes.linkTimeoutNs(14, 7));
        assertEquals(Long.MAX_VALUE, QueuePairAttributes.linkTimeoutNs(0, 7));
    }

    @Test
    void shouldPickTheSmallestCodesCoveringTheWantedTime() {
        for (long wanted : new long[] {1, 1_000_000L, 999_999_999L, 2_000_000_000L, 30_000_000_000L,
            600_000_000_000L}) {
            QueuePairAttributes a = new QueuePairAttributes().linkTimeoutNs(wanted);
            long got = QueuePairAttributes.linkTimeoutNs(a.timeout(), a.retryCount());
            assertTrue(got >= wanted, wanted + " -> " + got);
            assertTrue(wanted < 8192 || got <= wanted + wanted / 4 + 1, "within 25 %: " + wanted + " -> " + got);
            assertTrue(a.timeout() >= 1 && a.timeout() <= 31 && a.retryCount() >= 0 && a.retryCount() <= 7);
        }
        QueuePairAttributes a = new QueuePairAttributes().linkTimeoutNs(30_000_000_000L);
        assertEquals(20, a.timeout(), "30 s: 4.29 s x 7 = 30.1 s");
        assertEquals(6, a.retryCount());
    }

    @Test
    void shouldMapZeroToInfinite() {
        assertEquals(0, new QueuePairAttributes().linkTimeoutNs(0).timeout());
        assertEquals(0, new QueuePairAttributes().linkTimeoutNs(Long.MAX_VALUE).timeout());
    }
}
