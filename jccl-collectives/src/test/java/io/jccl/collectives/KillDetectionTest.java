package io.jccl.collectives;

import io.jccl.collectives.store.InMemoryStore;
import io.jccl.collectives.store.Store;
import org.junit.jupiter.api.Test;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A kill is detected in milliseconds, not after a wait (issue 17's recovery time, docs/fault-tolerance.md
 * "Where the recovery time goes"): the steps between noticing a dead peer and failing the operation do not wait for
 * something a killed process never does.
 */
class KillDetectionTest {
    /** A store that records the keys of every call, over an in-memory one. */
    private static Store recording(Store inner, List<String> calls) {
        return (Store) Proxy.newProxyInstance(Store.class.getClassLoader(), new Class<?>[] {Store.class},
            (proxy, method, args) -> {
                if (args != null && args.length > 0 && args[0] instanceof String key) {
                    calls.add(method.getName() + " " + key);
                }
                try {
                    return method.invoke(inner, args);
                } catch (InvocationTargetException e) {
                    throw e.getCause();
                }
            });
    }

    /**
     * A peer failure looks once for the reason the peer published ({@code error/PEER}) and goes on: a killed peer
     * never publishes one, and the 500 ms this used to poll for it delayed the detection of every kill.
     */
    @Test
    void aPeerFailureLooksOnceForThePeersReasonInsteadOfWaitingForIt() {
        List<String> calls = new CopyOnWriteArrayList<>();
        try (Store store = recording(new InMemoryStore(), calls)) {
            Failures f = new Failures(0, 4, "kill", store, new FlightRecorder(4));
            CollectiveException e = f.failed(new CollectiveException.PeerFailure(2, "rank 2 closed the connection"),
                -1);
            assertInstanceOf(CollectiveException.PeerFailure.class, e);
            assertEquals(1, calls.stream().filter(c -> c.equals("check error/2")).count(), calls.toString());
            assertTrue(calls.stream().anyMatch(c -> c.startsWith("set") && c.endsWith(" error/0")), "this rank still publishes its own reason: " + calls);
        }
    }

    /** A reason the peer did publish (it gave up before it broke its links) is still reported with the failure. */
    @Test
    void aPublishedReasonIsStillReported() {
        try (Store store = new InMemoryStore()) {
            store.setString("error/2", "rank 2: out of memory", 1_000_000_000L);
            Failures f = new Failures(0, 4, "kill", store, new FlightRecorder(4));
            CollectiveException e = f.failed(new CollectiveException.PeerFailure(2, "rank 2 closed the connection"),
                -1);
            assertTrue(e.getMessage().contains("rank 2 reported: rank 2: out of memory"), e.getMessage());
        }
    }

    /**
     * A live peer whose link broke because it gave up on another rank (its abort notice, which says so, lost the race
     * with the failed request) is not blamed: its published report names the origin, and the failure names that rank
     * alone, so shrink keeps the messenger. CI caught ShrinkTest failing this way over shm once.
     */
    @Test
    void aPeerThatGaveUpBecauseOfAnotherRankIsNotBlamed() {
        try (Store store = new InMemoryStore()) {
            Failures peer = new Failures(1, 4, "kill", store, new FlightRecorder(4));
            peer.failed(new CollectiveException.PeerFailure(3, "rank 3 is unreachable: RETRY_EXC_ERR"), -1);
            Failures f = new Failures(0, 4, "kill", store, new FlightRecorder(4));
            CollectiveException e = f.failed(new CollectiveException.PeerFailure(1,
                "rank 1 is unreachable: a work request failed with RETRY_EXC_ERR"), -1);
            CollectiveException.PeerFailure pf = assertInstanceOf(CollectiveException.PeerFailure.class, e);
            assertEquals(3, pf.rank(), e.getMessage());
            assertTrue(e.getMessage().startsWith("rank 3 failed first (rank 1 gave up because of it: rank 3 is "
                + "unreachable"), e.getMessage());
            java.util.BitSet known = new java.util.BitSet();
            f.addKnownFailed(known);
            assertEquals("{3}", known.toString());
        }
    }

    /** A rank that failed on its own (or a report that names this rank or no valid rank) is still the one named. */
    @Test
    void aPeerThatFailedOnItsOwnIsNamed() {
        try (Store store = new InMemoryStore()) {
            new Failures(2, 4, "kill", store, new FlightRecorder(4)).abort("out of memory");
            store.setString("error/1", Failures.ORIGIN_HEADER + "0\nrank 0 is unreachable", 1_000_000_000L);
            store.setString("error/3", Failures.ORIGIN_HEADER + "9\nrank 9?", 1_000_000_000L);
            for (int peer : new int[] {1, 2, 3}) {
                CollectiveException e = new Failures(0, 4, "kill", store, new FlightRecorder(4))
                    .failed(new CollectiveException.PeerFailure(peer, "rank " + peer + " closed the connection"), -1);
                assertEquals(peer, assertInstanceOf(CollectiveException.PeerFailure.class, e).rank(), e.getMessage());
                assertTrue(e.getMessage().contains("rank " + peer + " reported: "), e.getMessage());
                assertFalse(e.getMessage().contains(Failures.ORIGIN_HEADER), e.getMessage());
            }
        }
    }

    /**
     * With the store gone (its host, rank 0, killed), the first report that finds it silent is the last one tried:
     * the revocation and later failures do not each wait out a store call's timeout on the way to the shrink.
     */
    @Test
    void aStoreThatDidNotAnswerIsNotAskedAgainByLaterReports() {
        List<String> calls = new CopyOnWriteArrayList<>();
        AbortNoticeTest.Severable severable = new AbortNoticeTest.Severable(new InMemoryStore());
        severable.severed = true;
        try (Store store = recording(severable, calls)) {
            Failures f = new Failures(1, 4, "kill", store, new FlightRecorder(4));
            f.failed(new CollectiveException.PeerFailure(0, "rank 0 closed the connection"), -1);
            int afterFailure = calls.size();
            f.revoke("recovering");
            f.failed(new CollectiveException.PeerFailure(2, "rank 2 closed the connection"), -1);
            assertEquals(1, afterFailure, "one store call found it silent: " + calls);
            assertEquals(afterFailure, calls.size(), "later reports skipped the silent store: " + calls);
        }
    }
}
