package io.jccl.collectives;

import io.jccl.collectives.store.PrefixStore;
import io.jccl.collectives.store.Store;
import io.jccl.collectives.store.TcpStore;
import io.jccl.collectives.store.TcpStoreServer;
import org.junit.jupiter.api.Test;

import java.net.InetAddress;
import java.util.concurrent.TimeUnit;
import java.util.function.UnaryOperator;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * A decision is made durable on the next live store before it is returned, so that a rank that fails over after
 * the deciding store's host left reads the same decision there instead of deciding again without the ranks that
 * left (fault injection over tcp0: two ranks returned different member lists).
 */
class DecisionCopyTest {
    private static final long SECOND = TimeUnit.SECONDS.toNanos(1);
    private static final UnaryOperator<Store> NS = b -> new PrefixStore("jccl/world", b);

    @Test
    void theDecisionIsCopiedToTheNextStoreAndAnEarlierOneThereWins() {
        try (TcpStore job = new TcpStore("127.0.0.1", 0, true, 5 * SECOND);
             TcpStoreServer standby = new TcpStoreServer(InetAddress.getLoopbackAddress(), 0);
             TcpStore standbyClient = new TcpStore("127.0.0.1", standby.port(), false, 5 * SECOND)) {
            String list = "0@127.0.0.1:" + job.port() + ",1@127.0.0.1:" + standby.port();
            try (StoreSuccession s = StoreSuccession.fromDescription(list, job, 0, null)) {
                StoreSuccession.Located at = s.decide("agreement 1", (ns, moved) -> new Shrink.Decision(new int[] {0, 1},
                    1), NS, "agree1/", 5 * SECOND, System.nanoTime() + 30 * SECOND);
                assertEquals(0, at.index());
                assertEquals("0,1;1", NS.apply(standbyClient).getString("agree1/members", SECOND));
                // the others failed over and decided on the next store first: that decision is the one returned
                NS.apply(standbyClient).setString("agree2/members", "1;0", SECOND);
                StoreSuccession.Located later = s.decide("agreement 2", (ns, moved) -> new Shrink.Decision(
                    new int[] {0, 1}, 1), NS, "agree2/", 5 * SECOND, System.nanoTime() + 30 * SECOND);
                assertArrayEquals(new int[] {1}, later.decision().members());
            }
        }
    }
}
