package io.jccl.collectives;

import io.jccl.collectives.message.Peer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Rendezvous on the message path over tcp0: copied (not reduced) transfers from the threshold up are written
 * straight into the receiver's registered buffer after its clear-to-send, and the out-of-place ring all-reduce
 * reads its input where it is. Small chunks and a low threshold make a few hundred KiB exercise many pieces.
 */
class TcpRendezvousTest {
    private static final int CHUNK = 16 * 1024;
    private static final long THRESHOLD = 32 * 1024;
    /** Float counts per rank around the threshold and the chunk (below, at, between, many chunks, odd). */
    private static final int[] COUNTS = {1000, 8192, 8193, 20000, 65536, 3, 40001};

    private static CommunicatorOptions tcp(String algorithms) {
        return CommunicatorOptions.defaults().withTransports("tcp0").withShmDisabled(true).withDirectDisabled(true)
            .withChunking(CHUNK, 4).withRendezvousBytes(THRESHOLD).withAlgorithms(algorithms)
            .withTimeout(Duration.ofSeconds(30));
    }

    @ParameterizedTest(name = "{0} ranks")
    @ValueSource(ints = {2, 3})
    void shouldMoveLargeCollectivesByRendezvousBackToBackWithReusedBuffers(int n) {
        int rounds = 12;
        int max = 65536 * n;
        Ranks.run(n, tcp("allreduce:ring;broadcast:ring;allgather:ring"), c -> {
            try (Arena arena = Arena.ofConfined()) {
                // Plain native memory (registered remote-writable on first use, then cached) and allocate() memory.
                MemorySegment in = arena.allocate(4L * max, 64);
                MemorySegment out = arena.allocate(4L * max, 64);
                MemorySegment shared = c.allocate(4L * max);
                for (int k = 0; k < rounds * COUNTS.length; k++) {
                    int count = COUNTS[k % COUNTS.length];
                    int op = k % 4;
                    MemorySegment target = k % 3 == 0 ? shared : out;
                    switch (op) {
                        case 0 -> { // out of place: the ring reads `in` and never copies it into `target` first
                            fill(in, count, c.rank(), k);
                            target.fill((byte) 0x7f);
                            c.allReduce(in, target, count, DataType.FLOAT32, ReduceOp.SUM);
                            for (int i = 0; i < count; i++) {
                                float expected = 0;
                                for (int r = 0; r < n; r++) {
                                    expected += value(r, k, i);
                                }
                                check(c, k, "allReduce", i, expected, target.getAtIndex(ValueLayout.JAVA_FLOAT, i));
                            }
                            for (int i = 0; i < count; i++) {
                                check(c, k, "allReduce input", i, value(c.rank(), k, i),
                                    in.getAtIndex(ValueLayout.JAVA_FLOAT, i));
                            }
                        }
                        case 1 -> { // in place
                            fill(target, count, c.rank(), k);
                            c.allReduce(target, count, DataType.FLOAT32, ReduceOp.SUM);
                            for (int i = 0; i < count; i++) {
                                float expected = 0;
                                for (int r = 0; r < n; r++) {
                                    expected += value(r, k, i);
                                }
                                check(c, k, "allReduce in place", i, expected,
                                    target.getAtIndex(ValueLayout.JAVA_FLOAT, i));
                            }
                        }
                        case 2 -> {
                            int root = k % n;
                            if (c.rank() == root) {
                                fill(target, count, root, k);
                            } else {
                                target.fill((byte) 0x7f);
                            }
                            c.broadcast(target, count, DataType.FLOAT32, root);
                            for (int i = 0; i < count; i++) {
                                check(c, k, "broadcast", i, value(root, k, i),
                                    target.getAtIndex(ValueLayout.JAVA_FLOAT, i));
                            }
                        }
                        default -> {
                            int block = Math.min(count, max / n);
                            fill(in, block, c.rank(), k);
                            target.fill((byte) 0x7f);
                            c.allGather(in, target, block, DataType.FLOAT32);
                            for (int r = 0; r < n; r++) {
                                for (int i = 0; i < block; i++) {
                                    check(c, k, "allGather block " + r, i, value(r, k, i),
                                        target.getAtIndex(ValueLayout.JAVA_FLOAT, (long) r * block + i));
                                }
                            }
                        }
                    }
                }
                // The large copied transfers went by rendezvous, both ways, and nothing is left in flight.
                for (Peer p : c.messagePath().peers()) {
                    if (p == null || (n > 2 && p.rank() != (c.rank() + 1) % n && p.rank() != (c.rank() + n - 1) % n)) {
                        continue;
                    }
                    assertTrue(p.ctsSent() > 0 || p.ctsArrived() > 0, "no clear-to-send with rank " + p.rank());
                    assertEquals(p.piecesArrived(), p.piecesConsumed(), "pieces from rank " + p.rank());
                    assertEquals(p.ctsArrived(), p.ctsConsumed(), "clear-to-sends from rank " + p.rank());
                    assertEquals(0, p.sendsAwaited());
                }
                c.barrier();
            }
        });
    }

    @Test
    void shouldUseTheInboxBelowTheThresholdAndWhenRendezvousIsOff() {
        Ranks.run(2, tcp("broadcast:ring").withRendezvousBytes(0), c -> {
            MemorySegment buf = c.allocate(4L * 65536);
            fill(buf, 65536, 0, 1);
            c.broadcast(buf, 65536, DataType.FLOAT32, 0);
            for (int i = 0; i < 65536; i++) {
                check(c, 1, "broadcast", i, value(0, 1, i), buf.getAtIndex(ValueLayout.JAVA_FLOAT, i));
            }
            Peer p = c.messagePath().peers()[1 - c.rank()];
            assertEquals(0, p.ctsSent() + p.ctsArrived() + p.piecesArrived(), "rendezvous although off");
        });
        Ranks.run(2, tcp("broadcast:ring"), c -> {
            MemorySegment buf = c.allocate(THRESHOLD - 4);
            c.broadcast(buf, (THRESHOLD - 4) / 4, DataType.FLOAT32, 0);
            Peer p = c.messagePath().peers()[1 - c.rank()];
            assertEquals(0, p.ctsSent() + p.ctsArrived() + p.piecesArrived(), "rendezvous below the threshold");
        });
    }

    @Test
    void shouldDefaultToRendezvousOverTcpOnly() {
        CommunicatorOptions o = CommunicatorOptions.defaults();
        assertEquals(CommunicatorOptions.TCP_RENDEZVOUS_BYTES, o.rendezvousBytesFor("tcp0"));
        assertEquals(0, o.rendezvousBytesFor("shm0"));
        assertEquals(0, o.withRendezvousBytes(0).rendezvousBytesFor("tcp0"));
        assertEquals(4096, o.withRendezvousBytes(4096).rendezvousBytesFor("shm0"));
        assertTrue(!o.fingerprint().equals(o.withRendezvousBytes(4096).fingerprint()),
            "the threshold changes schedules: ranks must agree on it");
    }

    @Test
    void shouldReportMismatchedSizesInsteadOfWritingPastTheDestination() throws Exception {
        // Rank 1 offers room for fewer bytes than rank 0 sends: rank 0 must refuse to write, not overrun.
        List<Throwable> results = FailureTest.outcomes(2, tcp("broadcast:ring").withTimeout(Duration.ofSeconds(5)),
            c -> {
                int count = c.rank() == 0 ? 20000 : 19000;
                MemorySegment buf = c.allocate(4L * 20000);
                c.broadcast(buf, count, DataType.FLOAT32, 0);
            });
        assertInstanceOf(CollectiveException.class, results.get(0));
        assertInstanceOf(CollectiveException.class, results.get(1));
        assertTrue(results.get(0) instanceof CollectiveException.Mismatch, String.valueOf(results.get(0)));
    }

    @Test
    void shouldFailTheSurvivorWhenThePeerDiesMidTransfer() throws Exception {
        // Rank 1 posts its clear-to-send and goes away before the data arrived (abort closes its queue pair):
        // rank 0 is told that rank 1 is gone instead of waiting for the deadline.
        List<Throwable> results = FailureTest.outcomes(2, tcp("allgather:ring").withTimeout(Duration.ofSeconds(20)),
            c -> {
                MemorySegment in = c.allocate(4L * 200_000);
                MemorySegment out = c.allocate(8L * 200_000);
                c.allGather(in, out, 200_000, DataType.FLOAT32);
                if (c.rank() == 1) {
                    c.abort("rank 1 dies");
                    return;
                }
                long t0 = System.nanoTime();
                for (int k = 0; k < 1000; k++) {
                    c.allGather(in, out, 200_000, DataType.FLOAT32);
                }
                throw new AssertionError("1000 all-gathers with a dead peer took "
                    + (System.nanoTime() - t0) / 1_000_000 + " ms and succeeded");
            });
        Throwable e = results.get(0);
        assertNotNull(e);
        assertInstanceOf(CollectiveException.class, e, String.valueOf(e));
        assertTrue(e.getMessage().contains("rank 1"), e.getMessage());
        assertTrue(!(e instanceof CollectiveException.Timeout), "a dead peer must be detected, not timed out: " + e);
    }

    private static void fill(MemorySegment s, int count, int rank, int op) {
        for (int i = 0; i < count; i++) {
            s.setAtIndex(ValueLayout.JAVA_FLOAT, i, value(rank, op, i));
        }
    }

    private static float value(int rank, int op, int i) {
        return (rank + 1) * (op % 13 + 1) + i % 7;
    }

    private static void check(Communicator c, int op, String what, int i, float expected, float got) {
        if (got != expected) {
            throw new AssertionError("rank " + c.rank() + " op " + op + " " + what + " element " + i + ": " + got
                + ", expected " + expected);
        }
    }
}
