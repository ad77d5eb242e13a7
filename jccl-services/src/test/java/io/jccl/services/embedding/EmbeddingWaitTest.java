package io.jccl.services.embedding;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * How a lookup waits for its READs: spin briefly, then yield between polls, then block (the house's idle order), so
 * that a client waiting on a server of the same host gives the core to it instead of spinning it away.
 */
class EmbeddingWaitTest {
    @Test
    void shouldSpinThenYieldThenBlock() {
        assertEquals(EmbeddingLookup.SPIN, EmbeddingLookup.waitPhase(0));
        assertEquals(EmbeddingLookup.SPIN, EmbeddingLookup.waitPhase(EmbeddingLookup.SPIN_BEFORE_YIELD_NS - 1));
        assertEquals(EmbeddingLookup.YIELD, EmbeddingLookup.waitPhase(EmbeddingLookup.SPIN_BEFORE_YIELD_NS));
        assertEquals(EmbeddingLookup.YIELD, EmbeddingLookup.waitPhase(EmbeddingLookup.SPIN_NS - 1));
        assertEquals(EmbeddingLookup.BLOCK, EmbeddingLookup.waitPhase(EmbeddingLookup.SPIN_NS));
        // The spin is shorter than any TCP round trip: a lookup over tcp0 that polls nothing yet yields.
        assertTrue(EmbeddingLookup.SPIN_BEFORE_YIELD_NS < 13_000, "spin must end before a loopback round trip");
    }

    @Test
    void tcpLookupShouldYieldBetweenPollsWhileItsReadsAreOut() {
        // 256 READs over loopback TCP take longer than the 10 us spin (the kernel's round trip alone is longer), so
        // every lookup reaches the yielding phase: counted, not timed.
        Tables.run(2, "tcp0", (e, barrier) -> {
            if (e.rank() == 0) {
                try (EmbeddingServer s = EmbeddingServer.create(e, "wait", 4096, 64)) {
                    barrier.await();
                    barrier.await();
                }
                return;
            }
            barrier.await();
            try (EmbeddingClient c = Tables.open(e, "wait", 0, "tcp0");
                 EmbeddingLookup l = c.newLookup(256)) {
                for (int r = 0; r < 20; r++) {
                    l.clear();
                    for (int i = 0; i < 256; i++) {
                        l.add((r * 256L + i * 13L) % 4096);
                    }
                    assertTrue(l.execute(), () -> l.error(0));
                }
                assertTrue(l.waitYields() > 0, "20 lookups of 256 rows over tcp0 never yielded while waiting");
            }
            barrier.await();
        });
    }
}
