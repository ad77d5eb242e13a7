package io.jccl.collectives;

import io.jccl.collectives.store.PrefixStore;
import io.jccl.collectives.store.Store;
import io.jccl.collectives.store.TcpStore;
import org.junit.jupiter.api.Test;

import java.util.BitSet;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * An agreement through a store succession makes no new connection to a store this rank is connected to already:
 * it used to probe every store it opened with a connection of its own (the job's store, each later standby store it
 * looked at, the one it copied the decision to), cold, on the recovery path. A count of the server's accepted
 * connections, not a time.
 */
class SuccessionProbeTest {
    @Test
    void anAgreementThroughAConnectedStoreOpensNoConnection() {
        long second = TimeUnit.SECONDS.toNanos(1);
        long deadlineNs = System.nanoTime() + 30 * second;
        try (TcpStore primary = new TcpStore("127.0.0.1", 0, true, 5 * second)) {
            Store store = new PrefixStore("jccl/world", primary);
            try (StoreSuccession s = StoreSuccession.start(primary, store, 0, 1, 0, null, deadlineNs)) {
                store.setString("warm", "1", second); // the client is connected
                long before = primary.server().accepted();
                StoreSuccession.Located at = s.decide("agreement 1", (ns, moved) -> Shrink.decideOrMove(ns,
                    "agree1/", 0, 1, 5, new BitSet(), j -> false, 10 * second, deadlineNs, moved),
                    b -> new PrefixStore("jccl/world", b), "agree1/", 10 * second, deadlineNs);
                assertArrayEquals(new int[] {0}, at.decision().members());
                assertEquals(before, primary.server().accepted(), "connections accepted during the agreement");
            }
        }
    }
}
