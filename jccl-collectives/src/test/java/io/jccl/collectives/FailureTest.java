package io.jccl.collectives;

import io.jccl.collectives.store.InMemoryStore;
import io.jccl.collectives.store.Store;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Never hang: mismatches, aborts, dead ranks and timeouts end every rank's wait with a clear error. */
class FailureTest {
    static final java.util.concurrent.Executor THREADS = r -> Thread.ofPlatform().daemon().start(r);

    interface RankBody {
        void run(Communicator c) throws Exception;
    }

    /** Runs ranks; returns each rank's outcome (null = success, else the exception) after at most 60 s. */
    static List<Throwable> outcomes(int n, CommunicatorOptions options, RankBody body) throws Exception {
        Store store = new InMemoryStore();
        List<CompletableFuture<Throwable>> futures = new ArrayList<>();
        for (int r = 0; r < n; r++) {
            int rank = r;
            CompletableFuture<Throwable> f = new CompletableFuture<>();
            Thread.ofPlatform().daemon().name("rank-" + r).start(() -> {
                Communicator c = null;
                try {
                    c = Communicator.create(store, rank, n, options);
                    body.run(c);
                    f.complete(null);
                } catch (Throwable e) {
                    f.complete(e);
                } finally {
                    if (c != null) {
                        c.abort("test over");
                        c.close();
                    }
                }
            });
            futures.add(f);
        }
        List<Throwable> out = new ArrayList<>();
        for (CompletableFuture<Throwable> f : futures) {
            out.add(f.get(60, TimeUnit.SECONDS));
        }
        return out;
    }

    static void allReduceOnce(Communicator c, long count) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment buf = arena.allocate(Math.max(1, count * 4));
            c.allReduce(buf, count, DataType.FLOAT32, ReduceOp.SUM);
        }
    }

    @Test
    void mismatchedCollectivesAreReportedOnEveryRankWithBothSignatures() throws Exception {
        for (String algo : new String[] {"", "allreduce:ring;broadcast:ring", CollectivesTest.DIRECT}) {
            // the warm-up's all-reduces at creation come first and count (Warmup.operations)
            int[] warmupOps = new int[4];
            List<Throwable> results = outcomes(4, Ranks.loop().withAlgorithms(algo), c -> {
                warmupOps[c.rank()] = Warmup.operations(c.warmupRounds);
                c.barrier();
                if (c.rank() < 2) {
                    allReduceOnce(c, 1000);
                } else {
                    try (Arena arena = Arena.ofConfined()) {
                        c.broadcast(arena.allocate(4000), 1000, DataType.FLOAT32, 0);
                    }
                }
            });
            for (int r = 0; r < 4; r++) {
                Throwable e = results.get(r);
                assertInstanceOf(CollectiveException.class, e, "rank " + r + " with '" + algo + "'");
                String m = e.getMessage();
                assertTrue(m.contains("allReduce(count=1000") && m.contains("broadcast(count=1000"),
                    "rank " + r + " (" + algo + ") should name both signatures: " + m);
                assertTrue(m.contains("op #" + (warmupOps[r] + 2)), m);
            }
        }
    }

    @Test
    void countMismatchIsDetected() throws Exception {
        List<Throwable> results = outcomes(3, Ranks.loop().withAlgorithms("allreduce:ring"), c ->
            allReduceOnce(c, c.rank() == 1 ? 999 : 1000));
        for (Throwable e : results) {
            assertInstanceOf(CollectiveException.class, e);
            assertTrue(e.getMessage().contains("count=999") && e.getMessage().contains("count=1000"), e.getMessage());
        }
    }

    @Test
    void peerAbortFailsWaitersPromptly() throws Exception {
        for (String algo : new String[] {"allreduce:ring", "allreduce:direct"}) {
            long start = System.nanoTime();
            List<Throwable> results = outcomes(4, Ranks.loop().withAlgorithms(algo), c -> {
                if (c.rank() == 0) {
                    Thread.sleep(300);
                    c.abort("rank 0 gives up");
                    return;
                }
                allReduceOnce(c, 100_000);
            });
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            for (int r = 1; r < 4; r++) {
                Throwable e = results.get(r);
                assertInstanceOf(CollectiveException.PeerFailure.class, e, "rank " + r + " " + algo);
                assertTrue(e.getMessage().contains("rank 0"), e.getMessage());
            }
            assertTrue(ms < 10_000, "took " + ms + " ms");
        }
    }

    @Test
    void localAbortFromAnotherThreadUnblocksTheWaiter() throws Exception {
        List<Throwable> results = outcomes(3, Ranks.loop(), c -> {
            if (c.rank() == 2) {
                Thread.sleep(1500); // never joins the all-reduce before everybody has given up
                return;
            }
            CompletableFuture<Void> pending = c.allReduceAsync(MemorySegment.ofArray(new float[64]),
                MemorySegment.ofArray(new float[64]), 64, DataType.FLOAT32, ReduceOp.SUM);
            Thread.sleep(200);
            long t0 = System.nanoTime();
            c.abort("user abort");
            ExecutionException e = assertThrows(ExecutionException.class, () -> pending.get(5, TimeUnit.SECONDS));
            assertTrue(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0) < 2000);
            assertInstanceOf(CollectiveException.class, e.getCause());
            assertTrue(e.getCause().getMessage().contains("user abort") || e.getCause() instanceof
                CollectiveException.PeerFailure, e.getCause().getMessage());
            // later operations fail at once
            assertThrows(CollectiveException.class, c::barrier);
        });
        assertTrue(results.get(0) == null, String.valueOf(results.get(0)));
        assertTrue(results.get(1) == null, String.valueOf(results.get(1)));
    }

    @Test
    void deadRankFailsSurvivorsNamingIt() throws Exception {
        List<Throwable> results = outcomes(4, Ranks.loop().withAlgorithms("allreduce:ring"), c -> {
            allReduceOnce(c, 10);
            if (c.rank() == 3) {
                // "dies": its queue pairs and memory vanish without a word
                c.close();
                return;
            }
            allReduceOnce(c, 200_000);
        });
        for (int r = 0; r < 3; r++) {
            Throwable e = results.get(r);
            assertInstanceOf(CollectiveException.PeerFailure.class, e, "rank " + r);
        }
        // the ring neighbours of rank 3 name it
        assertTrue(results.get(0).getMessage().contains("rank 3") || results.get(2).getMessage().contains("rank 3"));
    }

    @Test
    void timeoutNamesWhatItWaitedFor() throws Exception {
        long start = System.nanoTime();
        List<Throwable> results = outcomes(3, Ranks.loop().withTimeout(Duration.ofMillis(800))
            .withAlgorithms("allreduce:ring"), c -> {
            if (c.rank() == 1) {
                Thread.sleep(3000); // alive but never calls
                return;
            }
            allReduceOnce(c, 100);
        });
        long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
        Throwable e = results.get(2);
        assertInstanceOf(CollectiveException.class, e);
        // Rank 2 receives from rank 1 in the ring. Whether its own deadline fired first or rank 0's timeout broke
        // the links before it, its report names what it was waiting for: the rank that never came.
        assertTrue(e.getMessage().contains("data from rank 1"), e.getMessage());
        assertTrue(ms < 10_000, "took " + ms);
        assertTrue(results.get(0) instanceof CollectiveException.Timeout
            || results.get(2) instanceof CollectiveException.Timeout);
    }

    @Test
    void brokenLinkReportSaysWhatThisRankWaitedFor() throws Exception {
        // Rank 2 joins 400 ms late, so rank 0 (waiting for rank 2's ring data) times out first and breaks its
        // links while rank 2 still waits for rank 1, which never calls. Rank 2 fails on the broken link, not on its
        // own deadline, and must still name rank 1.
        List<Throwable> results = outcomes(3, Ranks.loop().withTimeout(Duration.ofMillis(800))
            .withAlgorithms("allreduce:ring"), c -> {
            if (c.rank() == 1) {
                Thread.sleep(3000);
                return;
            }
            if (c.rank() == 2) {
                Thread.sleep(400);
            }
            allReduceOnce(c, 100);
        });
        assertInstanceOf(CollectiveException.Timeout.class, results.get(0), String.valueOf(results.get(0)));
        Throwable e = results.get(2);
        assertInstanceOf(CollectiveException.PeerFailure.class, e, String.valueOf(e));
        assertTrue(e.getMessage().contains("rank 2 was waiting for data from rank 1"), e.getMessage());
    }

    @Test
    void otherJobsAndWrongSecretsAreRefused() throws Exception {
        List<Throwable> jobs = outcomes(2, Ranks.loop().withTimeout(Duration.ofSeconds(5)), c -> { });
        assertTrue(jobs.get(0) == null && jobs.get(1) == null);
        Store store = new InMemoryStore();
        CompletableFuture<Throwable> a = CompletableFuture.supplyAsync(() -> tryJoin(store, 0,
            Ranks.loop().withJobId("jobA")), THREADS);
        CompletableFuture<Throwable> b = CompletableFuture.supplyAsync(() -> tryJoin(store, 1,
            Ranks.loop().withJobId("jobB")), THREADS);
        Throwable ea = a.get(30, TimeUnit.SECONDS);
        assertInstanceOf(CollectiveException.Refused.class, ea);
        assertTrue(ea.getMessage().contains("jobB") && ea.getMessage().contains("jobA"), ea.getMessage());
        assertInstanceOf(CollectiveException.Refused.class, b.get(30, TimeUnit.SECONDS));

        Store store2 = new InMemoryStore();
        CompletableFuture<Throwable> good = CompletableFuture.supplyAsync(() -> tryJoin(store2, 0,
            Ranks.loop().withAuthSecret("s3cret")), THREADS);
        CompletableFuture<Throwable> bad = CompletableFuture.supplyAsync(() -> tryJoin(store2, 1,
            Ranks.loop().withAuthSecret("guess")), THREADS);
        Throwable eg = good.get(30, TimeUnit.SECONDS);
        assertInstanceOf(CollectiveException.Refused.class, eg);
        assertTrue(eg.getMessage().contains("JCCL_AUTH_SECRET"), eg.getMessage());
        assertInstanceOf(CollectiveException.Refused.class, bad.get(30, TimeUnit.SECONDS));

        Store store3 = new InMemoryStore();
        CompletableFuture<Throwable> s1 = CompletableFuture.supplyAsync(() -> tryJoin(store3, 0,
            Ranks.loop().withAuthSecret("s3cret")), THREADS);
        CompletableFuture<Throwable> s2 = CompletableFuture.supplyAsync(() -> tryJoin(store3, 1,
            Ranks.loop().withAuthSecret("s3cret")), THREADS);
        assertTrue(s1.get(30, TimeUnit.SECONDS) == null && s2.get(30, TimeUnit.SECONDS) == null);
    }

    private static Throwable tryJoin(Store store, int rank, CommunicatorOptions o) {
        try (Communicator c = Communicator.create(store, rank, 2, o)) {
            c.barrier();
            return null;
        } catch (Throwable e) {
            return e;
        }
    }

    /**
     * Only every Communicator.TIMED_EVERY-th operation reads the clock at its start; the others are timed from their
     * first wait that outlasts the spin, so an operation that waited for a late peer still shows how long.
     */
    @Test
    void flightRecorderTimesSampledOperationsAndEveryOperationThatWaits() throws Exception {
        outcomes(2, Ranks.loop(), c -> {
            int ops = 2 * Communicator.TIMED_EVERY;
            for (int i = 0; i < ops; i++) {
                allReduceOnce(c, 2);
            }
            // rank 1 arrives 30 ms late: rank 0's all-reduce waits past its spin and is timed from there
            if (c.rank() == 1) {
                try {
                    Thread.sleep(30);
                } catch (InterruptedException e) {
                    throw new AssertionError(e);
                }
            }
            allReduceOnce(c, 2);
            List<String> lines = c.flightRecorder().dump();
            long timed = lines.stream().limit(ops).filter(l -> l.contains("issued=+")).count();
            assertTrue(timed >= 2, "no sampled operation among " + ops + ": " + lines);
            assertTrue(lines.stream().limit(ops).anyMatch(l -> l.contains("untimed") && l.contains("COMPLETED")),
                String.valueOf(lines));
            if (c.rank() == 0) {
                String late = lines.getLast();
                java.util.regex.Matcher m = java.util.regex.Pattern.compile("took=([0-9.]+)us").matcher(late);
                assertTrue(m.find(), "the operation that waited is not timed: " + late);
                assertTrue(Double.parseDouble(m.group(1)) > 10_000, "it waited about 30 ms: " + late);
            }
        });
    }

    @Test
    void flightRecorderKeepsTheLastOperations() throws Exception {
        outcomes(2, Ranks.loop(), c -> {
            for (int i = 0; i < 5; i++) {
                allReduceOnce(c, 10);
            }
            c.barrier();
            List<String> lines = c.flightRecorder().dump();
            assertTrue(lines.size() == 6, String.valueOf(lines));
            assertTrue(lines.get(0).startsWith("#1 allReduce count=10 float32 sum"), lines.get(0));
            assertTrue(lines.get(5).contains("barrier") && lines.get(5).contains("COMPLETED"), lines.get(5));
        });
    }
}
