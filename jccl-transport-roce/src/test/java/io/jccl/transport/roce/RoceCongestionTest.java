package io.jccl.transport.roce;

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
import io.jccl.verbs.WorkCompletion;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Congestion control end to end on loopback, without root: B's receive path is given a TOS byte by a test
 * {@link EcnSource} in place of the socket's, so chosen packets arrive "Congestion Experienced"; or A's socket sends
 * with the CE mark itself and B's FFM socket reports it (IP_RECVTOS). B's notification point answers with CNPs (at most one per QP per interval), A's
 * reaction point cuts its rate and paces its requests, and every transfer still completes bit-exact.
 */
class RoceCongestionTest {
    private static final long SECOND_NS = 1_000_000_000L;
    private RoceContext contextA;
    private RoceContext contextB;
    private QueuePair qpA;
    private QueuePair qpB;
    private CompletionQueue cqA;
    private MemoryRegion source;
    private MemoryRegion target;

    /** Opens both contexts, applies the congestion settings before RTS (the pacer is made there), connects. */
    private void connect(RoceCongestionSettings settingsA, RoceCongestionSettings settingsB, EcnSource ecnOfB) {
        RoceSettings settings = new RoceSettings("127.0.0.1", 0, 1024);
        contextA = (RoceContext) RoceProvider.device().open(settings);
        contextB = (RoceContext) RoceProvider.device().open(settings);
        contextA.congestion(settingsA);
        contextB.congestion(settingsB);
        contextB.ecnSource(ecnOfB);
        ProtectionDomain pa = contextA.allocateProtectionDomain();
        ProtectionDomain pb = contextB.allocateProtectionDomain();
        cqA = contextA.createCompletionQueue(64);
        qpA = pa.createQueuePair(QueuePairInitAttributes.of(cqA));
        qpB = pb.createQueuePair(QueuePairInitAttributes.of(contextB.createCompletionQueue(64)));
        qpA.modify(QueuePairAttributes.toInit(AccessFlag.REMOTE_WRITE));
        qpB.modify(QueuePairAttributes.toInit(AccessFlag.REMOTE_WRITE));
        qpA.modify(QueuePairAttributes.toReadyToReceive(qpB.localEndpoint()));
        qpB.modify(QueuePairAttributes.toReadyToReceive(qpA.localEndpoint()));
        qpA.modify(QueuePairAttributes.toReadyToSend(qpA.initialPsn()));
        qpB.modify(QueuePairAttributes.toReadyToSend(qpB.initialPsn()));
        source = pa.allocateMemory(1 << 16, AccessFlag.LOCAL_WRITE);
        target = pb.allocateMemory(1 << 16, AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE);
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

    /** WRITEs {@code length} random bytes from A to B and checks them. */
    private void writeAndCheck(int length, long seed) {
        java.util.Random random = new java.util.Random(seed);
        for (int i = 0; i < length; i++) {
            source.segment().set(java.lang.foreign.ValueLayout.JAVA_BYTE, i, (byte) random.nextInt());
        }
        qpA.postSend(new SendWorkRequest().opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
            .local(source, 0, length).remote(target.address(), target.rkey()));
        WorkCompletion[] wc = WorkCompletion.array(1);
        long deadline = System.nanoTime() + 30 * SECOND_NS; // a guard against hanging, not a timing assertion
        while (cqA.poll(wc, 1, 1_000_000L) != 1) {
            if (System.nanoTime() > deadline) {
                fail("no completion within 30 s");
            }
        }
        assertTrue(wc[0].isSuccess(), wc[0].toString());
        assertEquals(-1L, source.segment().asSlice(0, length).mismatch(target.segment().asSlice(0, length)));
    }

    private static long counter(RoceContext context, Counter counter) {
        return context.counters().getOrDefault(counter, 0L);
    }

    private static void await(java.util.function.BooleanSupplier condition, String what) {
        long deadline = System.nanoTime() + 30 * SECOND_NS; // a guard against hanging, not a timing assertion
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                fail("not within 30 s: " + what);
            }
            Thread.yield();
        }
    }

    private static final EcnSource ALL_CE = (datagram, length) -> EcnSource.CE;

    @Test
    void shouldCountCeMarksAndSendOneCnpPerQueuePairPerInterval() {
        RoceCongestionSettings oncePerHour = new RoceCongestionSettings(CongestionMode.DCQCN, 100_000,
            3600 * SECOND_NS, 1_000_000);
        connect(RoceCongestionSettings.DEFAULT, oncePerHour, ALL_CE);
        writeAndCheck(16 << 10, 1);
        writeAndCheck(16 << 10, 2);
        // every packet that reached B's QP was marked and counted; one CNP for all of them
        await(() -> counter(contextA, Counter.RP_CNP_HANDLED) == 1, "A handles the CNP");
        assertTrue(counter(contextB, Counter.NP_ECN_MARKED_ROCE_PACKETS) >= 32);
        assertEquals(counter(contextB, Counter.RCVD_PKTS), counter(contextB, Counter.NP_ECN_MARKED_ROCE_PACKETS));
        assertEquals(1, counter(contextB, Counter.NP_CNP_SENT));
        assertEquals(0, counter(contextA, Counter.RP_CNP_IGNORED));
        assertEquals(0, counter(contextA, Counter.PORT_RCV_ERRORS), "A accepts the CNP (ICRC, QP, P_Key)");
    }

    @Test
    void shouldCutTheRateOnEveryCnpAndStillDeliverEveryByteWhilePaced() {
        RoceCongestionSettings everyMark = RoceCongestionSettings.DEFAULT.withLinkMbps(1000);
        everyMark = new RoceCongestionSettings(CongestionMode.DCQCN, 1000, 0, everyMark.targetDelayNs());
        connect(everyMark, everyMark, ALL_CE);
        writeAndCheck(32 << 10, 3);
        long sent = counter(contextB, Counter.NP_CNP_SENT);
        assertEquals(counter(contextB, Counter.NP_ECN_MARKED_ROCE_PACKETS), sent, "interval 0: a CNP per mark");
        await(() -> counter(contextA, Counter.RP_CNP_HANDLED) == sent, "A handles every CNP");
        TokenBucketPacer pacer = ((RoceQueuePair) qpA).pacer();
        DcqcnRateController dcqcn = assertInstanceOf(DcqcnRateController.class, pacer.controller());
        // 32 CNPs at α ≈ 1 leave Rc near the 1 Mb/s floor and Rt far below the link; AI steps of 50 kb/s per 300 µs
        // cannot have brought it back
        assertTrue(dcqcn.rateBitsPerSecond() < 500e6, "rate " + dcqcn.rateBitsPerSecond());
        assertTrue(dcqcn.recovering());
        // paced well below the link (the bucket holds two packets): the timer thread resumes the send queue
        writeAndCheck(24 << 10, 4);
        assertEquals(0, counter(contextA, Counter.RETRY_EXCEEDED_ERR));
    }

    @Test
    void shouldIgnoreCnpsWithoutAControllerAndSendNoneWithoutCe() {
        RoceCongestionSettings none = RoceCongestionSettings.DEFAULT.withMode(CongestionMode.NONE);
        RoceCongestionSettings every = new RoceCongestionSettings(CongestionMode.DCQCN, 100_000, 0, 1_000_000);
        // B marks only SEND/WRITE FIRST packets (opcode 0x06 here): the others carry ECT(0)
        EcnSource firstOnly = (ByteBuffer datagram, int length) ->
            (datagram.get(0) & 0xFF) == 0x06 ? EcnSource.CE : EcnSource.ECT_0;
        connect(none, every, firstOnly);
        assertNull(((RoceQueuePair) qpA).pacer(), "JCCL_ROCE_CC=none: no pacer");
        writeAndCheck(8 << 10, 5);
        writeAndCheck(8 << 10, 6);
        await(() -> counter(contextA, Counter.RP_CNP_IGNORED) == 2, "A counts both CNPs as ignored");
        assertEquals(2, counter(contextB, Counter.NP_ECN_MARKED_ROCE_PACKETS));
        assertEquals(2, counter(contextB, Counter.NP_CNP_SENT));
        assertEquals(0, counter(contextA, Counter.RP_CNP_HANDLED));
    }

    @Test
    void shouldTreatTheBthFecnBitAsACongestionMark() {
        RoceCongestionSettings every = new RoceCongestionSettings(CongestionMode.DCQCN, 100_000, 0, 1_000_000);
        connect(every, every, EcnSource.NONE); // B's socket says nothing about ECN
        // a "switch" on A's send path sets FECN on WRITE FIRST packets: the ICRC leaves the bit out, so they pass
        contextA.dropFilter((packet, length) -> {
            if ((packet.get(0) & 0xFF) == 0x06) {
                packet.put(4, (byte) (packet.get(4) | 0x80));
            }
            return false;
        });
        writeAndCheck(8 << 10, 8);
        writeAndCheck(8 << 10, 9);
        await(() -> counter(contextA, Counter.RP_CNP_HANDLED) == 2, "A handles a CNP per FECN mark");
        assertEquals(2, counter(contextB, Counter.NP_ECN_MARKED_ROCE_PACKETS));
        assertEquals(2, counter(contextB, Counter.NP_CNP_SENT));
        assertEquals(0, counter(contextB, Counter.PORT_RCV_ERRORS), "FECN does not break the ICRC");
    }

    @Test
    void shouldAnswerCeInTheTosByteTheSocketReportsWithACnp() {
        RoceCongestionSettings oncePerHour = new RoceCongestionSettings(CongestionMode.DCQCN, 100_000,
            3600 * SECOND_NS, 1_000_000);
        connect(RoceCongestionSettings.DEFAULT, oncePerHour, null); // no test source: B reads the socket's TOS
        assumeTrue(contextB.reportsTos(), "FFM sockets unavailable here (" + contextB.ioKind() + ")");
        // Linux lets a UDP sender set the ECN bits itself: A's packets leave Congestion Experienced, no FECN
        contextA.trafficClass(EcnSource.CE);
        contextA.dropFilter((packet, length) -> {
            assertEquals(0, packet.get(4) & 0x80, "no FECN on the way");
            return false;
        });
        writeAndCheck(16 << 10, 10);
        writeAndCheck(16 << 10, 11);
        await(() -> counter(contextA, Counter.RP_CNP_HANDLED) == 1, "A handles the CNP");
        assertEquals(EcnSource.CE, contextB.lastTos() & 0x03, "B's socket reported the mark");
        assertTrue(counter(contextB, Counter.NP_ECN_MARKED_ROCE_PACKETS) >= 8);
        assertEquals(counter(contextB, Counter.RCVD_PKTS), counter(contextB, Counter.NP_ECN_MARKED_ROCE_PACKETS));
        assertEquals(1, counter(contextB, Counter.NP_CNP_SENT));
        assertEquals(0, counter(contextA, Counter.PORT_RCV_ERRORS), "A accepts the CNP");
        // A receives B's ACKs and the CNP with ECT(0): nothing is marked on A
        assertEquals(EcnSource.ECT_0, contextA.lastTos() & 0x03);
        assertEquals(0, counter(contextA, Counter.NP_ECN_MARKED_ROCE_PACKETS));
    }

    @Test
    void shouldMeasureRoundTripsInTheDelayMode() {
        RoceCongestionSettings delay = RoceCongestionSettings.DEFAULT.withMode(CongestionMode.DELAY);
        connect(delay, delay, EcnSource.NONE);
        writeAndCheck(16 << 10, 7);
        DelayRateController controller = assertInstanceOf(DelayRateController.class,
            ((RoceQueuePair) qpA).pacer().controller());
        // the completion is pushed before the receive thread hands the acknowledgement to the controller
        await(() -> controller.lastRttNs() > 0, "an AckReq answered and timed");
        assertEquals(0, counter(contextB, Counter.NP_CNP_SENT));
    }
}
