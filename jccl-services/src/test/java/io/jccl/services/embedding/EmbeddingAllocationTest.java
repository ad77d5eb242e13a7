package io.jccl.services.embedding;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.lang.management.ManagementFactory;

import static org.junit.jupiter.api.Assertions.assertTrue;

/** A reused lookup allocates nothing per row on the looking-up thread: add, execute, read, clear (cache on and off). */
class EmbeddingAllocationTest {
    @ParameterizedTest
    @ValueSource(strings = {"shm0", "shm0/read", "tcp0"})
    void shouldNotAllocatePerRowWhenALookupIsReused(String mode) {
        com.sun.management.ThreadMXBean threads = (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
        Tables.run(2, mode, (e, barrier) -> {
            if (e.rank() == 0) {
                try (EmbeddingServer s = EmbeddingServer.create(e, "alloc", 4096, 64)) {
                    barrier.await();
                    barrier.await();
                }
                return;
            }
            barrier.await();
            try (EmbeddingClient c = Tables.open(e, "alloc", 512, mode);
                 EmbeddingLookup l = c.newLookup(64)) {
                int rounds = mode.equals("tcp0") ? 300 : 3000;
                loop(l, rounds); // warm-up: JIT
                long before = threads.getCurrentThreadAllocatedBytes();
                loop(l, rounds);
                long allocated = threads.getCurrentThreadAllocatedBytes() - before;
                // 64 rows per round: one object per row would be >= 16 B x 64 per round; allow less than 16 B/round
                assertTrue(allocated < 16L * rounds, allocated + " B allocated over " + rounds + " lookups of 64");
            }
            barrier.await();
        });
    }

    private static void loop(EmbeddingLookup l, int rounds) {
        float sum = 0;
        for (int r = 0; r < rounds; r++) {
            l.clear();
            for (int i = 0; i < 64; i++) {
                l.add((r * 64L + i * 7L) % 4096); // a mix of cache hits and misses
            }
            if (!l.execute()) {
                throw new AssertionError(l.error(0));
            }
            sum += l.get(63, 3);
        }
        if (sum != 0) {
            throw new AssertionError("rows are zero: " + sum);
        }
    }
}
