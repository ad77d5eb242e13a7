package io.jccl.transport.roce;

import io.jccl.transport.roce.wire.UdpSourcePort;
import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.Counter;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.VerbsException;
import io.jccl.verbs.WorkCompletion;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.net.DatagramSocket;
import java.net.InetAddress;
import java.net.InetSocketAddress;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * Each QP sends from its pair's flow-label UDP source port ({@code JCCL_ROCE_FLOW_SPORT}, default 1) through a
 * send-only socket its context shares among the QPs that hash to the port; a port another program holds falls back
 * to the context's socket and is counted ({@code udp_sport_fallback}); 0 turns it off. Loopback, no root: the
 * capture test (RoceCaptureSystemTest) checks the ports on the wire.
 */
class RoceFlowSourcePortTest {
    private RoceContext ca;
    private RoceContext cb;

    @AfterEach
    void close() {
        System.clearProperty("jccl.roce.flow.sport");
        if (ca != null) {
            ca.close();
        }
        if (cb != null) {
            cb.close();
        }
    }

    private record Pair(ProtectionDomain pa, ProtectionDomain pb, CompletionQueue qa, QueuePair a, QueuePair b) {
        int flowPort() {
            return UdpSourcePort.of(0, a.queuePairNumber(), b.queuePairNumber());
        }

        void connect() {
            a.modify(QueuePairAttributes.toReadyToReceive(b.localEndpoint()));
            b.modify(QueuePairAttributes.toReadyToReceive(a.localEndpoint()));
            a.modify(QueuePairAttributes.toReadyToSend(a.initialPsn()));
            b.modify(QueuePairAttributes.toReadyToSend(b.initialPsn()));
        }

        /** A 20 KB WRITE a → b arrives bit-exact (the ACKs come back from b's port the same way). */
        void writeAndCheck() {
            MemoryRegion source = pa.allocateMemory(20_000, AccessFlag.LOCAL_WRITE);
            MemoryRegion target = pb.allocateMemory(20_000, AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE);
            for (int i = 0; i < 20_000; i++) {
                source.segment().set(java.lang.foreign.ValueLayout.JAVA_BYTE, i, (byte) (i * 31));
            }
            a.postSend(new SendWorkRequest().wrId(1).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
                .local(source, 0, 20_000).remote(target.address(), target.rkey()));
            WorkCompletion[] wc = WorkCompletion.array(1);
            long deadline = System.nanoTime() + 30_000_000_000L; // a guard against hanging, not a timing assertion
            while (qa.poll(wc, 1, 1_000_000L) == 0) {
                if (System.nanoTime() > deadline) {
                    fail("no completion within 30 s");
                }
            }
            assertTrue(wc[0].isSuccess(), wc[0].toString());
            assertEquals(-1, source.segment().mismatch(target.segment()));
        }
    }

    private Pair pair() {
        RoceSettings settings = new RoceSettings("127.0.0.1", 0, 1024);
        if (ca == null) {
            ca = (RoceContext) RoceProvider.device().open(settings);
            cb = (RoceContext) RoceProvider.device().open(settings);
        }
        ProtectionDomain pa = ca.allocateProtectionDomain();
        ProtectionDomain pb = cb.allocateProtectionDomain();
        CompletionQueue qa = ca.createCompletionQueue(16);
        CompletionQueue qb = cb.createCompletionQueue(16);
        QueuePair a = pa.createQueuePair(QueuePairInitAttributes.of(qa));
        QueuePair b = pb.createQueuePair(QueuePairInitAttributes.of(qb));
        a.modify(QueuePairAttributes.toInit(AccessFlag.REMOTE_WRITE));
        b.modify(QueuePairAttributes.toInit(AccessFlag.REMOTE_WRITE));
        return new Pair(pa, pb, qa, a, b);
    }

    private static long counter(RoceContext c, Counter counter) {
        return c.counters().getOrDefault(counter, 0L);
    }

    @Test
    void shouldSendFromTheFlowLabelPortAndCloseItWithTheLastQp() {
        Pair p = pair();
        p.connect();
        // both ends of a pair hash to the same port (the label is a product of the two QP numbers)
        assertEquals(p.flowPort(), ((RoceQueuePair) p.a()).txSourcePort());
        assertEquals(p.flowPort(), ((RoceQueuePair) p.b()).txSourcePort());
        assertEquals(1, ca.flowSocketCount());
        assertEquals(1, cb.flowSocketCount());
        p.writeAndCheck();
        assertEquals(0, counter(ca, Counter.UDP_SPORT_FALLBACK));
        assertEquals(0, counter(cb, Counter.PORT_RCV_ERRORS)); // the flow port passes B's peer check and ICRC
        assertEquals(0, counter(ca, Counter.PORT_RCV_ERRORS));
        p.a().close();
        p.b().close();
        assertEquals(0, ca.flowSocketCount());
        assertEquals(0, cb.flowSocketCount());
    }

    @Test
    void shouldSendGsoMessagesThroughTheFlowLabelSocket() {
        org.junit.jupiter.api.Assumptions.assumeTrue(FfmUdpSocket.available(), "FFM sockets unavailable");
        Pair p = pair();
        p.connect();
        UdpIo flow = ((RoceQueuePair) p.a()).txSocket();
        assertTrue(flow != null && flow.localPort() == p.flowPort(), "no flow-label socket");
        // the send-only socket probes UDP_SEGMENT where the context's socket has GSO
        assertEquals(ca.gso(), flow.gso());
        org.junit.jupiter.api.Assumptions.assumeTrue(ca.gso(), "UDP GSO refused by this kernel");
        long packetsBefore = counter(ca, Counter.PORT_XMIT_PACKETS);
        long datagramsBefore = ca.sendDatagrams();
        p.writeAndCheck(); // 20 packets at MTU 1024, queued by one post: GSO messages from the flow port
        long packets = counter(ca, Counter.PORT_XMIT_PACKETS) - packetsBefore;
        long datagrams = ca.sendDatagrams() - datagramsBefore;
        assertTrue(datagrams * 2 <= packets, datagrams + " datagrams for " + packets + " packets");
        assertEquals(0, counter(cb, Counter.PORT_RCV_ERRORS)); // each segment's ICRC with the flow port passes
    }

    @Test
    void shouldOpenTheFlowLabelSocketWithoutGsoWhenTurnedOff() {
        System.setProperty("jccl.roce.gso", "0");
        try {
            Pair p = pair();
            p.connect();
            UdpIo flow = ((RoceQueuePair) p.a()).txSocket();
            assertTrue(flow != null && !flow.gso() && !flow.gro(), "flow socket " + flow);
            p.writeAndCheck();
            assertEquals(counter(ca, Counter.PORT_XMIT_PACKETS), ca.sendDatagrams());
        } finally {
            System.clearProperty("jccl.roce.gso");
        }
    }

    @Test
    void shouldFallBackToTheContextPortWhenTheFlowPortIsTaken() throws Exception {
        Pair p = pair();
        // another program holds the port (no SO_REUSEPORT): both ends send from their context's port instead
        try (DatagramSocket blocker = new DatagramSocket(new InetSocketAddress(InetAddress.getLoopbackAddress(),
            p.flowPort()))) {
            p.connect();
            assertEquals(1, counter(ca, Counter.UDP_SPORT_FALLBACK));
            assertEquals(1, counter(cb, Counter.UDP_SPORT_FALLBACK));
            assertEquals(ca.localPort(), ((RoceQueuePair) p.a()).txSourcePort());
            assertEquals(0, ca.flowSocketCount());
            p.writeAndCheck();
            assertTrue(blocker.isBound());
        }
    }

    @Test
    void shouldSendFromTheContextPortWhenTurnedOff() {
        System.setProperty("jccl.roce.flow.sport", "0");
        Pair p = pair();
        p.connect();
        assertEquals(ca.localPort(), ((RoceQueuePair) p.a()).txSourcePort());
        assertEquals(0, ca.flowSocketCount());
        assertEquals(0, counter(ca, Counter.UDP_SPORT_FALLBACK));
        p.writeAndCheck();
    }

    @Test
    void shouldRefuseAnUnknownSetting() {
        System.setProperty("jccl.roce.flow.sport", "2");
        VerbsException e = assertThrows(VerbsException.class,
            () -> RoceProvider.device().open(new RoceSettings("127.0.0.1", 0, 1024)));
        assertTrue(e.getMessage().contains("JCCL_ROCE_FLOW_SPORT=2"), e.getMessage());
    }
}
