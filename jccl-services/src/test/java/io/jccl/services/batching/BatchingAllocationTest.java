package io.jccl.services.batching;

import io.jccl.collectives.store.InMemoryStore;
import io.jccl.collectives.store.Store;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.management.ManagementFactory;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** A producer's submit and poll allocate nothing per request (the response is read in place). */
class BatchingAllocationTest {
    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldNotAllocatePerRequestOnTheProducer(String device) {
        com.sun.management.ThreadMXBean threads = (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
        try (Store store = new InMemoryStore(); Arena arena = Arena.ofConfined();
             InferenceServer server = InferenceServer.create(store, "alloc", InferenceBatchingTest.config(device)
                 .withMaxBatchSize(4), InferenceBatchingTest.DOUBLER, InferenceBatchingTest.options(device));
             InferenceClient client = InferenceClient.connect(store, "alloc", InferenceBatchingTest.options(device))) {
            MemorySegment row = arena.allocate(4);
            int rounds = device.equals("shm0") ? 2000 : 500;
            loop(client, row, rounds); // warm-up: JIT
            long before = threads.getCurrentThreadAllocatedBytes();
            loop(client, row, rounds);
            long allocated = threads.getCurrentThreadAllocatedBytes() - before;
            // one object per request would be ≥ 16 B per round
            assertTrue(allocated < 16L * rounds, allocated + " B allocated over " + rounds + " requests");
            assertEquals(4L * rounds, server.stats().requests());
        }
    }

    private static void loop(InferenceClient client, MemorySegment row, int rounds) {
        for (int r = 0; r < rounds; r++) {
            client.submit(row);
            client.submit(row);
            InferenceResponse a = client.poll(TimeUnit.SECONDS.toNanos(20));
            InferenceResponse b = a == null ? null : client.poll(TimeUnit.SECONDS.toNanos(20));
            if (b == null || !b.isOk()) {
                throw new AssertionError("no answer in round " + r + ": " + b);
            }
        }
    }
}
