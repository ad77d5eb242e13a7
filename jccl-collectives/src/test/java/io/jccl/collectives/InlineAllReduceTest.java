package io.jccl.collectives;

import io.jccl.collectives.direct.DirectAllReduce;
import io.jccl.collectives.kernel.KernelsTest;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static io.jccl.collectives.CollectivesTest.DIRECT;
import static io.jccl.collectives.CollectivesTest.check;
import static io.jccl.collectives.CollectivesTest.expected;
import static io.jccl.collectives.CollectivesTest.fill;
import static io.jccl.collectives.CollectivesTest.value;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The inline all-reduce (direct path, ≤ {@link Engine#INLINE_BYTES}: data, signature and flag in the ranks'
 * arrival records) and the lean blocking-call path around it: records reused every second barrier while peers may
 * lag, mixed with the other direct operations that share the records, every type and operator, in place, the
 * 1024/1025-byte boundary, async tickets mixed with blocking calls, mismatches, timeouts and aborts.
 */
class InlineAllReduceTest {
    private static final DataType[] TYPES = DataType.values();
    private static final ReduceOp[] OPS = ReduceOp.values();

    /**
     * Thousands of operations in a random order that every rank draws from the same seed: inline all-reduces of
     * random type, operator and size (in place or not, around the inline boundary), staged direct all-reduces,
     * broadcasts, all-gathers and barriers; ranks stall at random between operations, so a fast rank often
     * rewrites its record while a slow one is about to read the previous one. Every element is checked.
     */
    @Test
    void randomMixOfOperationsStaysExactWithLaggingRanks() {
        for (int n : new int[] {2, 3, 4}) {
            Ranks.run(n, Ranks.loop().withAlgorithms(DIRECT), c -> mix(c, n == 2 ? 4000 : 1500));
        }
    }

    private static void mix(Communicator c, int ops) {
        int n = c.size();
        int r = c.rank();
        Random shared = new Random(42);
        Random own = new Random(1000 + r);
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment a = arena.allocate(8192, 64);
            MemorySegment b = arena.allocate(8192, 64);
            MemorySegment all = arena.allocate(8192L * n, 64);
            for (int k = 0; k < ops; k++) {
                long seed = 7_000_000L + k;
                int kind = shared.nextInt(10);
                DataType type = TYPES[shared.nextInt(TYPES.length)];
                ReduceOp op = OPS[shared.nextInt(OPS.length)];
                int es = type.sizeBytes();
                long count = switch (shared.nextInt(4)) {
                    case 0 -> 1 + shared.nextInt(3);
                    case 1 -> DirectAllReduce.INLINE_BYTES / es - shared.nextInt(2);            // at / below the boundary
                    case 2 -> DirectAllReduce.INLINE_BYTES / es + 1 + shared.nextInt(2);        // just above it
                    default -> 1 + shared.nextInt((int) (DirectAllReduce.INLINE_BYTES / es));
                };
                boolean inPlace = shared.nextBoolean();
                String what = "op " + k + " rank " + r + "/" + n + " " + type + " " + op + " count=" + count;
                if (own.nextInt(8) == 0) {
                    // lag: the other ranks run ahead into the next barrier and rewrite the other record
                    if (own.nextBoolean()) {
                        Thread.yield();
                    } else {
                        long until = System.nanoTime() + own.nextInt(20_000);
                        while (System.nanoTime() < until) {
                            Thread.onSpinWait();
                        }
                    }
                }
                switch (kind) {
                    case 0 -> c.barrier();
                    case 1 -> {
                        int root = (int) (seed % n);
                        long cnt = Math.min(count, 2048);
                        fill(a, 0, cnt, seed, r, ReduceOp.SUM, DataType.INT32);
                        c.broadcast(a, cnt, DataType.INT32, root);
                        check("broadcast " + what, a, 0, cnt, DataType.INT32,
                            i -> value(seed, root, i, ReduceOp.SUM, DataType.INT32));
                    }
                    case 2 -> {
                        long cnt = Math.min(count, 2048 / n);
                        fill(a, 0, cnt, seed, r, ReduceOp.SUM, DataType.INT32);
                        c.allGather(a, all, cnt, DataType.INT32);
                        for (int j = 0; j < n; j++) {
                            int jj = j;
                            check("allGather " + what, all, j * cnt, cnt, DataType.INT32,
                                i -> value(seed, jj, i, ReduceOp.SUM, DataType.INT32));
                        }
                    }
                    default -> {
                        fill(a, 0, count, seed, r, op, type);
                        if (inPlace) {
                            c.allReduce(a, count, type, op);
                            check("allReduce in place " + what, a, 0, count, type,
                                i -> expected(seed, n, i, op, type));
                        } else {
                            c.allReduce(a, b, count, type, op);
                            check("allReduce " + what, b, 0, count, type, i -> expected(seed, n, i, op, type));
                            check("allReduce input untouched " + what, a, 0, count, type,
                                i -> value(seed, r, i, op, type));
                        }
                    }
                }
            }
        }
    }

    /** Every type × operator × a few inline sizes, heap and native, in place and out of place, 2 and 5 ranks. */
    @Test
    void everyTypeAndOperatorInline() {
        for (int n : new int[] {2, 5}) {
            Ranks.run(n, Ranks.loop().withAlgorithms(DIRECT), c -> {
                long seed = 1;
                try (Arena arena = Arena.ofConfined()) {
                    for (DataType type : TYPES) {
                        for (ReduceOp op : OPS) {
                            for (long count : new long[] {1, 2, 3, 5, 7, 8, 9, 31, 33,
                                DirectAllReduce.INLINE_BYTES / type.sizeBytes()}) {
                                seed++;
                                long s = seed;
                                long bytes = count * type.sizeBytes();
                                boolean heap = seed % 2 == 0;
                                MemorySegment in = CollectivesTest.alloc(arena, bytes, heap);
                                MemorySegment out = CollectivesTest.alloc(arena, bytes, !heap);
                                fill(in, 0, count, s, c.rank(), op, type);
                                c.allReduce(in, out, count, type, op);
                                String what = type + " " + op + " count=" + count + " n=" + n;
                                check(what, out, 0, count, type, i -> expected(s, n, i, op, type));
                                c.allReduce(in, count, type, op);
                                check("in place " + what, in, 0, count, type, i -> expected(s, n, i, op, type));
                            }
                        }
                    }
                }
            });
        }
    }

    /** The same float sums on every rank, bit for bit (each rank reduces all records in rank order). */
    @Test
    void resultsAreBitIdenticalOnEveryRank() {
        int n = 3;
        long[][] bits = new long[n][];
        Ranks.run(n, Ranks.loop().withAlgorithms(DIRECT), c -> {
            Random random = new Random(c.rank());
            float[] v = new float[200];
            for (int i = 0; i < v.length; i++) {
                v[i] = (float) (random.nextGaussian() * Math.pow(10, random.nextInt(12) - 6));
            }
            c.allReduce(v, ReduceOp.SUM);
            long[] mine = new long[v.length];
            for (int i = 0; i < v.length; i++) {
                mine[i] = Float.floatToRawIntBits(v[i]);
            }
            bits[c.rank()] = mine;
        });
        for (int r = 1; r < n; r++) {
            assertTrue(java.util.Arrays.equals(bits[0], bits[r]), "rank " + r + " differs from rank 0");
        }
    }

    /**
     * Blocking calls take tickets without a lock: queued async all-reduces and blocking ones from the same thread
     * all complete, in issue order, with the right data; then a second thread's call works once nothing is in
     * flight.
     */
    @Test
    void asyncAndBlockingCallsKeepIssueOrder() {
        Ranks.run(2, Ranks.loop().withAlgorithms(DIRECT), c -> {
            try (Arena arena = Arena.ofShared()) {
                int rounds = 200;
                List<CompletableFuture<Void>> pending = new ArrayList<>();
                MemorySegment[] bufs = new MemorySegment[rounds];
                for (int k = 0; k < rounds; k++) {
                    bufs[k] = arena.allocate(64 * 4, 64);
                    for (int i = 0; i < 64; i++) {
                        bufs[k].setAtIndex(java.lang.foreign.ValueLayout.JAVA_INT, i, k * 1000 + i + c.rank());
                    }
                    if (k % 3 == 2) {
                        c.allReduce(bufs[k], 64, DataType.INT32, ReduceOp.SUM);   // waits for the queued ones
                    } else {
                        pending.add(c.allReduceAsync(bufs[k], bufs[k], 64, DataType.INT32, ReduceOp.MAX));
                    }
                }
                CompletableFuture<Void> more = c.allReduceAsync(bufs[0], bufs[0], 64, DataType.INT32, ReduceOp.MIN);
                more.get(30, TimeUnit.SECONDS);
                for (CompletableFuture<Void> f : pending) {
                    f.get(30, TimeUnit.SECONDS);
                }
                // Nothing in flight any more: another thread may call now (while calls are in flight it is refused,
                // ConcurrentCallsTest).
                CompletableFuture<Void> fromOther = new CompletableFuture<>();
                Thread.ofPlatform().start(() -> {
                    try {
                        c.barrier();
                        fromOther.complete(null);
                    } catch (Throwable t) {
                        fromOther.completeExceptionally(t);
                    }
                });
                fromOther.get(30, TimeUnit.SECONDS);
                for (int k = 0; k < rounds; k++) {
                    for (int i = 0; i < 64; i++) {
                        int expect = k % 3 == 2 ? 2 * (k * 1000 + i) + 1 : k * 1000 + i + 1;
                        if (k == 0) {
                            expect = i + 1; // MAX, then MIN over equal values
                        }
                        assertEquals(expect, bufs[k].getAtIndex(java.lang.foreign.ValueLayout.JAVA_INT, i),
                            "buffer " + k + " element " + i);
                    }
                }
            }
        });
    }

    /** Mismatches at the inline path name both signatures on every rank (inline vs inline, staged, broadcast). */
    @Test
    void mismatchesAreDetected() throws Exception {
        long[][] counts = {{10, 11}, {10, 100_000}, {256, 257}};
        for (long[] pair : counts) {
            List<Throwable> results = FailureTest.outcomes(3, Ranks.loop().withAlgorithms(DIRECT), c -> {
                c.barrier();
                FailureTest.allReduceOnce(c, c.rank() == 1 ? pair[1] : pair[0]);
            });
            for (int r = 0; r < 3; r++) {
                Throwable e = results.get(r);
                assertInstanceOf(CollectiveException.class, e, "rank " + r + " counts " + pair[0] + "/" + pair[1]);
                assertTrue(e.getMessage().contains("count=" + pair[0]) && e.getMessage().contains("count=" + pair[1]),
                    "rank " + r + ": " + e.getMessage());
            }
        }
        List<Throwable> results = FailureTest.outcomes(2, Ranks.loop().withAlgorithms(DIRECT), c -> {
            if (c.rank() == 0) {
                FailureTest.allReduceOnce(c, 4);
            } else {
                try (Arena arena = Arena.ofConfined()) {
                    c.broadcast(arena.allocate(16), 4, DataType.FLOAT32, 0);
                }
            }
        });
        for (Throwable e : results) {
            assertInstanceOf(CollectiveException.class, e);
            assertTrue(e.getMessage().contains("allReduce(count=4") && e.getMessage().contains("broadcast(count=4"),
                e.getMessage());
        }
    }

    /** A rank that never arrives: the inline wait times out naming it; an abort from another thread ends it. */
    @Test
    void timeoutsAndAbortsEndInlineWaits() throws Exception {
        long start = System.nanoTime();
        List<Throwable> results = FailureTest.outcomes(2, Ranks.loop().withAlgorithms(DIRECT)
            .withTimeout(Duration.ofMillis(600)), c -> {
            FailureTest.allReduceOnce(c, 2);
            if (c.rank() == 1) {
                Thread.sleep(2500);
                return;
            }
            FailureTest.allReduceOnce(c, 2);
        });
        assertInstanceOf(CollectiveException.Timeout.class, results.get(0));
        assertTrue(results.get(0).getMessage().contains("rank 1"), results.get(0).getMessage());
        assertTrue(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start) < 10_000);

        List<Throwable> aborted = FailureTest.outcomes(2, Ranks.loop().withAlgorithms(DIRECT), c -> {
            if (c.rank() == 1) {
                Thread.sleep(1500);
                return;
            }
            CompletableFuture<Void> f = c.allReduceAsync(MemorySegment.ofArray(new float[4]),
                MemorySegment.ofArray(new float[4]), 4, DataType.FLOAT32, ReduceOp.SUM);
            Thread.sleep(100);
            long t0 = System.nanoTime();
            c.abort("user abort");
            try {
                f.get(5, TimeUnit.SECONDS);
            } catch (java.util.concurrent.ExecutionException e) {
                assertTrue(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0) < 2000);
                throw (Exception) e.getCause();
            }
        });
        assertInstanceOf(CollectiveException.Aborted.class, aborted.get(0));

        // A peer that aborts while this rank waits in an inline all-reduce: PeerFailure naming it, promptly.
        long t1 = System.nanoTime();
        List<Throwable> peer = FailureTest.outcomes(3, Ranks.loop().withAlgorithms(DIRECT), c -> {
            FailureTest.allReduceOnce(c, 3);
            if (c.rank() == 2) {
                Thread.sleep(300);
                c.abort("rank 2 gives up");
                return;
            }
            FailureTest.allReduceOnce(c, 3);
        });
        for (int r = 0; r < 2; r++) {
            assertInstanceOf(CollectiveException.PeerFailure.class, peer.get(r), "rank " + r);
            assertTrue(peer.get(r).getMessage().contains("rank 2"), peer.get(r).getMessage());
        }
        assertTrue(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t1) < 10_000);
    }

    /** Values written as the element type hold exactly (helper sanity for the tests above). */
    @Test
    void helpersRoundTrip() {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment s = arena.allocate(64);
            KernelsTest.set(DataType.FLOAT16, s, 0, -15);
            assertEquals(-15.0, KernelsTest.get(DataType.FLOAT16, s, 0));
        }
    }
}
