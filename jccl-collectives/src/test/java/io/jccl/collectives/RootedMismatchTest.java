package io.jccl.collectives;

import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertInstanceOf;

/**
 * Rooted collectives whose ranks disagree (on the root, the count or the type) fail on every rank, at the operation
 * itself: in a broadcast the root only sends and in a reduce the leaves only send, so without the signature round
 * those ranks returned normally while others held divergent data (over tcp, 4 ranks: all four returned for 4
 * floats, two or three of four for 512 floats to 1 MiB).
 */
class RootedMismatchTest {
    private static final int N = 4;

    private static CommunicatorOptions messagePath() {
        return Ranks.loop().withDirectDisabled(true).withTimeout(Duration.ofSeconds(20));
    }

    private static CommunicatorOptions tcp() {
        return CommunicatorOptions.defaults().withTransports("tcp0").withShmDisabled(true)
            .withTimeout(Duration.ofSeconds(20));
    }

    @Test
    void broadcastWithDifferentRootsFailsOnEveryRank() throws Exception {
        for (CommunicatorOptions options : List.of(messagePath(), tcp())) {
            for (String algo : new String[] {"broadcast:tree", "broadcast:ring"}) {
                for (long count : new long[] {4, 512, 256 * 1024}) {
                    everyRankFails(options.withAlgorithms(algo), algo + " count " + count, c -> {
                        try (Arena arena = Arena.ofConfined()) {
                            MemorySegment buf = arena.allocate(count * 4);
                            c.broadcast(buf, count, DataType.FLOAT32, c.rank() < 2 ? 0 : 1);
                        }
                    });
                }
            }
        }
    }

    @Test
    void reduceGatherAndScatterThatDisagreeFailOnEveryRank() throws Exception {
        CommunicatorOptions options = messagePath();
        everyRankFails(options, "reduce, different roots", c -> {
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment buf = arena.allocate(4096);
                c.reduce(buf, buf, 1024, DataType.FLOAT32, ReduceOp.SUM, c.rank() == 3 ? 3 : 0);
            }
        });
        everyRankFails(options, "gather, different counts", c -> {
            try (Arena arena = Arena.ofConfined()) {
                long count = c.rank() == 1 ? 10 : 12;
                c.gather(arena.allocate(48), arena.allocate(48 * N), count, DataType.FLOAT32, 0);
            }
        });
        everyRankFails(options, "scatter, different types", c -> {
            try (Arena arena = Arena.ofConfined()) {
                DataType type = c.rank() == 2 ? DataType.INT32 : DataType.FLOAT32;
                c.scatter(arena.allocate(64 * N), arena.allocate(64), 16, type, 0);
            }
        });
    }

    @Test
    void agreeingRootedCollectivesStillWork() throws Exception {
        Ranks.run(N, messagePath(), c -> {
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment buf = arena.allocate(4096);
                for (int root = 0; root < N; root++) {
                    buf.fill((byte) (c.rank() == root ? root + 1 : 0));
                    c.broadcast(buf, 1024, DataType.FLOAT32, root);
                    for (long i = 0; i < 4096; i++) {
                        if (buf.get(java.lang.foreign.ValueLayout.JAVA_BYTE, i) != root + 1) {
                            throw new AssertionError("rank " + c.rank() + " root " + root + " byte " + i);
                        }
                    }
                }
            }
        });
    }

    private static void everyRankFails(CommunicatorOptions options, String what, FailureTest.RankBody body)
        throws Exception {
        List<Throwable> results = FailureTest.outcomes(N, options, c -> {
            c.barrier();
            body.run(c);
        });
        for (int r = 0; r < N; r++) {
            assertInstanceOf(CollectiveException.class, results.get(r), "rank " + r + " returned normally: " + what);
        }
    }
}
