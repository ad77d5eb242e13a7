package io.jccl.tools.perftest;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.Context;
import io.jccl.verbs.DeviceAttributes;
import io.jccl.verbs.Endpoint;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.PortAttributes;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.WorkCompletion;
import org.HdrHistogram.Histogram;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;

/**
 * One side of a perf run: the verbs resources (context, PD, CQ, QPs, registered buffers), the connection through
 * the out-of-band exchange, and the measurement loops of the eight tests.
 *
 * <p>The loops follow perftest. BW: the client keeps up to tx-depth requests outstanding per QP, signals every
 * cq-moderation-th one, and stamps every post and every completion; the server posts receives (SEND) or just
 * drives progress (WRITE/READ/atomics). LAT: write_lat is a ping-pong in which each side WRITEs into the other's
 * buffer and spins on the last byte of its own; send_lat is a SEND ping-pong; read_lat and atomic_lat time one
 * operation's round trip. Everything the loops touch is allocated before they start.
 */
final class PerfSession implements AutoCloseable {
    private static final VarHandle BYTE = ValueLayout.JAVA_BYTE.varHandle();
    private static final long QP_SHIFT = 40;
    private static final long INDEX_MASK = (1L << QP_SHIFT) - 1;
    private static final long HISTOGRAM_MAX_NS = 60_000_000_000L;

    private final PerfPlan plan;
    private final boolean client;
    private final OutOfBand oob;
    private final int rxDepth;
    private final boolean blockingServer;

    private final Context context;
    private final DeviceAttributes attributes;
    private final ProtectionDomain pd;
    private final CompletionQueue cq;
    private final QueuePair[] qps;
    private final MemoryRegion[] local;
    private final MemoryRegion[] target;
    private final long bufferSize;
    /** The TX depth in effect: the plan's, capped by the device's max_qp_wr. */
    private final int txDepth;

    private final int[] remoteRkey;
    private final long[] remoteAddress;
    private final Endpoint[] remoteEndpoint;

    private final SendWorkRequest[] sendRequests;
    private final ReceiveWorkRequest[] receiveRequests;
    private final WorkCompletion[] completions = WorkCompletion.array(64);
    private final long[] posted;
    private final long[] completed;
    private final long[] limit;
    private final int[] receivesPosted;
    private final long[] postedNs;
    private final long[] completedNs;
    private final Histogram histogram = new Histogram(1, HISTOGRAM_MAX_NS, 3);
    private static final com.sun.management.ThreadMXBean THREADS =
        (com.sun.management.ThreadMXBean) java.lang.management.ManagementFactory.getThreadMXBean();

    private int sendsOutstanding;
    private int receivesArrived;
    private long allocatedBytes;
    private long spins;

    PerfSession(PerfPlan plan, boolean client, OutOfBand oob, Context context, int rxDepth, boolean blockingServer) {
        this.blockingServer = blockingServer;
        this.plan = plan;
        this.client = client;
        this.oob = oob;
        this.rxDepth = rxDepth;
        this.context = context;
        this.attributes = context.query();
        PerfTest test = plan.test();
        int n = plan.queuePairs();
        bufferSize = Math.max(64, (plan.maxSize() + 63) & ~63L);
        long portMax = attributes.maxMessageSize();
        if (plan.maxSize() > portMax) {
            throw new PerfException("message size " + plan.maxSize() + " exceeds the port's max_msg_sz " + portMax);
        }
        txDepth = Math.max(1, Math.min(plan.txDepth(), attributes.maxQueuePairWorkRequests()));
        pd = context.allocateProtectionDomain();
        int receiveDepth = test.verb() == PerfTest.Verb.SEND ? rxDepth : 1;
        int capacity = Math.min(attributes.maxCompletionQueueEntries(),
            n * (txDepth + receiveDepth) + 64);
        cq = context.createCompletionQueue(capacity);
        qps = new QueuePair[n];
        local = new MemoryRegion[n];
        target = new MemoryRegion[n];
        remoteRkey = new int[n];
        remoteAddress = new long[n];
        remoteEndpoint = new Endpoint[n];
        sendRequests = new SendWorkRequest[n];
        receiveRequests = new ReceiveWorkRequest[n];
        posted = new long[n];
        completed = new long[n];
        limit = new long[n];
        receivesPosted = new int[n];
        int inline = Math.min(plan.inlineSize(), attributes.maxInlineData());
        AccessFlag[] all = {AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ,
            AccessFlag.REMOTE_ATOMIC};
        for (int q = 0; q < n; q++) {
            local[q] = pd.allocateMemory(bufferSize, all);
            target[q] = pd.allocateMemory(bufferSize, all);
            QueuePairInitAttributes init = QueuePairInitAttributes.of(cq)
                .withDepths(txDepth,
                    Math.min(receiveDepth, attributes.maxQueuePairWorkRequests()))
                .withMaxInlineData(Math.max(0, inline));
            qps[q] = pd.createQueuePair(init);
            sendRequests[q] = new SendWorkRequest();
            receiveRequests[q] = new ReceiveWorkRequest().wrId(q).local(target[q], 0, (int) bufferSize);
        }
        int samples = plan.durationMode() || !test.isBandwidth() ? 1 : plan.iterations() * n;
        postedNs = new long[samples];
        completedNs = new long[samples];
    }

    /** The device attributes (for the banner). */
    DeviceAttributes attributes() {
        return attributes;
    }

    /** The first port's attributes. */
    PortAttributes port() {
        return attributes.ports().getFirst();
    }

    /** The inline size in effect. */
    int inlineSize() {
        return Math.max(0, Math.min(plan.inlineSize(), attributes.maxInlineData()));
    }

    /**
     * Exchanges connection records with the peer and drives every QP to RTS. Returns the address lines to print
     * (local and remote per QP).
     */
    String connect() throws IOException {
        int n = qps.length;
        StringBuilder lines = new StringBuilder();
        for (int q = 0; q < n; q++) {
            oob.send("qp " + qps[q].localEndpoint().encode() + " " + Integer.toHexString(target[q].rkey()) + " "
                + Long.toHexString(target[q].address()));
        }
        for (int q = 0; q < n; q++) {
            String line = oob.receive();
            if (line.startsWith("error ")) {
                throw new IOException("peer failed: " + line.substring(6));
            }
            String[] parts = line.split(" ");
            if (parts.length != 4 || !parts[0].equals("qp")) {
                throw new IOException("out-of-band protocol: expected a QP record, got '" + String.join(" ", parts)
                    + "'");
            }
            remoteEndpoint[q] = Endpoint.decode(parts[1]);
            remoteRkey[q] = Integer.parseUnsignedInt(parts[2], 16);
            remoteAddress[q] = Long.parseUnsignedLong(parts[3], 16);
        }
        for (int q = 0; q < n; q++) {
            qps[q].modify(QueuePairAttributes.toInit(AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ,
                AccessFlag.REMOTE_ATOMIC));
            qps[q].modify(QueuePairAttributes.toReadyToReceive(remoteEndpoint[q]));
            qps[q].modify(QueuePairAttributes.toReadyToSend(qps[q].initialPsn()));
        }
        for (int q = 0; q < n; q++) {
            lines.append(PerfReport.address(true, qps[q].queuePairNumber(), qps[q].initialPsn(), target[q].rkey(),
                target[q].address())).append(System.lineSeparator());
        }
        for (int q = 0; q < n; q++) {
            lines.append(PerfReport.address(false, remoteEndpoint[q].queuePairNumber(),
                remoteEndpoint[q].packetSequenceNumber(), remoteRkey[q], remoteAddress[q]))
                .append(System.lineSeparator());
        }
        oob.barrier("connected");
        return lines.toString();
    }

    // ------------------------------------------------------------------------------------------------ per size

    /** Sets up the work requests for {@code size} and tops up receives; call before the size's start barrier. */
    void prepare(long size) {
        PerfTest test = plan.test();
        int length = (int) size;
        receivesArrived = 0;
        for (int q = 0; q < qps.length; q++) {
            SendWorkRequest wr = sendRequests[q];
            switch (test.verb()) {
                case WRITE -> wr.opcode(SendOpcode.RDMA_WRITE).local(local[q], 0, length)
                    .remote(remoteAddress[q], remoteRkey[q]);
                case READ -> wr.opcode(SendOpcode.RDMA_READ).local(local[q], 0, length)
                    .remote(remoteAddress[q], remoteRkey[q]);
                case SEND -> wr.opcode(SendOpcode.SEND).local(local[q], 0, length);
                case ATOMIC -> wr.opcode(plan.atomicType().equals("CMP_AND_SWAP") ? SendOpcode.ATOMIC_CMP_AND_SWP
                        : SendOpcode.ATOMIC_FETCH_AND_ADD).local(local[q], 0, 8)
                    .remote(remoteAddress[q], remoteRkey[q]).atomic(plan.atomicType().equals("CMP_AND_SWAP") ? 0 : 1,
                        1);
            }
            if (test == PerfTest.WRITE_LAT) {
                target[q].segment().asSlice(0, size).fill((byte) 0);
                local[q].segment().asSlice(0, size).fill((byte) 0);
            }
            if (test.verb() == PerfTest.Verb.SEND && (!client || !test.isBandwidth())) {
                topUpReceives(q);
            }
        }
    }

    private int baseFlags(long size) {
        PerfTest.Verb verb = plan.test().verb();
        boolean inlineable = verb == PerfTest.Verb.WRITE || verb == PerfTest.Verb.SEND;
        return inlineable && size <= inlineSize() ? SendFlag.INLINE : 0;
    }

    private void topUpReceives(int q) {
        while (receivesPosted[q] < rxDepth) {
            qps[q].postReceive(receiveRequests[q]);
            receivesPosted[q]++;
        }
    }

    // ------------------------------------------------------------------------------------------------ BW

    /** Client side of a BW test for one size: warm-up, then the measured run. */
    BandwidthResult clientBandwidth(long size, boolean gbits) throws IOException {
        int flags = baseFlags(size);
        if (plan.warmupIterations() > 0) {
            bandwidthLoop(plan.warmupIterations(), flags, false, 0);
        }
        if (plan.durationMode()) {
            long start = System.nanoTime();
            long deadline = start + plan.durationSeconds() * 1_000_000_000L;
            long[] span = new long[1];
            long before = allocated();
            long count = bandwidthLoop(Long.MAX_VALUE, flags, false, deadline, span);
            allocatedBytes += allocated() - before;
            return BandwidthResult.fromTotals(size, count, span[0], gbits);
        }
        long before = allocated();
        int count = (int) bandwidthLoop(plan.iterations(), flags, true, 0);
        allocatedBytes += allocated() - before;
        return BandwidthResult.compute(size, postedNs, completedNs, count,
            Math.min(plan.cqModeration(), txDepth), gbits);
    }

    private long bandwidthLoop(long perQp, int flags, boolean record, long deadlineNs) throws IOException {
        return bandwidthLoop(perQp, flags, record, deadlineNs, null);
    }

    /** The BW client loop; returns messages completed. Allocates nothing. */
    private long bandwidthLoop(long perQp, int flags, boolean record, long deadlineNs, long[] spanOut)
        throws IOException {
        int n = qps.length;
        int tx = txDepth;
        int cqMod = Math.min(plan.cqModeration(), tx);
        for (int q = 0; q < n; q++) {
            posted[q] = 0;
            completed[q] = 0;
            limit[q] = perQp;
        }
        long globalPosted = 0;
        long globalCompleted = 0;
        long firstPostNs = 0;
        long lastCompletionNs = 0;
        boolean stopping = deadlineNs == 0;
        while (true) {
            if (!stopping && System.nanoTime() >= deadlineNs) {
                // Duration mode: finish at the next signaled request so every posted request gets reaped.
                stopping = true;
                for (int q = 0; q < n; q++) {
                    limit[q] = (posted[q] + cqMod - 1) / cqMod * cqMod;
                }
            }
            for (int q = 0; q < n; q++) {
                QueuePair qp = qps[q];
                SendWorkRequest wr = sendRequests[q];
                long max = limit[q];
                while (posted[q] < max && posted[q] - completed[q] < tx) {
                    long index = posted[q];
                    boolean signal = index % cqMod == cqMod - 1 || index == max - 1;
                    wr.wrId(((long) q << QP_SHIFT) | index).flags(signal ? flags | SendFlag.SIGNALED : flags);
                    long now = System.nanoTime();
                    if (globalPosted == 0) {
                        firstPostNs = now;
                    }
                    if (record) {
                        postedNs[(int) globalPosted] = now;
                    }
                    globalPosted++;
                    qp.postSend(wr);
                    posted[q] = index + 1;
                }
            }
            int polled = cq.poll(completions, completions.length);
            if (polled > 0) {
                long now = System.nanoTime();
                lastCompletionNs = now;
                for (int i = 0; i < polled; i++) {
                    WorkCompletion wc = completions[i];
                    checkSuccess(wc);
                    int q = (int) (wc.wrId() >>> QP_SHIFT);
                    long done = (wc.wrId() & INDEX_MASK) + 1;
                    long covered = done - completed[q];
                    completed[q] = done;
                    if (record) {
                        for (long c = 0; c < covered; c++) {
                            completedNs[(int) globalCompleted++] = now;
                        }
                    } else {
                        globalCompleted += covered;
                    }
                }
            } else {
                checkPeer();
            }
            // Checked after every poll, empty or not: when the deadline falls just after a signaled request
            // completed, nothing is outstanding and no later poll returns anything (this used to spin forever).
            if ((stopping || deadlineNs == 0) && allCompleted(n)) {
                break;
            }
        }
        if (spanOut != null) {
            spanOut[0] = lastCompletionNs - firstPostNs;
        }
        return globalCompleted;
    }

    /** Whether each of the first {@code n} queue pairs has completed every request up to its limit. */
    private boolean allCompleted(int n) {
        for (int q = 0; q < n; q++) {
            if (completed[q] < limit[q]) {
                return false;
            }
        }
        return true;
    }

    /**
     * Server side of a BW test for one size. WRITE/READ/atomics: drive progress until the client's "done".
     * SEND: take and re-post receives until all messages arrived (or the client's "done" in duration mode).
     * Returns the receive-side result for SEND tests, else null.
     */
    BandwidthResult serverBandwidth(long size, boolean gbits) throws IOException {
        if (plan.test().verb() != PerfTest.Verb.SEND) {
            passiveUntilDone();
            return null;
        }
        int n = qps.length;
        long warm = (long) plan.warmupIterations() * n;
        long expected = plan.durationMode() ? Long.MAX_VALUE : warm + (long) plan.iterations() * n;
        long received = 0;
        long startNs = 0;
        long endNs = 0;
        while (received < expected) {
            int polled = cq.poll(completions, completions.length);
            if (polled > 0) {
                long now = System.nanoTime();
                for (int i = 0; i < polled; i++) {
                    WorkCompletion wc = completions[i];
                    checkSuccess(wc);
                    if (wc.opcode().isReceive()) {
                        int q = (int) wc.wrId();
                        receivesPosted[q]--;
                        topUpReceives(q);
                        received++;
                        if (received == warm) {
                            startNs = now;
                        }
                    }
                }
                endNs = now;
            } else if ((++spins & 0x3FF) == 0 && oob.due()) {
                if (plan.durationMode() && oob.poll() != null) {
                    break;
                }
                if (oob.peerGone()) {
                    throw new PerfException("client went away");
                }
            }
        }
        oob.expect("done");
        oob.send("done");
        long measured = received - warm;
        return measured > 0 ? BandwidthResult.fromTotals(size, measured, endNs - startNs, gbits) : null;
    }

    /** Drives progress (polls the CQ, which some providers need to answer one-sided requests) until "done". */
    private void passiveUntilDone() throws IOException {
        // Busy-polls as perftest's server does: some providers answer READs and atomics from the responder's
        // progress, so parking here would add wake-up latency to every operation.
        // With -e (events) it waits in the CQ instead, leaving the CPU to providers with their own progress threads.
        while (true) {
            int polled = blockingServer ? cq.poll(completions, completions.length, 1_000_000L)
                : cq.poll(completions, completions.length);
            for (int i = 0; i < polled; i++) {
                checkSuccess(completions[i]);
            }
            if (polled == 0) {
                Thread.onSpinWait();
            }
            if ((blockingServer || (++spins & 0x3FF) == 0) && oob.due()) {
                if (oob.poll() != null) {
                    break;
                }
                if (oob.peerGone()) {
                    throw new PerfException("client went away");
                }
            }
        }
        oob.expect("done");
        oob.send("done");
    }

    /** Client: tells the server this size is over and waits for its acknowledgement. */
    void finishSize() throws IOException {
        oob.send("done");
        oob.expect("done");
    }

    // ------------------------------------------------------------------------------------------------ LAT

    /** Client side of a latency test for one size. */
    LatencyResult clientLatency(long size) throws IOException {
        histogram.reset();
        int flags = baseFlags(size) | SendFlag.SIGNALED;
        long warm = plan.warmupIterations();
        long deadline = 0;
        long start = 0;
        long total = plan.durationMode() ? Long.MAX_VALUE : warm + plan.iterations();
        long before = 0;
        for (long i = 0; i < total; i++) {
            if (i == warm) {
                before = allocated();
                start = System.nanoTime();
                if (plan.durationMode()) {
                    deadline = start + plan.durationSeconds() * 1_000_000_000L;
                }
            }
            long rtt = switch (plan.test().verb()) {
                case WRITE -> writePing(size, i, flags);
                case SEND -> sendPing(flags);
                default -> roundTrip(flags);
            };
            if (i >= warm) {
                histogram.recordValue(Math.min(Math.max(rtt, 1), HISTOGRAM_MAX_NS));
                if (deadline != 0 && (i & 0xF) == 0 && System.nanoTime() >= deadline) {
                    break;
                }
            }
        }
        long span = System.nanoTime() - start;
        allocatedBytes += allocated() - before;
        return LatencyResult.fromRoundTrips(size, histogram, plan.test().rttFactor(), span);
    }

    private static byte pingValue(long i) {
        return (byte) (i % 127 + 1);
    }

    /** write_lat client: write our value into the peer's buffer, wait until the peer's write lands in ours. */
    private long writePing(long size, long i, int flags) throws IOException {
        byte value = pingValue(i);
        MemorySegment mine = target[0].segment();
        long last = size - 1;
        local[0].segment().set(ValueLayout.JAVA_BYTE, last, value);
        SendWorkRequest wr = sendRequests[0].wrId(i).flags(flags);
        long t0 = System.nanoTime();
        qps[0].postSend(wr);
        sendsOutstanding++;
        while ((byte) BYTE.getVolatile(mine, last) != value) {
            spinPoll();
            if ((spins & 0xFFF) == 0) {
                checkPeer();
            }
        }
        long t1 = System.nanoTime();
        while (sendsOutstanding > 0) {
            reapSends();
        }
        return t1 - t0;
    }

    /** send_lat client: SEND, wait for the peer's SEND to arrive. */
    private long sendPing(int flags) throws IOException {
        SendWorkRequest wr = sendRequests[0].wrId(0).flags(flags);
        long t0 = System.nanoTime();
        qps[0].postSend(wr);
        sendsOutstanding++;
        awaitReceive(false);
        long t1 = System.nanoTime();
        topUpReceives(0);
        while (sendsOutstanding > 0) {
            reapSends();
        }
        return t1 - t0;
    }

    /** read_lat / atomic_lat client: one operation, wait for its completion. */
    private long roundTrip(int flags) throws IOException {
        SendWorkRequest wr = sendRequests[0].wrId(0).flags(flags);
        long t0 = System.nanoTime();
        qps[0].postSend(wr);
        sendsOutstanding++;
        while (sendsOutstanding > 0) {
            if (!reapSends() && (++spins & 0xFFF) == 0) {
                checkPeer();
            }
        }
        return System.nanoTime() - t0;
    }

    /** Server side of a latency test for one size. */
    void serverLatency(long size) throws IOException {
        PerfTest test = plan.test();
        if (!test.serverActive()) {
            passiveUntilDone();
            return;
        }
        int flags = baseFlags(size) | SendFlag.SIGNALED;
        long total = plan.durationMode() ? Long.MAX_VALUE : plan.warmupIterations() + (long) plan.iterations();
        MemorySegment mine = target[0].segment();
        long last = size - 1;
        outer:
        for (long i = 0; i < total; i++) {
            if (test == PerfTest.WRITE_LAT) {
                byte value = pingValue(i);
                while ((byte) BYTE.getVolatile(mine, last) != value) {
                    spinPoll();
                    if ((spins & 0xFFF) == 0 && serverShouldStop()) {
                        break outer;
                    }
                }
                local[0].segment().set(ValueLayout.JAVA_BYTE, last, value);
            } else {
                if (!awaitReceive(true)) {
                    break;
                }
                topUpReceives(0);
            }
            qps[0].postSend(sendRequests[0].wrId(i).flags(flags));
            sendsOutstanding++;
            while (sendsOutstanding > 0) {
                reapSends();
            }
        }
        oob.expect("done");
        oob.send("done");
    }

    private boolean serverShouldStop() throws IOException {
        if (!oob.due()) {
            return false;
        }
        if (plan.durationMode() && oob.poll() != null) {
            return true;
        }
        if (oob.peerGone()) {
            throw new PerfException("client went away");
        }
        return false;
    }

    // ------------------------------------------------------------------------------------------------ helpers

    /** Bytes this thread allocated so far (HotSpot's per-thread allocation counter). */
    private static long allocated() {
        return THREADS.getCurrentThreadAllocatedBytes();
    }

    /**
     * Heap bytes the client thread allocated inside the measured loops so far (provider calls included); the
     * loops themselves allocate nothing, so anything here comes from the provider or the JIT's deoptimizations.
     */
    long measuredLoopAllocatedBytes() {
        return allocatedBytes;
    }

    /**
     * Polls the CQ once: send completions lower the outstanding count, receive completions raise
     * {@link #receivesArrived} (consumed by the loops that wait for a message). Returns whether any arrived.
     */
    private boolean reapSends() {
        int polled = cq.poll(completions, completions.length);
        for (int k = 0; k < polled; k++) {
            WorkCompletion wc = completions[k];
            checkSuccess(wc);
            if (wc.opcode().isReceive()) {
                receivesPosted[(int) wc.wrId()]--;
                receivesArrived++;
            } else {
                sendsOutstanding--;
            }
        }
        return polled > 0;
    }

    /**
     * One step of a write_lat memory wait: reaps our own WRITE's completion while it is outstanding, and otherwise
     * polls the CQ only every 64th step. The CQ poll drives progress for providers that need it, but a poll per
     * spin competes for the queue-pair lock with a provider's own progress thread (tcp) and slows it down badly.
     */
    private void spinPoll() {
        if (sendsOutstanding > 0 || (++spins & 0x3F) == 0) {
            reapSends();
        } else {
            Thread.onSpinWait();
        }
    }

    /** Waits for one receive completion (or, on the server, the end of the run); false when the run ended. */
    private boolean awaitReceive(boolean server) throws IOException {
        while (receivesArrived == 0) {
            if (!reapSends() && (++spins & 0xFFF) == 0) {
                if (server) {
                    if (serverShouldStop()) {
                        return false;
                    }
                } else {
                    checkPeer();
                }
            }
        }
        receivesArrived--;
        return true;
    }

    private void checkPeer() throws IOException {
        if (oob.due() && oob.peerGone()) {
            throw new PerfException((client ? "server" : "client") + " went away");
        }
    }

    private void checkSuccess(WorkCompletion wc) {
        if (!wc.isSuccess()) {
            throw new PerfException("Completion with error at " + (client ? "client" : "server") + ": " + wc.status()
                + " (" + wc + ")");
        }
    }

    @Override
    public void close() {
        for (QueuePair qp : qps) {
            if (qp != null) {
                try {
                    qp.close();
                } catch (RuntimeException ignored) {
                    // closing anyway
                }
            }
        }
        context.close();
    }
}
