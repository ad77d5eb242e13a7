package io.jccl.collectives;

import io.jccl.collectives.store.PrefixStore;
import io.jccl.collectives.store.Store;
import io.jccl.collectives.store.TcpStore;
import org.junit.jupiter.api.Test;

import java.net.InetAddress;
import java.net.ServerSocket;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * An agreement's probe of a silent rank reads its liveness port from the job's store when it first needs it and
 * reports a refused port as gone; a listening one is not (issue 17: a rank on another host killed after the
 * revocation). The loop only bounds a hang; nothing is timed.
 */
class StoreSuccessionLivenessTest {
    @Test
    void aRankWhoseLivenessPortRefusesIsGoneAndALiveOneIsNot() throws Exception {
        long second = TimeUnit.SECONDS.toNanos(1);
        try (TcpStore primary = new TcpStore("127.0.0.1", 0, true, 5 * second)) {
            Store store = new PrefixStore("jccl/world", primary);
            try (StoreSuccession s = StoreSuccession.start(primary, store, 0, 3, 0, null,
                System.nanoTime() + 10 * second)) {
                store.setString("live/1", Liveness.listen(InetAddress.getLoopbackAddress()), second);
                int closed;
                try (ServerSocket gone = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
                    closed = gone.getLocalPort(); // what a killed process leaves on its host
                }
                store.setString("live/2", "127.0.0.1 " + closed, second);
                long until = System.nanoTime() + 30 * second;
                boolean oneGone = false;
                while (!s.refused(2) && System.nanoTime() - until < 0) {
                    oneGone |= s.refused(1);
                    Thread.sleep(10);
                }
                assertTrue(s.refused(2), "rank 2's refused liveness port was not reported");
                for (int i = 0; i < 40; i++) { // a few more probes of rank 1 (one per 100 ms)
                    oneGone |= s.refused(1);
                    Thread.sleep(10);
                }
                assertFalse(oneGone, "a listening rank was reported gone");
            }
        }
    }
}
