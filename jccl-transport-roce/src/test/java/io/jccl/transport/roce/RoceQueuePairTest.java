package io.jccl.transport.roce;

import io.jccl.transport.roce.wire.BthFlyweight;
import io.jccl.transport.roce.wire.Icrc;
import io.jccl.transport.roce.wire.RoceOpcode;
import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.Context;
import io.jccl.verbs.Counter;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.QueuePairState;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.VerbsException;
import io.jccl.verbs.WorkCompletion;
import io.jccl.verbs.WorkCompletionOpcode;
import io.jccl.verbs.WorkCompletionStatus;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.lang.foreign.ValueLayout;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.DatagramChannel;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * The minimal data path between two roce0 contexts on loopback (each on a free port, so runs never collide):
 * SEND/RECV and RDMA WRITE in one and in many packets, with immediate data, across the PSN wrap, through the ACK
 * window; responder errors come back as NAKs with the right completion; malformed datagrams are dropped and counted.
 */
class RoceQueuePairTest {
    private static final AccessFlag[] ALL = {AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ};

    private Context contextA;
    private Context contextB;

    /** One side: its context objects, a QP and its CQ. */
    private record Side(Context context, ProtectionDomain pd, CompletionQueue cq, QueuePair qp) {
        static Side create(Context context) {
            ProtectionDomain pd = context.allocateProtectionDomain();
            CompletionQueue cq = context.createCompletionQueue(4096);
            QueuePair qp = pd.createQueuePair(QueuePairInitAttributes.of(cq));
            qp.modify(QueuePairAttributes.toInit(AccessFlag.REMOTE_WRITE));
            return new Side(context, pd, cq, qp);
        }
    }

    private Side a;
    private Side b;

    /** Two contexts with port MTU {@code mtu}, one QP each, connected with start PSN {@code psn} both ways. */
    private void connect(int mtu, int psn) {
        RoceSettings settings = new RoceSettings("127.0.0.1", 0, mtu);
        contextA = RoceProvider.device().open(settings);
        contextB = RoceProvider.device().open(settings);
        a = Side.create(contextA);
        b = Side.create(contextB);
        a.qp().modify(QueuePairAttributes.toReadyToReceive(b.qp().localEndpoint()).rqPsn(psn));
        b.qp().modify(QueuePairAttributes.toReadyToReceive(a.qp().localEndpoint()).rqPsn(psn));
        a.qp().modify(QueuePairAttributes.toReadyToSend(psn));
        b.qp().modify(QueuePairAttributes.toReadyToSend(psn));
    }

    @AfterEach
    void close() {
        if (contextA != null) {
            contextA.close();
        }
        if (contextB != null) {
            contextB.close();
        }
    }

    /** Polls until one completion arrives (a guard against hanging, not a timing assertion). */
    private static WorkCompletion poll(CompletionQueue cq) {
        WorkCompletion[] wc = WorkCompletion.array(1);
        long deadline = System.nanoTime() + 20_000_000_000L;
        while (System.nanoTime() < deadline) {
            if (cq.poll(wc, 1, 1_000_000L) == 1) {
                return wc[0];
            }
        }
        fail("no completion within 20 s");
        return null;
    }

    private static WorkCompletion pollSuccess(CompletionQueue cq) {
        WorkCompletion wc = poll(cq);
        assertTrue(wc.isSuccess(), "completion " + wc.status() + " for wr " + wc.wrId());
        return wc;
    }

    private static void fill(MemoryRegion region, long seed) {
        SplittableRandom random = new SplittableRandom(seed);
        for (long i = 0; i < region.length(); i++) {
            region.segment().set(ValueLayout.JAVA_BYTE, i, (byte) random.nextInt(256));
        }
    }

    private static void assertSameBytes(MemoryRegion expected, long expectedOffset, MemoryRegion actual,
                                        long actualOffset, long length) {
        long mismatch = expected.segment().asSlice(expectedOffset, length)
            .mismatch(actual.segment().asSlice(actualOffset, length));
        assertEquals(-1, mismatch, "first differing byte");
    }

    @Test
    void shouldSendMessagesOfOneAndManyPackets() {
        connect(256, 0x123456);
        MemoryRegion source = a.pd().allocateMemory(4096, ALL);
        MemoryRegion target = b.pd().allocateMemory(4096, ALL);
        fill(source, 1);
        int[] sizes = {0, 1, 255, 256, 257, 1000, 4096};
        for (int size : sizes) {
            target.segment().fill((byte) 0);
            b.qp().postReceive(new ReceiveWorkRequest().wrId(size).local(target, 0, 4096));
            a.qp().postSend(new SendWorkRequest().wrId(size).opcode(SendOpcode.SEND_WITH_IMM)
                .immediateData(0xC0DE0000 | size).flags(SendFlag.SIGNALED).local(source, 0, size));
            assertEquals(size, pollSuccess(a.cq()).wrId());
            WorkCompletion recv = pollSuccess(b.cq());
            assertEquals(WorkCompletionOpcode.RECV, recv.opcode());
            assertEquals(size, recv.byteLength());
            assertTrue(recv.withImmediate());
            assertEquals(0xC0DE0000 | size, recv.immediateData());
            assertSameBytes(source, 0, target, 0, size);
        }
    }

    @Test
    void shouldWriteInOneAndManyPacketsAcrossThePsnWrap() {
        connect(1024, 0xFFFFF0); // the 100 KiB write below takes 100 PSNs, wrapping after 16
        MemoryRegion source = a.pd().allocateMemory(100 << 10, ALL);
        MemoryRegion target = b.pd().allocateMemory(200 << 10, ALL);
        fill(source, 2);
        a.qp().postSend(new SendWorkRequest().wrId(1).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
            .local(source, 0, 100).remote(target.address() + 7, target.rkey()));
        a.qp().postSend(new SendWorkRequest().wrId(2).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
            .local(source, 0, 100 << 10).remote(target.address() + (100 << 10), target.rkey()));
        assertEquals(1, pollSuccess(a.cq()).wrId());
        assertEquals(2, pollSuccess(a.cq()).wrId());
        assertSameBytes(source, 0, target, 7, 100);
        assertSameBytes(source, 0, target, 100 << 10, 100 << 10);
        assertEquals(0xFFFFF0 + 101 - 0x1000000, b.qp().query().rqPsn(), "the responder's PSN wrapped");
        // write with immediate consumes a receive and reports the immediate
        b.qp().postReceive(new ReceiveWorkRequest().wrId(9).local(target, 0, 0));
        a.qp().postSend(new SendWorkRequest().wrId(3).opcode(SendOpcode.RDMA_WRITE_WITH_IMM).immediateData(42)
            .flags(SendFlag.SIGNALED).local(source, 0, 3000).remote(target.address(), target.rkey()));
        assertEquals(3, pollSuccess(a.cq()).wrId());
        WorkCompletion recv = pollSuccess(b.cq());
        assertEquals(WorkCompletionOpcode.RECV_RDMA_WITH_IMM, recv.opcode());
        assertEquals(42, recv.immediateData());
        assertEquals(3000, recv.byteLength());
        assertSameBytes(source, 0, target, 0, 3000);
    }

    @Test
    void shouldKeepManyMessagesInOrderThroughTheAckWindow() {
        connect(1024, 0);
        int messages = 64;
        int size = 10_000; // 10 packets each: 640 packets, five times the 128-PSN window
        MemoryRegion source = a.pd().allocateMemory((long) messages * size, ALL);
        MemoryRegion target = b.pd().allocateMemory((long) messages * size, ALL);
        fill(source, 3);
        for (int k = 0; k < messages; k++) {
            b.qp().postReceive(new ReceiveWorkRequest().wrId(k).local(target, (long) k * size, size));
        }
        for (int k = 0; k < messages; k++) {
            a.qp().postSend(new SendWorkRequest().wrId(k).opcode(SendOpcode.SEND).flags(SendFlag.SIGNALED)
                .local(source, (long) k * size, size));
        }
        for (int k = 0; k < messages; k++) {
            assertEquals(k, pollSuccess(a.cq()).wrId());
            assertEquals(k, pollSuccess(b.cq()).wrId());
        }
        assertSameBytes(source, 0, target, 0, (long) messages * size);
        assertEquals(0, contextB.counters().get(Counter.PORT_RCV_ERRORS));
        assertEquals(0, contextB.counters().get(Counter.OUT_OF_SEQUENCE));
    }

    @Test
    void shouldCompleteWithRemoteAccessErrorForABadRkey() {
        connect(1024, 5);
        MemoryRegion source = a.pd().allocateMemory(4096, ALL);
        MemoryRegion target = b.pd().allocateMemory(4096, ALL);
        a.qp().postSend(new SendWorkRequest().wrId(1).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
            .local(source, 0, 2000).remote(target.address(), target.rkey() ^ 1));
        assertEquals(WorkCompletionStatus.REM_ACCESS_ERR, poll(a.cq()).status());
        // The SPI pushes the error completion, then moves the QP to ERR: wait for the state (20 s guard).
        long deadline = System.nanoTime() + 20_000_000_000L;
        while (a.qp().state() != QueuePairState.ERROR && System.nanoTime() < deadline) {
            Thread.onSpinWait();
        }
        assertEquals(QueuePairState.ERROR, a.qp().state());
        assertEquals(QueuePairState.ERROR, b.qp().state(), "the responder entered ERR before it sent the NAK");
        a.qp().postSend(new SendWorkRequest().wrId(2).opcode(SendOpcode.SEND).flags(SendFlag.SIGNALED)
            .local(source, 0, 1));
        assertEquals(WorkCompletionStatus.WR_FLUSH_ERR, poll(a.cq()).status());
    }

    @Test
    void shouldReportATooSmallReceiveOnBothSides() {
        connect(256, 5);
        MemoryRegion source = a.pd().allocateMemory(4096, ALL);
        MemoryRegion target = b.pd().allocateMemory(4096, ALL);
        b.qp().postReceive(new ReceiveWorkRequest().wrId(1).local(target, 0, 300));
        a.qp().postSend(new SendWorkRequest().wrId(1).opcode(SendOpcode.SEND).flags(SendFlag.SIGNALED)
            .local(source, 0, 1000));
        assertEquals(WorkCompletionStatus.LOC_LEN_ERR, poll(b.cq()).status());
        assertEquals(WorkCompletionStatus.REM_INV_REQ_ERR, poll(a.cq()).status());
    }

    @Test
    void shouldRefuseAReadWhereTheQueuePairGrantsNoRemoteRead() {
        connect(1024, 5); // qp_access_flags REMOTE_WRITE only
        MemoryRegion source = a.pd().allocateMemory(4096, ALL);
        MemoryRegion remote = b.pd().allocateMemory(4096, ALL);
        a.qp().postSend(new SendWorkRequest().wrId(1).opcode(SendOpcode.RDMA_READ).flags(SendFlag.SIGNALED)
            .local(source, 0, 8).remote(remote.address(), remote.rkey()));
        assertEquals(WorkCompletionStatus.REM_INV_REQ_ERR, poll(a.cq()).status());
        assertEquals(QueuePairState.ERROR, b.qp().state());
    }

    @Test
    void shouldRejectAnEndpointOfAnotherProviderOrAddress() {
        connect(1024, 5);
        QueuePair fresh = a.pd().createQueuePair(QueuePairInitAttributes.of(a.cq()));
        fresh.modify(QueuePairAttributes.toInit());
        var tcp = new io.jccl.verbs.Endpoint("tcp", "tcp0", 1, 1, "127.0.0.1:1");
        assertThrows(VerbsException.class, () -> fresh.modify(QueuePairAttributes.toReadyToReceive(tcp)));
        var bad = new io.jccl.verbs.Endpoint("roce", "roce0", 1, 1, "localhost:4791");
        assertThrows(VerbsException.class, () -> fresh.modify(QueuePairAttributes.toReadyToReceive(bad)));
        assertEquals(QueuePairState.INIT, fresh.state(), "a refused modify changes nothing");
    }

    /** Waits until context B counted {@code count} receive errors since {@code before} (20 s guard). */
    private void awaitCounted(long before, int count) throws InterruptedException {
        long deadline = System.nanoTime() + 20_000_000_000L;
        while (contextB.counters().get(Counter.PORT_RCV_ERRORS) - before < count) {
            assertTrue(System.nanoTime() < deadline, "all garbage counted");
            Thread.sleep(1);
        }
    }

    @Test
    void shouldDropMalformedDatagramsAndKeepWorking() throws Exception {
        connect(1024, 5);
        InetSocketAddress port = new InetSocketAddress("127.0.0.1",
            Integer.parseInt(b.qp().localEndpoint().address().split(":")[1]));
        long errorsBefore = contextB.counters().get(Counter.PORT_RCV_ERRORS);
        SplittableRandom random = new SplittableRandom(7);
        int sent = 0;
        try (DatagramChannel attacker = DatagramChannel.open()) {
            attacker.bind(new InetSocketAddress("127.0.0.1", 0));
            // DF as roce0 sends, so Linux writes IPv4 id 0 and the stranger's valid ICRC below checks out
            attacker.setOption(jdk.net.ExtendedSocketOptions.IP_DONTFRAGMENT, true);
            ByteBuffer d = ByteBuffer.allocate(2048);
            for (int i = 0; i < 500; i++) {
                d.clear();
                int length = random.nextInt(0, 1200);
                for (int k = 0; k < length; k++) {
                    d.put((byte) random.nextInt(256));
                }
                if (i % 2 == 0 && length >= 16) {
                    // a plausible header aimed at the real QP, with a wrong ICRC
                    new BthFlyweight().wrap(d, 0).init(RoceOpcode.SEND_ONLY, 0, 0xFFFF,
                        b.qp().queuePairNumber(), 5);
                }
                d.flip();
                attacker.send(d, port);
                sent++;
                if (sent % 50 == 0) {
                    // in batches a small default receive buffer (net.core.rmem_max) holds: UDP drops the overflow
                    awaitCounted(errorsBefore, sent);
                }
            }
            // a well-formed packet with a valid ICRC, but from an address that is not the QP's peer
            int length = RoceOpcode.packetLength(RoceOpcode.SEND_ONLY, 0);
            d.clear();
            new BthFlyweight().wrap(d, 0).init(RoceOpcode.SEND_ONLY, 0, 0xFFFF, b.qp().queuePairNumber(), 5);
            int attackerPort = ((InetSocketAddress) attacker.getLocalAddress()).getPort();
            Icrc.put(d, 0, length, new Icrc().computeIpv4(0x7F000001, 0x7F000001, 0, 0x4000, attackerPort,
                port.getPort(), d, 0, length));
            d.limit(length);
            attacker.send(d, port);
            sent++;
        }
        awaitCounted(errorsBefore, sent);
        assertEquals(QueuePairState.READY_TO_SEND, b.qp().state());
        MemoryRegion source = a.pd().allocateMemory(4096, ALL);
        MemoryRegion target = b.pd().allocateMemory(4096, ALL);
        fill(source, 4);
        b.qp().postReceive(new ReceiveWorkRequest().wrId(1).local(target, 0, 4096));
        a.qp().postSend(new SendWorkRequest().wrId(1).opcode(SendOpcode.SEND).flags(SendFlag.SIGNALED)
            .local(source, 0, 4096));
        pollSuccess(a.cq());
        assertEquals(4096, pollSuccess(b.cq()).byteLength());
        assertSameBytes(source, 0, target, 0, 4096);
        assertFalse(b.qp().state() == QueuePairState.ERROR);
    }
}
