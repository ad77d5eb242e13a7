package io.jccl.collectives;

import io.jccl.collectives.store.InMemoryStore;
import io.jccl.collectives.store.Store;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A shrink's new communicator whose member dies after writing its join records but before the first barrier: the
 * barrier fails at once, naming it, when the join's watch says it is gone (its process exited, or its liveness port
 * refused). Over tcp0 between hosts such a member breaks no link (tcp0 connects lazily, and a peer that never
 * connects is only failed at the QP's connect deadline, JCCL_PEER_TIMEOUT): without the watch in the barrier's
 * health checks the survivor waited 30 s (fault-injection seed 66006), and the others agreed without it meanwhile.
 * Here the member is a thread stalled in the store after its CPU-placement record, so it never reaches the barrier.
 * Without the check the survivor fails after the join's bound (30 s here) with a timeout instead of a peer failure
 * naming the member: the assertion is on the kind of failure, not on a clock.
 */
class JoinWatchBarrierTest {
    static java.util.stream.Stream<org.junit.jupiter.params.provider.Arguments> transports() {
        return RevokeTest.transports();
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("transports")
    @Timeout(value = 90, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
    void theFirstBarrierFailsNamingAMemberTheWatchKnowsGone(String what, CommunicatorOptions options) throws Exception {
        long joinBoundNs = TimeUnit.SECONDS.toNanos(30);
        try (InMemoryStore base = new InMemoryStore()) {
            AtomicBoolean stalled = new AtomicBoolean();
            CountDownLatch release = new CountDownLatch(1);
            Store stalling = new StallAfterPlacement(base, stalled, release);
            CompletableFuture<Throwable> member = new CompletableFuture<>();
            Thread.ofPlatform().daemon().name("member-1").start(() -> {
                try (Communicator c = Communicator.create(stalling, null, 1, 2, options, joinBoundNs, null)) {
                    member.complete(null);
                } catch (Throwable e) {
                    member.complete(e);
                }
            });
            JoinWatchStore watch = new JoinWatchStore(base, 2, 0, j -> j == 1 && stalled.get());
            Throwable failure = null;
            try (Communicator c = Communicator.create(watch, null, 0, 2, options, joinBoundNs, null)) {
                // nothing: the barrier must not complete without member 1
            } catch (Throwable e) {
                failure = e;
            } finally {
                release.countDown();
            }
            CollectiveException.PeerFailure e = assertInstanceOf(CollectiveException.PeerFailure.class, failure,
                what + ": " + failure);
            assertEquals(1, e.rank(), e.getMessage());
            assertTrue(e.getMessage().contains("before the first barrier"), e.getMessage());
            assertTrue(stalled.get(), "the member stalled after its placement record");
            member.get(60, TimeUnit.SECONDS); // it ends (with whatever error) once released
        }
    }

    /**
     * Member 1's store: once it wrote its CPU placement, its next call marks it stalled and waits until released,
     * then fails. Stalled only after the write completed: the survivor must find the record and reach the barrier.
     */
    private static final class StallAfterPlacement extends HookedStore {
        private final AtomicBoolean stalled;
        private final CountDownLatch release;
        private volatile boolean placed;

        StallAfterPlacement(Store inner, AtomicBoolean stalled, CountDownLatch release) {
            super(inner);
            this.stalled = stalled;
            this.release = release;
        }

        @Override
        void before(String operation, String key) {
            if (placed) {
                stalled.set(true);
                try {
                    release.await();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                throw new IllegalStateException("member 1 was stalled by the test");
            }
            if (operation.equals("set") && key.endsWith("/cpus/1")) {
                placed = true;
            }
        }
    }
}
