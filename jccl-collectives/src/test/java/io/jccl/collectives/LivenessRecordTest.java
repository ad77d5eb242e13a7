package io.jccl.collectives;

import io.jccl.collectives.store.InMemoryStore;
import io.jccl.collectives.store.PrefixStore;
import io.jccl.collectives.store.Store;
import io.jccl.collectives.store.TcpStore;
import org.junit.jupiter.api.Test;

import java.net.InetAddress;
import java.net.ServerSocket;
import java.util.BitSet;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The agreement's join records carry each rank's liveness address, so that a member killed after the decision is
 * found gone at the new join although the job's store, where the addresses were published, died with rank 0
 * (fault injection over tcp0 between namespaces, seed 66013: rank 0 killed, then rank 2 on the other host after the
 * decision; the survivors' join waited for rank 2 until its bound, 60 s). Here the job's store is closed before
 * rank 2's address is needed; without the records' copy nothing would probe it. The loop only bounds a hang.
 */
class LivenessRecordTest {
    @Test
    void aRanksAddressFromItsAgreementRecordIsProbedWithoutTheJobsStore() throws Exception {
        long second = TimeUnit.SECONDS.toNanos(1);
        int closed;
        try (ServerSocket gone = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            closed = gone.getLocalPort(); // what a killed process leaves on its host
        }
        TcpStore primary = new TcpStore("127.0.0.1", 0, true, 5 * second);
        Store store = new PrefixStore("jccl/world", primary);
        try (StoreSuccession s = StoreSuccession.start(primary, store, 0, 3, 0, null, System.nanoTime() + 10 * second);
             InMemoryStore standby = new InMemoryStore()) {
            // rank 2's record on the store that decides (a standby: rank 0's store died), with its address
            standby.setString("shrink1/join/1", "-1;", second);
            standby.setString("shrink1/join/2", "-1;;127.0.0.1 " + closed, second);
            Shrink.Decision d = Shrink.decideOrMove(standby, "shrink1/", 0, 3, -1, new BitSet(), j -> false,
                10 * second, System.nanoTime() + 10 * second, null, s.ownAddress(), s::learnAddress);
            assertArrayEquals(new int[] {0, 1, 2}, d.members());
            primary.close(); // the job's store dies (its host, rank 0, was killed)
            long until = System.nanoTime() + 30 * second;
            while (!s.refused(2) && System.nanoTime() - until < 0) {
                Thread.sleep(10);
            }
            assertTrue(s.refused(2), "rank 2's refused liveness port (address from its record) was not reported");
        }
    }

    /**
     * A standby store that refuses means its host rank is gone, although that rank's liveness address cannot be read
     * (seed 66044: rank 0, the job's store, killed, then rank 2, a standby store's host, 88 ms later, before it wrote
     * its agreement record; the survivors waited for it until JCCL_PEER_TIMEOUT, 30 s). Here rank 1's standby store
     * refuses: the agreement leaves rank 1 out at once instead of waiting an hour (the deadline, 20 s, would fail it).
     */
    @Test
    void aStandbyStoreThatRefusesMeansItsHostIsGone() throws Exception {
        long second = TimeUnit.SECONDS.toNanos(1);
        int closed;
        try (ServerSocket gone = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            closed = gone.getLocalPort(); // what a killed standby host leaves
        }
        try (TcpStore primary = new TcpStore("127.0.0.1", 0, true, 5 * second)) {
            Store store = new PrefixStore("jccl/world", primary);
            store.setString("standby/1", "127.0.0.1 " + closed, second); // rank 1 published it, then died
            long deadlineNs = System.nanoTime() + 20 * second;
            try (StoreSuccession s = StoreSuccession.start(primary, store, 0, 2, 1, null, deadlineNs)) {
                StoreSuccession.Located at = s.decide("shrink 1", (ns, moved) -> Shrink.decideOrMove(ns, "shrink1/",
                    0, 2, -1, new BitSet(), s::refused, TimeUnit.HOURS.toNanos(1), deadlineNs, moved),
                    b -> new PrefixStore("jccl/world", b), "shrink1/", TimeUnit.HOURS.toNanos(1), deadlineNs);
                assertArrayEquals(new int[] {0}, at.decision().members());
            }
        }
    }

    /**
     * The job's store refusing the client it served means its host, rank 0, is gone, although rank 0's liveness
     * address (published in that store) cannot be read any more (seed 66004: rank 2 killed, then rank 0 276 ms later;
     * the survivors waited for rank 0's agreement record until JCCL_PEER_TIMEOUT, 30 s).
     */
    @Test
    void theJobsStoreRefusingAfterServingMeansRank0IsGone() {
        long second = TimeUnit.SECONDS.toNanos(1);
        try (TcpStore primary = new TcpStore("127.0.0.1", 0, true, 5 * second)) {
            Store store = new PrefixStore("jccl/world", primary);
            try (StoreSuccession s = StoreSuccession.start(primary, store, 1, 2, 0, null,
                System.nanoTime() + 10 * second)) {
                primary.server().close(); // rank 0's process, the store's host, dies
                assertThrows(CollectiveException.class, () -> s.decide("shrink 1", (ns, moved) -> Shrink.decideOrMove(
                    ns, "shrink1/", 1, 2, -1, new BitSet(), j -> false, 10 * second, System.nanoTime() + 10 * second,
                    moved), b -> new PrefixStore("jccl/world", b), "shrink1/", 10 * second,
                    System.nanoTime() + 10 * second)); // no standby store here: no store left to decide through
                assertTrue(s.refused(0), "rank 0, whose store refused after serving, was not reported gone");
            }
        }
    }
}
