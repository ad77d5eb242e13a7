package io.jccl.transport.roce;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.VerbsException;
import io.jccl.verbs.WorkCompletion;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.lang.foreign.ValueLayout;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The context's socket I/O: FFM {@code sendmmsg} sends a message's packets with a handful of system calls, not one
 * per packet; each received packet's TOS byte reaches the context ({@code IP_RECVTOS}); the {@code DatagramChannel}
 * fallback ({@code JCCL_ROCE_IO=nio}) carries the same traffic; a polling application thread receives itself
 * (the receive thread stands by), and does not with {@code JCCL_ROCE_POLL_DRIVEN=0}; MTU defaults follow the link.
 */
class RoceBatchedIoTest {
    @AfterEach
    void clearProperties() {
        System.clearProperty("jccl.roce.io");
        System.clearProperty("jccl.roce.poll.driven");
        System.clearProperty("jccl.roce.gso");
        System.clearProperty("jccl.roce.poll.yield");
    }

    /** Two connected contexts with one QP each, a 1 MiB region on each side. */
    private record Pair(RoceContext ca, RoceContext cb, QueuePair a, QueuePair b, CompletionQueue qa,
                        CompletionQueue qb, MemoryRegion ma, MemoryRegion mb) implements AutoCloseable {
        static Pair open(int mtu) {
            RoceSettings settings = new RoceSettings("127.0.0.1", 0, mtu);
            RoceContext ca = (RoceContext) RoceProvider.device().open(settings);
            RoceContext cb = (RoceContext) RoceProvider.device().open(settings);
            LoopbackQueuePairs pair = LoopbackQueuePairs.connect(ca, cb, 64, AccessFlag.REMOTE_WRITE);
            ProtectionDomain pa = pair.pa();
            ProtectionDomain pb = pair.pb();
            CompletionQueue qa = pair.qa();
            CompletionQueue qb = pair.qb();
            QueuePair a = pair.a();
            QueuePair b = pair.b();
            MemoryRegion ma = pa.allocateMemory(1 << 20, AccessFlag.LOCAL_WRITE);
            MemoryRegion mb = pb.allocateMemory(1 << 20, AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE);
            return new Pair(ca, cb, a, b, qa, qb, ma, mb);
        }

        @Override
        public void close() {
            ca.close();
            cb.close();
        }

        /** A WRITE of {@code bytes} from a to b, then a SEND with a receive on b; both polled to completion. */
        void writeAndSend(int bytes, long seed) {
            for (int i = 0; i + 8 <= bytes; i += 8) {
                ma.segment().set(ValueLayout.JAVA_LONG_UNALIGNED, i, (i + seed) * 0x9E3779B97F4A7C15L);
            }
            a.postSend(new SendWorkRequest().opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
                .local(ma, 0, bytes).remote(mb.address(), mb.rkey()));
            awaitOne(qa, qb);
            assertEquals(-1L, mb.segment().asSlice(0, bytes).mismatch(ma.segment().asSlice(0, bytes)));
            b.postReceive(new ReceiveWorkRequest().local(mb, 0, 4096));
            a.postSend(new SendWorkRequest().opcode(SendOpcode.SEND).flags(SendFlag.SIGNALED).local(ma, 0, 100));
            awaitOne(qa, qb);
            awaitOne(qb, qa);
        }

        /** Polls {@code cq} (and {@code other}, as a single-threaded application with both ends would). */
        private static void awaitOne(CompletionQueue cq, CompletionQueue other) {
            WorkCompletion[] wc = WorkCompletion.array(1);
            WorkCompletion[] ignored = WorkCompletion.array(1);
            long deadline = System.nanoTime() + 30_000_000_000L; // a guard against hanging, not a timing assertion
            while (cq.poll(wc, 1) == 0) {
                assertEquals(0, other.poll(ignored, 0));
                assertTrue(System.nanoTime() < deadline, "no completion within 30 s");
                Thread.onSpinWait();
            }
            assertTrue(wc[0].isSuccess(), "completion " + wc[0].status());
        }
    }

    @Test
    void shouldSendTheManyPacketsOfAMessageWithFewSystemCalls() {
        assumeTrue(FfmUdpSocket.available(), "FFM sockets: " + FfmUdpSocket.unavailableReason());
        try (Pair p = Pair.open(4096)) {
            assertEquals("ffm", p.ca().ioKind());
            p.writeAndSend(1 << 20, 1);
            long before = p.ca().sendSystemCalls();
            int messages = 4;
            for (int i = 0; i < messages; i++) {
                p.writeAndSend(1 << 20, i + 2);
            }
            long calls = p.ca().sendSystemCalls() - before;
            long packets = messages * ((1 << 20) / 4096 + 1L); // 256 WRITE packets and one SEND each
            System.out.println("roce batched send: " + packets + " packets in " + calls + " send system calls; "
                + p.ca() + " / " + p.cb());
            // one call per window refill: the first 128 packets in two, then one per ACK (every 64 packets)
            assertTrue(calls * 8 <= packets, calls + " send system calls for " + packets + " packets");
        }
    }

    @Test
    void shouldSendEqualPacketsAsOneGsoDatagramAndReceiveThemAsOne() {
        assumeTrue(FfmUdpSocket.available(), "FFM sockets: " + FfmUdpSocket.unavailableReason());
        try (Pair p = Pair.open(4096)) {
            assumeTrue(p.ca().gso() && p.cb().gro(), "UDP GSO/GRO refused by this kernel: " + p.ca());
            p.writeAndSend(1 << 20, 1);
            long sent = p.ca().sendDatagrams();
            long packets = p.ca().counterSet().get(io.jccl.verbs.Counter.PORT_XMIT_PACKETS);
            long received = p.cb().receiveDatagrams();
            long receivedPackets = p.cb().counterSet().get(io.jccl.verbs.Counter.PORT_RCV_PACKETS);
            System.out.println("roce gso: " + packets + " packets in " + sent + " datagrams; received "
                + receivedPackets + " packets in " + received + " datagrams");
            // 14 MIDDLE packets and the LAST (or 15 MIDDLE) per datagram: a 1 MiB WRITE in about 19 datagrams;
            // every packet passed the receiver's ICRC check with identification = its segment index
            assertTrue(sent * 8 <= packets, sent + " datagrams for " + packets + " packets");
            assertTrue(received * 8 <= receivedPackets, received + " datagrams for " + receivedPackets + " packets");
            assertEquals(0, p.cb().counterSet().get(io.jccl.verbs.Counter.PORT_RCV_ERRORS));
        }
        System.setProperty("jccl.roce.gso", "0");
        try (Pair p = Pair.open(4096)) {
            assertTrue(!p.ca().gso() && !p.cb().gro());
            p.writeAndSend(1 << 20, 2);
            assertEquals(p.ca().counterSet().get(io.jccl.verbs.Counter.PORT_XMIT_PACKETS), p.ca().sendDatagrams());
        }
        System.setProperty("jccl.roce.gso", "2");
        VerbsException e = assertThrows(VerbsException.class,
            () -> RoceProvider.device().open(new RoceSettings("127.0.0.1", 0, 1024)));
        assertTrue(e.getMessage().contains("JCCL_ROCE_GSO"), e.getMessage());
    }

    @Test
    void shouldAcceptAPeersGsoSegmentsOnASocketWithoutGro() {
        assumeTrue(FfmUdpSocket.available(), "FFM sockets: " + FfmUdpSocket.unavailableReason());
        // a receives with GRO off: the kernel splits b's GSO sends, and each segment k arrives alone with
        // identification k, which a's check must find (b sends a 1 MiB WRITE and a SEND to a)
        System.setProperty("jccl.roce.gso", "0");
        RoceSettings settings = new RoceSettings("127.0.0.1", 0, 4096);
        RoceContext ca = (RoceContext) RoceProvider.device().open(settings);
        System.clearProperty("jccl.roce.gso");
        RoceContext cb = (RoceContext) RoceProvider.device().open(settings);
        try (Pair p = new Pair(ca, cb, null, null, null, null, null, null)) {
            assumeTrue(cb.gso(), "UDP GSO refused by this kernel");
            LoopbackQueuePairs pair = LoopbackQueuePairs.connect(cb, ca, 64, AccessFlag.REMOTE_WRITE);
            MemoryRegion mb = pair.pa().allocateMemory(1 << 20, AccessFlag.LOCAL_WRITE);
            MemoryRegion ma = pair.pb().allocateMemory(1 << 20, AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE);
            Pair q = new Pair(cb, ca, pair.a(), pair.b(), pair.qa(), pair.qb(), mb, ma);
            q.writeAndSend(1 << 20, 5);
            assertTrue(cb.sendDatagrams() * 8 <= cb.counterSet().get(io.jccl.verbs.Counter.PORT_XMIT_PACKETS),
                cb.toString());
            assertEquals(ca.receiveDatagrams(), ca.counterSet().get(io.jccl.verbs.Counter.PORT_RCV_PACKETS));
            assertEquals(0, ca.counterSet().get(io.jccl.verbs.Counter.PORT_RCV_ERRORS));
        }
    }

    @Test
    void shouldHandEachPacketsTosByteToTheContext() {
        assumeTrue(FfmUdpSocket.available(), "FFM sockets: " + FfmUdpSocket.unavailableReason());
        try (Pair p = Pair.open(1024)) {
            assertTrue(p.cb().reportsTos());
            p.ca().trafficClass(0x02); // ECT(0)
            p.writeAndSend(3000, 1);
            assertEquals(0x02, p.cb().lastTos());
            p.ca().trafficClass(0xB8 | 0x03); // DSCP EF, CE
            p.writeAndSend(100, 2);
            assertEquals(0xBB, p.cb().lastTos());
            assertThrows(VerbsException.class, () -> p.ca().trafficClass(256));
        }
    }

    @Test
    void shouldCarryTheSameTrafficThroughTheDatagramChannelFallback() {
        System.setProperty("jccl.roce.io", "nio");
        try (Pair p = Pair.open(1024)) {
            assertEquals("nio", p.ca().ioKind());
            assertTrue(!p.cb().reportsTos());
            p.writeAndSend(100_000, 3);
            assertEquals(-1, p.cb().lastTos());
            long packets = 100_000 / 1024 + 1 + 1;
            assertTrue(p.ca().sendSystemCalls() >= packets, "one send per packet: " + p.ca().sendSystemCalls());
        }
    }

    @Test
    void shouldRefuseAnUnknownIoSetting() {
        System.setProperty("jccl.roce.io", "dpdk");
        VerbsException e = assertThrows(VerbsException.class,
            () -> RoceProvider.device().open(new RoceSettings("127.0.0.1", 0, 1024)));
        assertTrue(e.getMessage().contains("JCCL_ROCE_IO"), e.getMessage());
    }

    @Test
    void shouldReceiveOnThePollingThreadUnlessTurnedOff() {
        try (Pair p = Pair.open(1024)) {
            for (int i = 0; i < 20; i++) {
                p.writeAndSend(5000, i);
            }
            assertTrue(p.ca().pollerDrives() > 0 && p.cb().pollerDrives() > 0, p.ca() + " / " + p.cb());
        }
        System.setProperty("jccl.roce.poll.driven", "0");
        try (Pair p = Pair.open(1024)) {
            for (int i = 0; i < 5; i++) {
                p.writeAndSend(5000, i);
            }
            assertEquals(0, p.ca().pollerDrives() + p.cb().pollerDrives());
        }
        System.setProperty("jccl.roce.poll.driven", "2");
        assertThrows(VerbsException.class, () -> RoceProvider.device().open(new RoceSettings("127.0.0.1", 0, 1024)));
    }

    @Test
    void shouldYieldTheCoreAfterPollsInARowThatFindNothing() {
        // Two busy-polling ends on one core hand over only when a time slice ends unless the idle one yields
        // (docs/transport-roce.md, "Two pollers on one core"): 640 empty polls yield 40 times at the default 16.
        WorkCompletion[] wc = WorkCompletion.array(1);
        try (Pair p = Pair.open(1024)) {
            p.writeAndSend(100, 1);
            long before = p.ca().pollerYields();
            for (int i = 0; i < 640; i++) {
                assertEquals(0, p.qa().poll(wc, 1));
            }
            long yields = p.ca().pollerYields() - before;
            long expected = 640 / RoceContext.POLL_YIELD_DEFAULT;
            // a held ACK that arrives during the polls restarts the count once: 39 or 40, never 0
            assertTrue(yields >= expected - 2 && yields <= expected, yields + " yields in 640 empty polls");
        }
        System.setProperty("jccl.roce.poll.yield", "0");
        try (Pair p = Pair.open(1024)) {
            p.writeAndSend(100, 2);
            for (int i = 0; i < 640; i++) {
                assertEquals(0, p.qa().poll(wc, 1));
            }
            assertEquals(0, p.ca().pollerYields());
        }
        System.setProperty("jccl.roce.poll.yield", "-1");
        assertThrows(VerbsException.class, () -> RoceProvider.device().open(new RoceSettings("127.0.0.1", 0, 1024)));
    }

    @Test
    void shouldMakeTheReceiveThreadStandByForAPollerThatFindsTheSocketBusy() {
        try (Pair p = Pair.open(1024)) {
            boolean claimed = false;
            // a few tries: the claim needs a datagram within the last 10 ms, which a descheduled test thread misses
            for (int attempt = 0; attempt < 5 && !claimed; attempt++) {
                p.writeAndSend(100, attempt);
                p.cb().holdReceiveForTest(); // stands in for a receive thread that holds the lock (its spin phase)
                try {
                    long before = System.nanoTime();
                    assertEquals(0, p.cb().driveFromPoller(), "the lock is held: nothing drained");
                    // the poller's claim is seen although it did not get the lock: the receive thread stands by
                    claimed = p.cb().lastPollerDriveNs() - before >= 0;
                } finally {
                    p.cb().releaseReceiveForTest();
                }
            }
            assertTrue(claimed, "a poller that found the receive lock taken left no claim");
        }
    }

    @Test
    void shouldPickTheLargestMtuWhoseDatagramsFitTheLink() {
        assertEquals(4096, RoceSettings.ibMtuFor(65536));
        assertEquals(4096, RoceSettings.ibMtuFor(9000));
        assertEquals(1024, RoceSettings.ibMtuFor(1500));
        assertEquals(256, RoceSettings.ibMtuFor(576));
        assertEquals(4096, RoceSettings.defaultPathMtuBytes("127.0.0.1")); // loopback: 65536
        assertEquals(RoceSettings.DEFAULT_PATH_MTU_BYTES, RoceSettings.defaultPathMtuBytes("192.0.2.1"));
    }
}
