package io.jccl.services.transfer;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.lang.management.ManagementFactory;

import static org.junit.jupiter.api.Assertions.assertTrue;

/** A reused batch allocates nothing per transfer on the submitting thread: add, submit, await, clear. */
class TransferAllocationTest {
    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldNotAllocatePerTransferWhenABatchIsReused(String transport) {
        com.sun.management.ThreadMXBean threads = (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
        TransferSettings settings = TransferSettings.defaults().withSliceBytes(4096);
        Engines.run(2, Engines.options(transport), settings, (engine, barrier) -> {
            if (engine.rank() == 1) {
                engine.registerSegment("alloc-target", 1 << 16);
                barrier.await();
            } else {
                LocalSegment src = engine.registerSegment("alloc-source", 1 << 16);
                RemoteSegment dst = engine.openSegment("alloc-target", java.time.Duration.ofSeconds(20));
                try (TransferBatch b = engine.newBatch(4)) {
                    int rounds = transport.equals("shm0") ? 20_000 : 2_000;
                    loop(b, src, dst, rounds); // warm-up: JIT
                    long before = threads.getCurrentThreadAllocatedBytes();
                    loop(b, src, dst, rounds);
                    long allocated = threads.getCurrentThreadAllocatedBytes() - before;
                    // 4 transfers of 2 slices per round: one object per round would be ≥ 16 B per round
                    assertTrue(allocated < 16L * rounds, allocated + " B allocated over " + rounds
                        + " rounds of 4 transfers");
                    // the probe sees allocations of this thread (so the bound above can fail)
                    long probe = threads.getCurrentThreadAllocatedBytes();
                    Object[] sink = new Object[rounds];
                    for (int i = 0; i < rounds; i++) {
                        sink[i] = new long[2];
                    }
                    assertTrue(threads.getCurrentThreadAllocatedBytes() - probe >= 16L * rounds, "probe: "
                        + sink.length);
                }
                barrier.await();
            }
        });
    }

    private static void loop(TransferBatch b, LocalSegment src, RemoteSegment dst, int rounds) {
        for (int r = 0; r < rounds; r++) {
            b.clear();
            for (int i = 0; i < 4; i++) {
                b.write(src, i * 8192L, dst, i * 8192L, 8192);
            }
            if (!b.submit().await()) {
                throw new AssertionError(b.toString());
            }
        }
    }
}
