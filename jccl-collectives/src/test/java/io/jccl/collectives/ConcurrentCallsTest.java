package io.jccl.collectives;

import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Two threads issuing calls on one communicator at once: ranks pair calls by their order, which no rank controls
 * between two threads, so such calls used to pair different buffers on different ranks and return mixed results
 * without an error (272 of 600 over shm, 354 of 600 over tcp). A call issued while another thread's calls are in
 * flight now fails at once; one thread after another is fine.
 */
class ConcurrentCallsTest {
    @Test
    void shouldRefuseACallWhileAnotherThreadsCallsAreInFlight() {
        Ranks.run(2, Ranks.loop(), c -> {
            if (c.rank() == 1) {
                // joins only after rank 0's two threads have both issued: whichever issued first is still in
                // flight (waiting for this rank) when the other issues, so exactly one of them must be refused
                c.store().getString("issued", 20_000_000_000L);
                try (Arena arena = Arena.ofConfined()) {
                    c.allReduce(arena.allocate(4L * 4096), 4096, DataType.FLOAT32, ReduceOp.SUM);
                }
                return;
            }
            AtomicInteger refused = new AtomicInteger();
            AtomicInteger completed = new AtomicInteger();
            AtomicReference<String> message = new AtomicReference<>();
            CountDownLatch issued = new CountDownLatch(2);
            Thread[] threads = new Thread[2];
            for (int t = 0; t < 2; t++) {
                threads[t] = Thread.ofPlatform().start(() -> {
                    try (Arena arena = Arena.ofConfined()) {
                        MemorySegment buf = arena.allocate(4L * 4096);
                        issued.countDown();
                        c.allReduce(buf, 4096, DataType.FLOAT32, ReduceOp.SUM);
                        completed.incrementAndGet();
                    } catch (IllegalStateException e) {
                        refused.incrementAndGet();
                        message.set(e.getMessage());
                        issued.countDown();
                    }
                });
            }
            // the refused thread counts down twice; the accepted one is in flight once both counted
            issued.await();
            long giveUpNs = System.nanoTime() + 10_000_000_000L;
            while (refused.get() == 0 && System.nanoTime() < giveUpNs) {
                Thread.sleep(1);
            }
            c.store().setString("issued", "1", 10_000_000_000L);
            for (Thread t : threads) {
                t.join();
            }
            assertEquals(1, refused.get(), "exactly one of two overlapping calls must be refused");
            assertEquals(1, completed.get(), "the call issued first must complete");
            assertNotNull(message.get());
            assertTrue(message.get().contains("issue calls from one thread at a time"), message.get());
        });
    }

    @Test
    void shouldAcceptCallsFromOneThreadAfterAnother() throws Exception {
        Ranks.run(2, Ranks.loop(), c -> {
            try (Arena arena = Arena.ofShared()) {
                MemorySegment buf = arena.allocate(64);
                for (int t = 0; t < 3; t++) {
                    Thread worker = Thread.ofPlatform().start(() -> {
                        buf.fill((byte) 0);
                        buf.set(java.lang.foreign.ValueLayout.JAVA_FLOAT, 0, 1f);
                        c.allReduce(buf, 16, DataType.FLOAT32, ReduceOp.SUM);
                    });
                    worker.join();
                    assertEquals(2f, buf.get(java.lang.foreign.ValueLayout.JAVA_FLOAT, 0));
                }
                // asynchronous calls from this thread keep their order; a blocking call from another thread while
                // they are queued is refused
                c.barrierAsync();
                c.barrierAsync().get();
            }
        });
    }

    @Test
    void shouldRefuseABlockingCallBehindAnotherThreadsAsyncCalls() {
        Ranks.run(2, Ranks.loop(), c -> {
            if (c.rank() == 0) {
                var pending = c.barrierAsync(); // rank 1 joins it only after the check below
                AtomicReference<Throwable> other = new AtomicReference<>();
                Thread t = Thread.ofPlatform().start(() -> {
                    try {
                        c.barrier();
                    } catch (Throwable e) {
                        other.set(e);
                    }
                });
                t.join();
                assertTrue(other.get() instanceof IllegalStateException, String.valueOf(other.get()));
                c.store().setString("checked", "1", 10_000_000_000L);
                pending.get();
            } else {
                c.store().getString("checked", 10_000_000_000L);
                c.barrier();
            }
        });
    }

    @Test
    void closeIsBoundedWhenAnotherThreadIsStuckInACall() throws Exception {
        Ranks.run(2, Ranks.loop().withTimeout(java.time.Duration.ofMinutes(10)), c -> {
            if (c.rank() == 1) {
                // alive but never joins: rank 0's barrier would wait for its whole (10 min) deadline
                c.store().getString("closed", 60_000_000_000L);
                return;
            }
            AtomicReference<Throwable> stuck = new AtomicReference<>();
            Thread waiter = Thread.ofPlatform().start(() -> {
                try {
                    c.barrier();
                } catch (Throwable e) {
                    stuck.set(e);
                }
            });
            Thread.sleep(200);
            long start = System.nanoTime();
            c.close();
            long ms = (System.nanoTime() - start) / 1_000_000;
            waiter.join(5_000);
            assertTrue(ms < 15_000, "close took " + ms + " ms");
            assertTrue(stuck.get() instanceof CollectiveException.Aborted, String.valueOf(stuck.get()));
            assertTrue(stuck.get().getMessage().contains("close()"), stuck.get().getMessage());
            c.store().setString("closed", "1", 10_000_000_000L);
        });
    }
}
