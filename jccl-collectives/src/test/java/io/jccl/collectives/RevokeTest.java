package io.jccl.collectives;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@link Communicator#revoke}: every rank's pending and later operations fail with
 * {@link CollectiveException.Revoked} naming the revoker, over the direct path (loop), shared memory and tcp.
 */
class RevokeTest {
    /** Long enough that a rank ended by its timeout instead of the revocation fails the type check, not a clock. */
    private static final Duration TIMEOUT = Duration.ofSeconds(60);

    static Stream<Arguments> transports() {
        return Stream.of(
            Arguments.of("loop, direct path", Ranks.loop().withTimeout(TIMEOUT)),
            Arguments.of("shm, message path", CommunicatorOptions.defaults().withTransports("shm0")
                .withDirectDisabled(true).withTimeout(TIMEOUT)),
            Arguments.of("tcp, message path", CommunicatorOptions.defaults().withTransports("tcp0")
                .withShmDisabled(true).withDirectDisabled(true).withTimeout(TIMEOUT)));
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("transports")
    void shouldFailEveryRankWaitingInAnAllReduceWithRevoked(String what, CommunicatorOptions options)
        throws Exception {
        int n = 4;
        int revoker = 1;
        List<Throwable> results = FailureTest.outcomes(n, options, c -> {
            FailureTest.allReduceOnce(c, 10);
            if (c.rank() == revoker) {
                // the others are in (or entering) the all-reduce this rank never joins
                Thread.sleep(300);
                c.revoke("loss went NaN");
                assertTrue(c.isRevoked());
                // later calls fail at once, and the communicator is still open (not aborted, not closed)
                CollectiveException.Revoked e = assertThrows(CollectiveException.Revoked.class,
                    () -> FailureTest.allReduceOnce(c, 10));
                assertEquals(revoker, e.revoker());
                return;
            }
            FailureTest.allReduceOnce(c, 100_000);
        });
        assertNull(results.get(revoker), what + ": " + results.get(revoker));
        for (int r = 0; r < n; r++) {
            if (r == revoker) {
                continue;
            }
            Throwable e = results.get(r);
            CollectiveException.Revoked revoked = assertInstanceOf(CollectiveException.Revoked.class, e,
                what + ": rank " + r + " should fail with Revoked, got " + e);
            assertEquals(revoker, revoked.revoker(), what + ": rank " + r + ": " + e.getMessage());
            assertEquals("loss went NaN", revoked.reason(), e.getMessage());
        }
    }

    /**
     * The ranks a waiter depends on may be healthy and unaware (rank 3 is busy elsewhere): the waiter still learns of
     * the revocation from the revoker (any peer's notice or status word), not only from the peers it waits for.
     */
    @ParameterizedTest(name = "{0}")
    @MethodSource("transports")
    void shouldFailAWaiterWhosePeersAreHealthyButBusy(String what, CommunicatorOptions options) throws Exception {
        int n = 4;
        java.util.concurrent.CountDownLatch failed = new java.util.concurrent.CountDownLatch(2);
        List<Throwable> results = FailureTest.outcomes(n, options, c -> {
            FailureTest.allReduceOnce(c, 10);
            switch (c.rank()) {
                case 1 -> c.revoke("operator said stop");
                case 3 -> {
                    // busy until the waiters have failed; then it learns of the revocation at its next call
                    assertTrue(failed.await(50, TimeUnit.SECONDS), "the waiters did not fail");
                    CollectiveException.Revoked e = assertThrows(CollectiveException.Revoked.class,
                        () -> FailureTest.allReduceOnce(c, 100_000));
                    assertEquals(1, e.revoker(), e.getMessage());
                }
                default -> {
                    try {
                        CollectiveException.Revoked e = assertThrows(CollectiveException.Revoked.class,
                            () -> FailureTest.allReduceOnce(c, 100_000));
                        assertEquals(1, e.revoker(), e.getMessage());
                    } finally {
                        failed.countDown();
                    }
                }
            }
        });
        for (int r = 0; r < n; r++) {
            assertNull(results.get(r), what + ": rank " + r + ": " + results.get(r));
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("transports")
    void shouldTolerateRevokingTwiceAndFromTwoRanksAtOnce(String what, CommunicatorOptions options)
        throws Exception {
        int n = 4;
        List<Throwable> results = FailureTest.outcomes(n, options, c -> {
            FailureTest.allReduceOnce(c, 10);
            if (c.rank() == 0 || c.rank() == 2) {
                c.revoke("rank " + c.rank() + " gives up");
                c.revoke("again");
            }
            // everybody's next operation fails with a revocation by rank 0 or 2, never hangs or succeeds
            CollectiveException.Revoked e = assertThrows(CollectiveException.Revoked.class, c::barrier);
            assertTrue(e.revoker() == 0 || e.revoker() == 2, e.getMessage());
            if (c.rank() == 0 || c.rank() == 2) {
                assertEquals(c.rank(), e.revoker(), "a revoker keeps its own revocation: " + e.getMessage());
            }
            // and so does the one after it, at once
            assertThrows(CollectiveException.Revoked.class, () -> FailureTest.allReduceOnce(c, 10));
            assertTrue(c.isRevoked());
        });
        for (int r = 0; r < n; r++) {
            assertNull(results.get(r), what + ": rank " + r + ": " + results.get(r));
        }
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("transports")
    void shouldFailAPendingAsyncOperationOfTheRevokingRank(String what, CommunicatorOptions options)
        throws Exception {
        List<Throwable> results = FailureTest.outcomes(3, options, c -> {
            if (c.rank() != 0) {
                if (c.rank() == 2) {
                    Thread.sleep(1000); // joins late: rank 1 waits until rank 0 revokes
                }
                try {
                    FailureTest.allReduceOnce(c, 64);
                } catch (CollectiveException.Revoked expected) {
                    assertEquals(0, expected.revoker());
                }
                // rank 0 may have contributed before it revoked, so the all-reduce may complete on ranks 1 and 2
                // (as in ULFM, a revocation fails what cannot complete); the next operation cannot
                CollectiveException.Revoked e = assertThrows(CollectiveException.Revoked.class, c::barrier);
                assertEquals(0, e.revoker());
                return;
            }
            CompletableFuture<Void> pending = c.allReduceAsync(java.lang.foreign.MemorySegment.ofArray(new float[64]),
                java.lang.foreign.MemorySegment.ofArray(new float[64]), 64, DataType.FLOAT32, ReduceOp.SUM);
            Thread.sleep(200);
            c.revoke("watchdog");
            ExecutionException e = assertThrows(ExecutionException.class, () -> pending.get(30, TimeUnit.SECONDS));
            assertInstanceOf(CollectiveException.Revoked.class, e.getCause(), String.valueOf(e.getCause()));
        });
        for (int r = 0; r < 3; r++) {
            assertNull(results.get(r), what + ": rank " + r + ": " + results.get(r));
        }
    }
}
