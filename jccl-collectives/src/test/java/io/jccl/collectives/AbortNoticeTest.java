package io.jccl.collectives;

import io.jccl.collectives.store.Store;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The rank that gave up first travels with the broken links: when the store is gone (it lives in rank 0, which may
 * be the rank that died), every survivor still names the origin and its reason, including ranks that never talked
 * to it and only saw a neighbour's links break.
 */
class AbortNoticeTest {
    /** A store that stops answering once severed, as when the rank hosting it dies. */
    static final class Severable extends HookedStore {
        volatile boolean severed;

        Severable(Store inner) {
            super(inner);
        }

        @Override
        void before(String operation, String key) {
            if (severed) {
                throw new IllegalStateException("store unreachable (severed by the test)");
            }
        }
    }

    private static final String REASON = "checkpoint disk full";
    private static final int ORIGIN = 1;

    @Test
    void shouldNameTheOriginOverTheMessagePath() {
        everySurvivorNamesTheOrigin(CommunicatorOptions.defaults().withTransports("tcp0").withShmDisabled(true)
            .withDirectDisabled(true).withTimeout(Duration.ofSeconds(20)));
    }

    @Test
    void shouldNameTheOriginOverTheDirectPath() {
        everySurvivorNamesTheOrigin(Ranks.loop());
    }

    /**
     * A send to a peer that already gave up fails at once (shm0: the peer's QP state word says ERROR), and its error
     * completion can come out of the completion queue in one batch before the receive that holds the peer's notice:
     * the whole batch is handled before the failure is thrown, so the notice (here the only source: the store is
     * severed) still gives the reason.
     */
    @Test
    void aSendFailingBeforeThePeersNoticeIsReadStillReportsTheNotice() throws Exception {
        CommunicatorOptions options = CommunicatorOptions.defaults().withTransports("shm0").withDirectDisabled(true)
            .withTimeout(Duration.ofSeconds(20));
        java.util.concurrent.CountDownLatch gaveUp = new java.util.concurrent.CountDownLatch(1);
        Severable[] stores = new Severable[1];
        Map<Integer, Throwable> failures = new ConcurrentHashMap<>();
        Ranks.runWith(2, (s, r, size) -> {
            synchronized (stores) {
                if (stores[0] == null) {
                    stores[0] = new Severable(s);
                }
            }
            return Communicator.create(stores[0], r, size, options);
        }, c -> {
            c.barrier();
            if (c.rank() == ORIGIN) {
                stores[0].severed = true;
                c.abort(REASON);
                gaveUp.countDown();
                return;
            }
            try {
                assertTrue(gaveUp.await(20, java.util.concurrent.TimeUnit.SECONDS));
                FailureTest.allReduceOnce(c, 1 << 16);
            } catch (CollectiveException e) {
                failures.put(c.rank(), e);
            } catch (InterruptedException e) {
                throw new IllegalStateException(e);
            }
        });
        Throwable e = failures.get(0);
        assertNotNull(e, "rank 0 should have failed");
        assertEquals(ORIGIN, assertInstanceOf(CollectiveException.PeerFailure.class, e).rank(), e.getMessage());
        assertTrue(e.getMessage().contains(REASON), "rank 0 lost the reason: " + e.getMessage());
    }

    private static void everySurvivorNamesTheOrigin(CommunicatorOptions options) {
        int n = 4;
        Map<Integer, Throwable> failures = new ConcurrentHashMap<>();
        Severable[] stores = new Severable[1];
        Ranks.runWith(n, (s, r, size) -> {
            synchronized (stores) {
                if (stores[0] == null) {
                    stores[0] = new Severable(s);
                }
            }
            return Communicator.create(stores[0], r, size, options);
        }, c -> {
            int count = 1 << 18;
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment buf = arena.allocate(4L * count, 64);
                c.barrier();
                if (c.rank() == ORIGIN) {
                    stores[0].severed = true;
                    c.abort(REASON);
                    return;
                }
                try {
                    for (int i = 0; i < 100; i++) {
                        c.allReduce(buf, buf, count, DataType.FLOAT32, ReduceOp.SUM);
                    }
                } catch (CollectiveException e) {
                    failures.put(c.rank(), e);
                }
            }
        });
        for (int r = 0; r < n; r++) {
            if (r == ORIGIN) {
                continue;
            }
            Throwable e = failures.get(r);
            assertNotNull(e, "rank " + r + " should have failed");
            CollectiveException.PeerFailure pf = assertInstanceOf(CollectiveException.PeerFailure.class, e,
                "rank " + r + ": " + e);
            assertEquals(ORIGIN, pf.rank(), "rank " + r + " names the wrong rank: " + e.getMessage());
            assertTrue(e.getMessage().contains(REASON), "rank " + r + " lost the reason: " + e.getMessage());
        }
    }
}
