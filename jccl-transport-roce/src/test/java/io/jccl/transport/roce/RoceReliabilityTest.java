package io.jccl.transport.roce;

import io.jccl.transport.roce.wire.BthFlyweight;
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
import io.jccl.verbs.WorkCompletion;
import io.jccl.verbs.WorkCompletionStatus;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * RC reliability of roce0 between two contexts on loopback, with packets lost on purpose by the contexts' send-path
 * filter: go-back-N on a PSN sequence NAK and on the ACK timeout, retry exhaustion, RNR retry, responder duplicates
 * (a WRITE and an atomic never run twice, a READ is answered again), max_rd_atomic, P_Key partitions, and random
 * loss of 1% and 5% in both directions (deterministic seeds) with every transfer completing bit-exact across the
 * PSN wrap.
 */
class RoceReliabilityTest {
    private static final AccessFlag[] ALL = {AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ,
        AccessFlag.REMOTE_ATOMIC};

    private RoceContext contextA;
    private RoceContext contextB;
    private Side a;
    private Side b;

    /** One side: its context objects, a QP and its CQ. */
    private record Side(RoceContext context, ProtectionDomain pd, CompletionQueue cq, QueuePair qp) {
        static Side create(RoceContext context, int pkeyIndex) {
            ProtectionDomain pd = context.allocateProtectionDomain();
            CompletionQueue cq = context.createCompletionQueue(8192);
            QueuePair qp = pd.createQueuePair(QueuePairInitAttributes.of(cq));
            qp.modify(QueuePairAttributes.toInit(AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ,
                AccessFlag.REMOTE_ATOMIC).pkeyIndex(pkeyIndex));
            return new Side(context, pd, cq, qp);
        }

        long counter(Counter counter) {
            return context.counters().getOrDefault(counter, 0L);
        }
    }

    /** What a test changes in the connection: A's RTS attributes and B's RTR attributes. */
    private record Options(int mtu, int psn, int timeout, int retryCount, int rnrRetry, int minRnrTimer,
                           int maxRdAtomic) {
        static Options of(int timeout, int retryCount) {
            return new Options(1024, 0xFFFFF0, timeout, retryCount, 7, 1, 16);
        }
    }

    private void connect(Options o) {
        RoceSettings settings = exactTimer(o.mtu());
        connect(o, settings, settings, 0, 0);
    }

    /** Loopback settings with rxe's exact ACK timer (no floor), so that timer tests run in milliseconds. */
    private static RoceSettings exactTimer(int mtu) {
        return new RoceSettings("127.0.0.1", 0, mtu).withAckTimeoutFloorUs(0);
    }

    private void connect(Options o, RoceSettings settingsA, RoceSettings settingsB, int pkeyIndexA, int pkeyIndexB) {
        contextA = (RoceContext) RoceProvider.device().open(settingsA);
        contextB = (RoceContext) RoceProvider.device().open(settingsB);
        a = Side.create(contextA, pkeyIndexA);
        b = Side.create(contextB, pkeyIndexB);
        a.qp().modify(QueuePairAttributes.toReadyToReceive(b.qp().localEndpoint()).rqPsn(o.psn()));
        b.qp().modify(QueuePairAttributes.toReadyToReceive(a.qp().localEndpoint()).rqPsn(o.psn())
            .minRnrTimer(o.minRnrTimer()));
        a.qp().modify(QueuePairAttributes.toReadyToSend(o.psn()).timeout(o.timeout()).retryCount(o.retryCount())
            .rnrRetry(o.rnrRetry()).maxRdAtomic(o.maxRdAtomic()));
        b.qp().modify(QueuePairAttributes.toReadyToSend(o.psn()).timeout(o.timeout()).retryCount(o.retryCount()));
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
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (System.nanoTime() < deadline) {
            if (cq.poll(wc, 1, 1_000_000L) == 1) {
                return wc[0];
            }
        }
        fail("no completion within 30 s");
        return null;
    }

    private static WorkCompletion pollSuccess(CompletionQueue cq) {
        WorkCompletion wc = poll(cq);
        assertTrue(wc.isSuccess(), "completion " + wc.status() + " for wr " + wc.wrId());
        return wc;
    }

    /** Waits until {@code condition} holds (a guard against hanging, not a timing assertion). */
    private static void await(java.util.function.BooleanSupplier condition, String what) {
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                fail("not within 30 s: " + what);
            }
            Thread.onSpinWait();
            Thread.yield();
        }
    }

    private static void fill(MemoryRegion region, long seed) {
        SplittableRandom random = new SplittableRandom(seed);
        for (long i = 0; i < region.length(); i += 8) {
            region.segment().set(ValueLayout.JAVA_LONG_UNALIGNED, i, random.nextLong());
        }
    }

    private static void assertSameBytes(MemoryRegion expected, long expectedOffset, MemoryRegion actual,
                                        long actualOffset, long length) {
        long mismatch = expected.segment().asSlice(expectedOffset, length)
            .mismatch(actual.segment().asSlice(actualOffset, length));
        assertEquals(-1, mismatch, "first differing byte");
    }

    private static int opcode(ByteBuffer packet) {
        return packet.get(0) & 0xFF;
    }

    private static int psn(ByteBuffer packet) {
        return new BthFlyweight().wrap(packet, 0).psn();
    }

    /** Drops each packet with probability {@code rate}, from a seeded generator (thread-safe). */
    private static RoceContext.PacketFilter randomLoss(double rate, long seed, AtomicInteger dropped) {
        SplittableRandom random = new SplittableRandom(seed);
        return (packet, length) -> {
            synchronized (random) {
                boolean drop = random.nextDouble() < rate;
                if (drop) {
                    dropped.incrementAndGet();
                }
                return drop;
            }
        };
    }

    @ParameterizedTest(name = "loss {0}, seed {1}")
    @CsvSource({"0.01, 11", "0.05, 12"})
    void shouldCompleteEveryTransferBitExactUnderRandomLoss(double rate, long seed) {
        connect(Options.of(12, 7)); // ACK timeout 16.8 ms; retry_cnt 7 (rxe: unlimited)
        AtomicInteger dropped = new AtomicInteger();
        contextA.dropFilter(randomLoss(rate, seed, dropped));
        contextB.dropFilter(randomLoss(rate, seed * 31, dropped));
        int size = 256 << 10;
        MemoryRegion source = a.pd().allocateMemory(size, ALL);
        MemoryRegion readBack = a.pd().allocateMemory(size, ALL);
        MemoryRegion counterResult = a.pd().allocateMemory(8, ALL);
        MemoryRegion target = b.pd().allocateMemory(size, ALL);
        MemoryRegion inbox = b.pd().allocateMemory(size, ALL);
        MemoryRegion counter = b.pd().allocateMemory(8, ALL);
        fill(source, seed);
        SplittableRandom random = new SplittableRandom(seed + 1);
        int rounds = 30;
        for (int round = 0; round < rounds; round++) {
            int writeLength = 1 + random.nextInt(200 << 10); // READs longer than the window: several requests
            int writeOffset = random.nextInt(size - writeLength + 1);
            int sendLength = random.nextInt(20_000);
            int sendOffset = random.nextInt(size - sendLength + 1);
            b.qp().postReceive(new ReceiveWorkRequest().wrId(round).local(inbox, 0, size));
            a.qp().postSend(new SendWorkRequest().wrId(10 * round).opcode(SendOpcode.RDMA_WRITE)
                .flags(SendFlag.SIGNALED).local(source, writeOffset, writeLength)
                .remote(target.address() + writeOffset, target.rkey()));
            a.qp().postSend(new SendWorkRequest().wrId(10 * round + 1).opcode(SendOpcode.SEND_WITH_IMM)
                .immediateData(round).flags(SendFlag.SIGNALED).local(source, sendOffset, sendLength));
            a.qp().postSend(new SendWorkRequest().wrId(10 * round + 2).opcode(SendOpcode.RDMA_READ)
                .flags(SendFlag.SIGNALED).local(readBack, writeOffset, writeLength)
                .remote(target.address() + writeOffset, target.rkey()));
            a.qp().postSend(new SendWorkRequest().wrId(10 * round + 3).opcode(SendOpcode.ATOMIC_FETCH_AND_ADD)
                .flags(SendFlag.SIGNALED).local(counterResult, 0, 8).remote(counter.address(), counter.rkey())
                .atomic(1, 0));
            for (int i = 0; i < 4; i++) {
                assertEquals(10L * round + i, pollSuccess(a.cq()).wrId());
            }
            WorkCompletion recv = pollSuccess(b.cq());
            assertEquals(sendLength, recv.byteLength());
            assertEquals(round, recv.immediateData());
            assertSameBytes(source, sendOffset, inbox, 0, sendLength);
            assertSameBytes(source, writeOffset, target, writeOffset, writeLength);
            assertSameBytes(source, writeOffset, readBack, writeOffset, writeLength);
            // an atomic executed twice would skip a value
            assertEquals(round, counterResult.segment().get(ValueLayout.JAVA_LONG, 0));
        }
        assertEquals(rounds, counter.segment().get(ValueLayout.JAVA_LONG, 0));
        assertTrue(dropped.get() > 0, "the filter dropped nothing");
        assertEquals(QueuePairState.READY_TO_SEND, a.qp().state());
        assertEquals(QueuePairState.READY_TO_SEND, b.qp().state());
        System.out.printf("roce loss %.2f: %d packets dropped, A retries %d, A timeouts %d, B duplicates %d%n",
            rate, dropped.get(), a.counter(Counter.COMPLETER_RETRY_ERR), a.counter(Counter.LOCAL_ACK_TIMEOUT_ERR),
            b.counter(Counter.DUPLICATE_REQUEST));
    }

    @Test
    void shouldGoBackOnAPsnSequenceNakAlone() {
        connect(Options.of(0, 7)); // no ACK timeout: only the NAK can recover
        int lostPsn = (0xFFFFF0 + 20) & 0xFFFFFF; // beyond the wrap
        AtomicBoolean once = new AtomicBoolean();
        contextA.dropFilter((packet, length) -> psn(packet) == lostPsn && once.compareAndSet(false, true));
        MemoryRegion source = a.pd().allocateMemory(64 << 10, ALL);
        MemoryRegion target = b.pd().allocateMemory(64 << 10, ALL);
        fill(source, 3);
        a.qp().postSend(new SendWorkRequest().wrId(1).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
            .local(source, 0, 64 << 10).remote(target.address(), target.rkey()));
        pollSuccess(a.cq());
        assertSameBytes(source, 0, target, 0, 64 << 10);
        assertTrue(once.get());
        assertTrue(b.counter(Counter.OUT_OF_SEQ_REQUEST) > 0);
        assertEquals(1, a.counter(Counter.RCVD_SEQ_ERR));
        assertEquals(1, a.counter(Counter.COMPLETER_RETRY_ERR));
        assertEquals(0, a.counter(Counter.LOCAL_ACK_TIMEOUT_ERR));
    }

    @Test
    void shouldRetransmitWhenTheAckTimerFires() {
        connect(Options.of(8, 7)); // 1 ms
        AtomicBoolean once = new AtomicBoolean();
        // the last packet of the message: nothing follows it, so no NAK can tell the loss
        contextA.dropFilter((packet, length) -> opcode(packet) == RoceOpcode.SEND_LAST
            && once.compareAndSet(false, true));
        MemoryRegion source = a.pd().allocateMemory(8192, ALL);
        MemoryRegion inbox = b.pd().allocateMemory(8192, ALL);
        fill(source, 4);
        b.qp().postReceive(new ReceiveWorkRequest().wrId(7).local(inbox, 0, 8192));
        a.qp().postSend(new SendWorkRequest().wrId(1).opcode(SendOpcode.SEND).flags(SendFlag.SIGNALED)
            .local(source, 0, 5000));
        pollSuccess(a.cq());
        assertEquals(5000, pollSuccess(b.cq()).byteLength());
        assertSameBytes(source, 0, inbox, 0, 5000);
        assertTrue(a.counter(Counter.LOCAL_ACK_TIMEOUT_ERR) >= 1);
        assertTrue(a.counter(Counter.COMPLETER_RETRY_ERR) >= 1);
    }

    @Test
    void shouldRetransmitWhileTheSendQueueDrains() {
        connect(Options.of(8, 7));
        AtomicBoolean once = new AtomicBoolean();
        contextA.dropFilter((packet, length) -> opcode(packet) == RoceOpcode.RDMA_WRITE_LAST
            && once.compareAndSet(false, true));
        MemoryRegion source = a.pd().allocateMemory(8192, ALL);
        MemoryRegion target = b.pd().allocateMemory(8192, ALL);
        fill(source, 11);
        a.qp().postSend(new SendWorkRequest().wrId(1).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
            .local(source, 0, 5000).remote(target.address(), target.rkey()));
        // SQD starts nothing new, but what was sent must still complete, lost packets included
        a.qp().modify(new QueuePairAttributes().state(QueuePairState.SEND_QUEUE_DRAINED));
        pollSuccess(a.cq());
        assertTrue(once.get());
        assertSameBytes(source, 0, target, 0, 5000);
    }

    @Test
    void shouldForgetAHalfReceivedMessageWhenReset() {
        connect(Options.of(0, 7));
        AtomicInteger packets = new AtomicInteger();
        contextA.dropFilter((packet, length) -> packets.incrementAndGet() > 1); // only the WRITE's FIRST arrives
        MemoryRegion source = a.pd().allocateMemory(8192, ALL);
        MemoryRegion target = b.pd().allocateMemory(8192, ALL);
        fill(source, 12);
        a.qp().postSend(new SendWorkRequest().wrId(1).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
            .local(source, 0, 3000).remote(target.address(), target.rkey()));
        await(() -> b.counter(Counter.RCVD_PKTS) >= 1, "the first packet");
        for (QueuePair qp : List.of(a.qp(), b.qp())) {
            qp.modify(new QueuePairAttributes().state(QueuePairState.RESET));
            qp.modify(QueuePairAttributes.toInit(AccessFlag.REMOTE_WRITE));
        }
        contextA.dropFilter(null);
        a.qp().modify(QueuePairAttributes.toReadyToReceive(b.qp().localEndpoint()).rqPsn(500));
        b.qp().modify(QueuePairAttributes.toReadyToReceive(a.qp().localEndpoint()).rqPsn(500));
        a.qp().modify(QueuePairAttributes.toReadyToSend(500));
        b.qp().modify(QueuePairAttributes.toReadyToSend(500));
        // a SEND_ONLY would be "out of message order" to a responder that still thought it was inside the WRITE
        b.qp().postReceive(new ReceiveWorkRequest().wrId(2).local(target, 4096, 4096));
        a.qp().postSend(new SendWorkRequest().wrId(3).opcode(SendOpcode.SEND).flags(SendFlag.SIGNALED)
            .local(source, 0, 100));
        assertEquals(3, pollSuccess(a.cq()).wrId());
        assertEquals(100, pollSuccess(b.cq()).byteLength());
        assertSameBytes(source, 0, target, 4096, 100);
    }

    @Test
    void shouldFailWithRetryExceededAndEnterError() {
        connect(Options.of(5, 2)); // 131 µs, two retries
        contextA.dropFilter((packet, length) -> true); // the peer is unreachable
        MemoryRegion source = a.pd().allocateMemory(4096, ALL);
        MemoryRegion target = b.pd().allocateMemory(4096, ALL);
        a.qp().postSend(new SendWorkRequest().wrId(1).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
            .local(source, 0, 4096).remote(target.address(), target.rkey()));
        a.qp().postSend(new SendWorkRequest().wrId(2).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
            .local(source, 0, 4096).remote(target.address(), target.rkey()));
        WorkCompletion first = poll(a.cq());
        assertEquals(1, first.wrId());
        assertEquals(WorkCompletionStatus.RETRY_EXC_ERR, first.status());
        assertEquals(WorkCompletionStatus.WR_FLUSH_ERR, poll(a.cq()).status());
        assertEquals(QueuePairState.ERROR, a.qp().state());
        assertEquals(1, a.counter(Counter.RETRY_EXCEEDED_ERR));
        assertEquals(2, a.counter(Counter.COMPLETER_RETRY_ERR));
        assertEquals(3, a.counter(Counter.LOCAL_ACK_TIMEOUT_ERR));
    }

    @Test
    void shouldNeverExecuteAWriteTwice() {
        connect(Options.of(8, 7));
        AtomicBoolean blockAcks = new AtomicBoolean(true);
        contextB.dropFilter((packet, length) -> blockAcks.get() && opcode(packet) == RoceOpcode.ACKNOWLEDGE);
        MemoryRegion source = a.pd().allocateMemory(4096, ALL);
        MemoryRegion target = b.pd().allocateMemory(4096, ALL);
        MemoryRegion unused = b.pd().allocateMemory(64, ALL);
        fill(source, 5);
        b.qp().postReceive(new ReceiveWorkRequest().wrId(9).local(unused, 0, 64));
        b.qp().postReceive(new ReceiveWorkRequest().wrId(10).local(unused, 0, 64));
        a.qp().postSend(new SendWorkRequest().wrId(1).opcode(SendOpcode.RDMA_WRITE_WITH_IMM).immediateData(77)
            .flags(SendFlag.SIGNALED).local(source, 0, 3000).remote(target.address(), target.rkey()));
        assertEquals(9, pollSuccess(b.cq()).wrId());
        assertSameBytes(source, 0, target, 0, 3000);
        // the application reuses the memory; a WRITE executed again would overwrite it
        target.segment().fill((byte) 0xEE);
        long duplicates = b.counter(Counter.DUPLICATE_REQUEST);
        await(() -> b.counter(Counter.DUPLICATE_REQUEST) > duplicates, "a retransmitted duplicate");
        blockAcks.set(false);
        pollSuccess(a.cq());
        for (long i = 0; i < 3000; i++) {
            assertEquals((byte) 0xEE, target.segment().get(ValueLayout.JAVA_BYTE, i), "byte " + i);
        }
        // a second WRITE_WITH_IMM completion would have taken the second receive
        b.qp().modify(new QueuePairAttributes().state(QueuePairState.ERROR));
        WorkCompletion flushed = poll(b.cq());
        assertEquals(10, flushed.wrId());
        assertEquals(WorkCompletionStatus.WR_FLUSH_ERR, flushed.status());
    }

    @Test
    void shouldReplayAnAtomicFromTheResponderCache() {
        connect(Options.of(8, 7));
        AtomicInteger atomicAcks = new AtomicInteger();
        contextB.dropFilter((packet, length) -> opcode(packet) == RoceOpcode.ATOMIC_ACKNOWLEDGE
            && atomicAcks.incrementAndGet() <= 2);
        MemoryRegion result = a.pd().allocateMemory(8, ALL);
        MemoryRegion counter = b.pd().allocateMemory(8, ALL);
        counter.segment().set(ValueLayout.JAVA_LONG, 0, 40);
        a.qp().postSend(new SendWorkRequest().wrId(1).opcode(SendOpcode.ATOMIC_FETCH_AND_ADD)
            .flags(SendFlag.SIGNALED).local(result, 0, 8).remote(counter.address(), counter.rkey()).atomic(2, 0));
        a.qp().postSend(new SendWorkRequest().wrId(2).opcode(SendOpcode.ATOMIC_CMP_AND_SWP)
            .flags(SendFlag.SIGNALED).local(result, 0, 8).remote(counter.address(), counter.rkey()).atomic(42, 7));
        assertEquals(1, pollSuccess(a.cq()).wrId());
        assertEquals(2, pollSuccess(a.cq()).wrId());
        assertEquals(42, result.segment().get(ValueLayout.JAVA_LONG, 0)); // CAS saw 40 + 2, once
        assertEquals(7, counter.segment().get(ValueLayout.JAVA_LONG, 0));
        assertTrue(b.counter(Counter.DUPLICATE_REQUEST) >= 1);
    }

    @Test
    void shouldResendTheRestOfAReadWhoseResponseWasLost() {
        connect(Options.of(0, 7)); // no timer: the gap in the responses alone starts the retry
        AtomicInteger responses = new AtomicInteger();
        contextB.dropFilter((packet, length) -> opcode(packet) == RoceOpcode.RDMA_READ_RESPONSE_MIDDLE
            && responses.incrementAndGet() == 5);
        MemoryRegion local = a.pd().allocateMemory(32 << 10, ALL);
        MemoryRegion remote = b.pd().allocateMemory(32 << 10, ALL);
        fill(remote, 6);
        a.qp().postSend(new SendWorkRequest().wrId(1).opcode(SendOpcode.RDMA_READ).flags(SendFlag.SIGNALED)
            .local(local, 0, 32 << 10).remote(remote.address(), remote.rkey()));
        assertEquals(32 << 10, pollSuccess(a.cq()).byteLength());
        assertSameBytes(remote, 0, local, 0, 32 << 10);
        assertEquals(1, a.counter(Counter.COMPLETER_RETRY_ERR));
        assertTrue(b.counter(Counter.DUPLICATE_REQUEST) >= 1);
    }

    @Test
    void shouldResumeALongReadInsideTheRequestTheResponderExecuted() {
        connect(Options.of(0, 7)); // no timer: only the gap in the responses recovers
        assertEquals(128, ((RoceQueuePair) a.qp()).windowPsns(), "this test assumes a full window");
        AtomicInteger responses = new AtomicInteger();
        AtomicInteger requests = new AtomicInteger();
        // response 50 of the first request and the whole second request are lost: the resend from PSN 50 must
        // stop at the first request's end (the responder never saw the second one)
        contextB.dropFilter((packet, length) -> opcode(packet) == RoceOpcode.RDMA_READ_RESPONSE_MIDDLE
            && responses.incrementAndGet() == 50);
        contextA.dropFilter((packet, length) -> opcode(packet) == RoceOpcode.RDMA_READ_REQUEST
            && requests.incrementAndGet() == 2);
        int length = 3 * 128 * 1024;
        MemoryRegion local = a.pd().allocateMemory(length, ALL);
        MemoryRegion remote = b.pd().allocateMemory(length, ALL);
        fill(remote, 10);
        a.qp().postSend(new SendWorkRequest().wrId(1).opcode(SendOpcode.RDMA_READ).flags(SendFlag.SIGNALED)
            .local(local, 0, length).remote(remote.address(), remote.rkey()));
        assertEquals(length, pollSuccess(a.cq()).byteLength());
        assertSameBytes(remote, 0, local, 0, length);
        assertEquals(1, a.counter(Counter.COMPLETER_RETRY_ERR));
    }

    @Test
    void shouldRetryAfterAnRnrNakUntilAReceiveIsPosted() {
        connect(Options.of(14, 7));
        MemoryRegion source = a.pd().allocateMemory(4096, ALL);
        MemoryRegion inbox = b.pd().allocateMemory(4096, ALL);
        fill(source, 7);
        a.qp().postSend(new SendWorkRequest().wrId(1).opcode(SendOpcode.SEND).flags(SendFlag.SIGNALED)
            .local(source, 0, 3000));
        await(() -> b.counter(Counter.SEND_RNR_ERR) >= 3, "three RNR NAKs");
        b.qp().postReceive(new ReceiveWorkRequest().wrId(2).local(inbox, 0, 4096));
        pollSuccess(a.cq());
        assertEquals(3000, pollSuccess(b.cq()).byteLength());
        assertSameBytes(source, 0, inbox, 0, 3000);
        assertTrue(a.counter(Counter.RCVD_RNR_ERR) >= 3);
    }

    @Test
    void shouldFailWhenRnrRetriesRunOut() {
        connect(new Options(1024, 100, 14, 7, 2, 1, 16)); // rnr_retry 2
        MemoryRegion source = a.pd().allocateMemory(4096, ALL);
        a.qp().postSend(new SendWorkRequest().wrId(1).opcode(SendOpcode.SEND).flags(SendFlag.SIGNALED)
            .local(source, 0, 100));
        assertEquals(WorkCompletionStatus.RNR_RETRY_EXC_ERR, poll(a.cq()).status());
        assertEquals(3, a.counter(Counter.RCVD_RNR_ERR));
        assertEquals(1, a.counter(Counter.RNR_RETRY_EXCEEDED_ERR));
        // completeSend pushes the completion before it moves the QP to ERR: the poller may see it first
        await(() -> a.qp().state() == QueuePairState.ERROR, "A in ERR");
    }

    @Test
    void shouldKeepReadsInFlightWithinMaxRdAtomic() {
        connect(new Options(1024, 5, 14, 7, 7, 1, 1)); // max_rd_atomic 1
        RoceQueuePair qp = (RoceQueuePair) a.qp();
        AtomicInteger worst = new AtomicInteger();
        // the filter runs under the QP lock as the request leaves: count what was in flight before it
        contextA.dropFilter((packet, length) -> {
            if (opcode(packet) == RoceOpcode.RDMA_READ_REQUEST) {
                worst.accumulateAndGet(qp.readAtomicInFlight(), Math::max);
            }
            return false;
        });
        MemoryRegion local = a.pd().allocateMemory(64 << 10, ALL);
        MemoryRegion remote = b.pd().allocateMemory(64 << 10, ALL);
        fill(remote, 8);
        for (int i = 0; i < 8; i++) {
            a.qp().postSend(new SendWorkRequest().wrId(i).opcode(SendOpcode.RDMA_READ).flags(SendFlag.SIGNALED)
                .local(local, i * 8192L, 8192).remote(remote.address() + i * 8192L, remote.rkey()));
        }
        for (int i = 0; i < 8; i++) {
            assertEquals(i, pollSuccess(a.cq()).wrId());
        }
        assertSameBytes(remote, 0, local, 0, 64 << 10);
        assertEquals(0, worst.get(), "a READ left while another was in flight");
    }

    @Test
    void shouldDropPacketsOfAnotherPartitionAndCountThem() {
        RoceSettings settings = exactTimer(1024);
        Options o = Options.of(8, 1);
        // A sends with 0x8001 (index 1); B's QP accepts the default partition only
        connect(o, settings.withPKeys(List.of(0xFFFF, 0x8001)), settings, 1, 0);
        MemoryRegion source = a.pd().allocateMemory(4096, ALL);
        MemoryRegion target = b.pd().allocateMemory(4096, ALL);
        a.qp().postSend(new SendWorkRequest().wrId(1).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
            .local(source, 0, 100).remote(target.address(), target.rkey()));
        assertEquals(WorkCompletionStatus.RETRY_EXC_ERR, poll(a.cq()).status());
        // the first try and one retry (B may count the second after A gave up)
        await(() -> b.counter(Counter.BAD_PKEY_CNTR) == 2, "two packets of another partition dropped");
        assertEquals(0, b.counter(Counter.RCVD_PKTS) - b.counter(Counter.BAD_PKEY_CNTR), "none reached the QP");
    }

    @Test
    void shouldConnectInsideANonDefaultPartition() {
        RoceSettings settings = exactTimer(1024).withPKeys(List.of(0xFFFF, 0x8001));
        // a limited member (0x0001) talks to a full member (0x8001) of partition 1
        connect(Options.of(14, 7), settings, settings.withPKeys(List.of(0xFFFF, 0x0001)), 1, 1);
        MemoryRegion source = a.pd().allocateMemory(4096, ALL);
        MemoryRegion target = b.pd().allocateMemory(4096, ALL);
        fill(source, 9);
        a.qp().postSend(new SendWorkRequest().wrId(1).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
            .local(source, 0, 4096).remote(target.address(), target.rkey()));
        pollSuccess(a.cq());
        assertSameBytes(source, 0, target, 0, 4096);
        assertEquals(0, b.counter(Counter.BAD_PKEY_CNTR));
        assertTrue(RoceSettings.pKeysMatch(0x8001, 0x0001));
        assertTrue(!RoceSettings.pKeysMatch(0x0001, 0x0001), "two limited members never match");
        assertTrue(!RoceSettings.pKeysMatch(0xFFFF, 0x8001));
    }
}
