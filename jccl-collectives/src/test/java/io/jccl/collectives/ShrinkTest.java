package io.jccl.collectives;

import io.jccl.collectives.store.InMemoryStore;
import io.jccl.collectives.store.Store;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@link Communicator#shrink}: the survivors of a lost rank (aborted in this JVM: its links break as a dead
 * process's do) build a communicator of the live ranks, renumbered, whose all-reduce gives the survivors' sum.
 * ResilienceProcessTest kills a process with kill -9.
 */
class ShrinkTest {
    static java.util.stream.Stream<org.junit.jupiter.params.provider.Arguments> transports() {
        return RevokeTest.transports();
    }

    /** In-place all-reduce of {@code value} (8 floats) on {@code c}; returns the result. */
    static float sum(Communicator c, float value) {
        float[] data = new float[8];
        Arrays.fill(data, value);
        c.allReduce(data, ReduceOp.SUM);
        for (float f : data) {
            assertEquals(data[0], f);
        }
        return data[0];
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("transports")
    void shouldShrinkToTheSurvivorsOfALostRank(String what, CommunicatorOptions options) throws Exception {
        lostRank(what, options, 3);
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("transports")
    void shouldRenumberTheSurvivorsWhenRankZeroIsLost(String what, CommunicatorOptions options) throws Exception {
        lostRank(what, options, 0);
    }

    /** 4 ranks; {@code victim} dies during an all-reduce; the 3 survivors shrink and all-reduce their old ranks + 1. */
    private static void lostRank(String what, CommunicatorOptions options, int victim) throws Exception {
        int n = 4;
        float expected = 0;
        for (int r = 0; r < n; r++) {
            expected += r == victim ? 0 : r + 1;
        }
        float want = expected;
        List<Throwable> results = FailureTest.outcomes(n, options, c -> {
            assertEquals(n * (n + 1) / 2f, sum(c, c.rank() + 1));
            if (c.rank() == victim) {
                c.abort("killed by the test"); // its links break as a dead process's do; it never shrinks
                return;
            }
            // the survivors' all-reduce cannot complete: it fails naming the victim
            CollectiveException.PeerFailure e = assertThrows(CollectiveException.PeerFailure.class,
                () -> FailureTest.allReduceOnce(c, 100_000));
            assertEquals(victim, e.rank(), e.getMessage());
            assertArrayEquals(new int[] {victim}, c.knownFailedRanks());
            try (Communicator s = c.shrink()) {
                assertEquals(n - 1, s.size());
                assertEquals(c.rank() < victim ? c.rank() : c.rank() - 1, s.rank(), "renumbered in old order");
                assertEquals(want, sum(s, c.rank() + 1), what);
                assertEquals(want, sum(s, c.rank() + 1), what + ", again");
                assertTrue(s.options().name().endsWith(".shrink1"), s.options().name());
            }
        });
        for (int r = 0; r < n; r++) {
            assertNull(results.get(r), what + ": rank " + r + ": " + results.get(r));
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("transports")
    void shouldExcludeNamedRanksAfterARevokeAndRefuseALateComer(String what, CommunicatorOptions options)
        throws Exception {
        int n = 4;
        CountDownLatch shrunk = new CountDownLatch(n - 1);
        List<Throwable> results = FailureTest.outcomes(n, options, c -> {
            sum(c, 1);
            if (c.rank() == 3) {
                // a straggler the others gave up on: it comes to the shrink after they agreed without it
                assertTrue(shrunk.await(60, TimeUnit.SECONDS));
                CollectiveException.Refused e = assertThrows(CollectiveException.Refused.class, c::shrink);
                assertTrue(e.getMessage().contains("left out"), e.getMessage());
                return;
            }
            if (c.rank() == 1) {
                c.revoke("rank 3 is too slow");
            } else {
                assertThrows(CollectiveException.Revoked.class, () -> FailureTest.allReduceOnce(c, 1000));
            }
            try (Communicator s = c.shrink(3)) {
                shrunk.countDown();
                assertEquals(3, s.size());
                assertEquals(c.rank(), s.rank());
                assertEquals(1f + 2f + 3f, sum(s, c.rank() + 1), what);
                // a shrunk communicator shrinks again: rank 2 leaves (named by the others, who revoke first)
                if (s.rank() == 2) {
                    s.abort("leaves");
                    return;
                }
                s.revoke("rank 2 leaves");
                try (Communicator t = s.shrink(2)) {
                    assertEquals(2, t.size());
                    assertEquals(1f + 2f, sum(t, c.rank() + 1), what + ", second shrink");
                    assertTrue(t.options().name().endsWith(".shrink1.shrink1"), t.options().name());
                }
            }
        });
        for (int r = 0; r < n; r++) {
            assertNull(results.get(r), what + ": rank " + r + ": " + results.get(r));
        }
    }

    @Test
    void shouldRejectBadArguments() throws Exception {
        List<Throwable> results = FailureTest.outcomes(2, Ranks.loop(), c -> {
            assertThrows(IllegalArgumentException.class, () -> c.shrink(c.rank()));
            assertThrows(IllegalArgumentException.class, () -> c.shrink(2));
            assertThrows(IllegalArgumentException.class, () -> c.shrink(-1));
        });
        for (Throwable t : results) {
            assertNull(t, String.valueOf(t));
        }
    }

    @Test
    void anAbortedRankCannotShrink() throws Exception {
        Store store = new InMemoryStore();
        try (Communicator c = Communicator.create(store, 0, 1, Ranks.loop())) {
            c.abort("gone");
            assertInstanceOf(CollectiveException.Aborted.class, assertThrows(CollectiveException.class, c::shrink));
        }
    }
}
