package io.jccl.transport.roce;

import io.jccl.common.Log;
import io.jccl.transport.roce.wire.AethFlyweight;
import io.jccl.transport.roce.wire.AtomicAckEthFlyweight;
import io.jccl.transport.roce.wire.AtomicEthFlyweight;
import io.jccl.transport.roce.wire.BthFlyweight;
import io.jccl.transport.roce.wire.Icrc;
import io.jccl.transport.roce.wire.ImmDtFlyweight;
import io.jccl.transport.roce.wire.MessageSegmenter;
import io.jccl.transport.roce.wire.Psn;
import io.jccl.transport.roce.wire.RethFlyweight;
import io.jccl.transport.roce.wire.RoceOpcode;
import io.jccl.transport.roce.wire.UdpSourcePort;
import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.Counter;
import io.jccl.verbs.Endpoint;
import io.jccl.verbs.QueuePairAttribute;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.QueuePairState;
import io.jccl.verbs.RnrTimer;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.VerbsException;
import io.jccl.verbs.WorkCompletionOpcode;
import io.jccl.verbs.WorkCompletionStatus;
import io.jccl.verbs.spi.AbstractQueuePair;
import io.jccl.verbs.spi.ReceiveSlot;
import io.jccl.verbs.spi.SendSlot;
import io.jccl.verbs.spi.SoftMemoryRegion;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;

/**
 * A reliable-connected queue pair of roce0, after rxe ({@code rxe_req.c}, {@code rxe_comp.c}, {@code rxe_resp.c}).
 *
 * <p><b>Requester.</b> SEND, RDMA WRITE (with or without immediate), RDMA READ and the two atomics go out in PSN
 * order, at most {@link #WINDOW_PSNS} PSNs beyond the last acknowledged one, with AckReq on each message's last
 * packet and every {@link #ACK_EVERY_PSNS} packets. READs and atomics in flight are limited by max_rd_atomic and
 * a FENCE waits for them. ACKs, READ responses and atomic ACKs complete messages strictly in order. Loss is
 * recovered by go-back-N from the first unacknowledged PSN ({@link #rewind()}, rxe's {@code req_retry}): on a PSN
 * sequence error NAK, on a READ response or ACK that shows a response was lost, and when the local ACK timer
 * (4.096 µs · 2^timeout; 0 = off) fires with PSNs outstanding. retry_cnt retries are allowed in a row (7 = no limit,
 * as rxe), then the oldest send completes with RETRY_EXC_ERR and the QP enters ERR. An RNR NAK pauses the
 * send queue for the peer's min_rnr_timer, then resends from the NAKed PSN; rnr_retry bounds that (7 = no
 * limit). Any progress restores both retry budgets (rxe's {@code reset_retry_counters}).
 *
 * <p><b>Responder.</b> Requests are executed strictly in PSN order. A duplicate (PSN before the expected one) is
 * never executed again: SEND and WRITE are re-ACKed, a READ is answered again from memory (its RETH is checked
 * again), an atomic is answered from the cache of its original result (max_dest_rd_atomic entries), and one not
 * in the cache is dropped. A PSN beyond the expected one gets one PSN sequence NAK, after which packets are
 * dropped until the expected PSN arrives (rxe's {@code sent_psn_nak}).
 *
 * <p>All state is guarded by {@link #lock}; the context's receive thread, its timer thread and posting threads
 * take it. Packets are built in one reusable direct buffer per QP: nothing is allocated per packet.
 */
final class RoceQueuePair extends AbstractQueuePair {
    /** Most PSNs in flight beyond the last acknowledged PSN by default (rxe's RXE_MAX_UNACKED_PSNS). */
    static final int WINDOW_PSNS = 128;
    /** AckReq at least this often within a long message (rxe's RXE_MAX_PKT_PER_ACK). */
    static final int ACK_EVERY_PSNS = 64;
    /** Atomic results the responder remembers at most (rxe's max_qp_rd_atom). */
    static final int MAX_RD_ATOMIC = 128;
    /** retry_cnt and rnr_retry value that means "retry forever" (rxe treats both so). */
    private static final int INFINITE_RETRIES = 7;
    /** 64-bit atomics in the responder's native order, as the CPU sees them. */
    private static final VarHandle LONG = ValueLayout.JAVA_LONG.varHandle();

    private final RoceContext roce;
    /** Packets built and not sent yet; sent when full and before the lock is released ({@link #flushTx()}). */
    private final TxBatch txBatch;
    /** The batch holds one ACK a polling thread queued and left for the next flush ({@link #onPacket}). */
    private volatile boolean ackHeld;
    /** Inside {@link #onPacket} (under the lock): its end sends what it queued, or holds a lone ACK. */
    private boolean receiving;
    /** The batch slot the next packet is built in (moves on as each packet is queued). */
    private ByteBuffer tx;
    private MemorySegment txSegment;
    private final BthFlyweight bth = new BthFlyweight();
    private final RethFlyweight reth = new RethFlyweight();
    private final ImmDtFlyweight immDt = new ImmDtFlyweight();
    private final AethFlyweight aeth = new AethFlyweight();
    private final AtomicEthFlyweight atomicEth = new AtomicEthFlyweight();
    private final AtomicAckEthFlyweight atomicAckEth = new AtomicAckEthFlyweight();
    private final Icrc icrc = new Icrc();
    /** The next packet's payload in a registered region ({@link #payloadInPlace}): its view, offset and length. */
    private MemorySegment externalMemory;
    private ByteBuffer externalView;
    private int externalOffset;
    private int externalAt;
    private int externalLength;
    // receive-side views (receive thread, under the lock)
    private final BthFlyweight inBth = new BthFlyweight();
    private final RethFlyweight inReth = new RethFlyweight();
    private final ImmDtFlyweight inImmDt = new ImmDtFlyweight();
    private final AethFlyweight inAeth = new AethFlyweight();
    private final AtomicEthFlyweight inAtomicEth = new AtomicEthFlyweight();
    private final AtomicAckEthFlyweight inAtomicAckEth = new AtomicAckEthFlyweight();

    private InetSocketAddress remoteSocket;
    private int remoteIpv4;
    private int remotePort;
    /**
     * The source port rdma_get_udp_sport gives this QP pair (the same at both ends: the flow label is a product of
     * the two QP numbers), set at RTR; the peer's packets come from it, or from its context's port.
     */
    private int flowUdpSourcePort;
    /** The socket this QP's packets leave from: its flow-label port's, or null for the context's (fallback). */
    private UdpIo txSocket;
    /** The UDP source port of this QP's packets (in their ICRC): {@link #flowUdpSourcePort} or the context's. */
    private int txSourcePort;
    /** The P_Key this QP sends and accepts (the port's table entry at pkey_index). */
    private int pKey = BthFlyweight.DEFAULT_PKEY;

    // ------------------------------------------------------------------ requester
    /** Last PSN the peer acknowledged (rxe's comp.psn - 1). */
    private int lastAckedPsn;
    /** One past the highest PSN ever sent: ACKs beyond a rewound {@link #sqPsn} up to here are still valid. */
    private int sentEndPsn;
    /** One past the highest send ring position whose last packet was sent (its {@link #messageLastPsn} is set). */
    private long sentEnd;
    /** PSNs in flight at most: the context's {@code JCCL_ROCE_WINDOW_PSNS}, less where the socket buffer is small. */
    private int windowPsns = WINDOW_PSNS;
    /** AckReq cadence within a message: half the window. */
    private int ackEveryPsns = ACK_EVERY_PSNS;
    /** Last PSN of each message, by send ring position (what an ACK must reach to complete it). */
    private final int[] messageLastPsn;
    /** Transport retries left in a row (retry_cnt; progress restores it). */
    private int retriesLeft;
    /** RNR retries left in a row (rnr_retry; progress restores it). */
    private int rnrRetriesLeft;
    /** A go-back-N started and nothing was acknowledged since: a NAK does not start another (rxe). */
    private boolean startedRetry;
    /** When the local ACK timer fires (System.nanoTime), 0 when not armed. */
    private volatile long retransmitDeadlineNs;
    /**
     * The context's {@link RoceContext#receiveDrains()} when the ACK timer expired, -1 while it has not: the
     * go-back-N waits until the receive thread has handled what arrived before the expiry.
     */
    private long expiryDrains = -1;
    /** When the ACK timer expired (System.nanoTime), valid while {@link #expiryDrains} is not -1. */
    private long expiryNs;
    /** How soon an expired ACK timer looks again whether the receive thread has caught up. */
    private static final long EXPIRY_RECHECK_NS = 1_000_000L;
    /** When an RNR wait ends and the send queue resumes, 0 when not waiting. */
    private volatile long rnrDeadlineNs;
    /** Paces requests at the congestion controller's rate (null: JCCL_ROCE_CC=none); set on entering RTS. */
    private TokenBucketPacer pacer;
    /** When the pacer lets the next request out and the timer thread resumes the send queue, 0 when not paced. */
    private volatile long paceDeadlineNs;
    /** When this QP's notification point last sent a CNP to its peer (receive thread only; 0 = never). */
    long lastCnpNs;

    // ------------------------------------------------------------------ responder
    private int msn;
    private boolean nakSent;
    private boolean inMessage;
    private int messageOperation;
    private long messageOffset;
    private SoftMemoryRegion writeRegion;
    private long writeAddress;
    private long writeLength;
    /** Replay cache of executed atomics: PSN (-1 = empty) and the original value it returned. */
    private final int[] atomicPsn = new int[MAX_RD_ATOMIC];
    private final long[] atomicOriginal = new long[MAX_RD_ATOMIC];
    private int atomicNext;

    RoceQueuePair(RoceProtectionDomain domain, RoceContext context, QueuePairInitAttributes init) {
        super(domain, init);
        this.roce = context;
        this.txBatch = context.newTxBatch();
        this.tx = txBatch.buffer();
        this.txSegment = txBatch.segment();
        this.messageLastPsn = new int[init.maxSendWorkRequests()];
        java.util.Arrays.fill(atomicPsn, -1);
    }

    @Override
    protected String localAddress() {
        return roce.addressText();
    }

    /** PSNs this QP sends beyond the last acknowledged PSN at most. */
    int windowPsns() {
        return windowPsns;
    }

    /** The UDP source port the flow label gives this connection ({@code rdma_get_udp_sport}). */
    int flowUdpSourcePort() {
        return flowUdpSourcePort;
    }

    /**
     * READ and atomic work requests sent and not completed, before {@link #sendNext} (bounded by max_rd_atomic;
     * must hold the lock, as the send-path filter of tests does).
     */
    int readAtomicInFlight() {
        int count = 0;
        for (long i = sendHead; i < sendNext; i++) {
            if (isReadOrAtomic(sendSlot(i).opcode)) {
                count++;
            }
        }
        return count;
    }

    /** The P_Key this QP sends with and accepts. */
    int pKey() {
        return pKey;
    }

    /** The peer's socket address, null before RTR (read by the notification point without the lock). */
    InetSocketAddress remoteSocket() {
        return remoteSocket;
    }

    /** The peer's IPv4 address as an int. */
    int remoteIpv4() {
        return remoteIpv4;
    }

    /** The peer's UDP port. */
    int remotePort() {
        return remotePort;
    }

    /**
     * Whether a datagram from {@code sourceIpv4:sourcePort} comes from this QP's peer: its address, and its
     * context's port or this pair's flow-label source port.
     */
    boolean fromPeer(int sourceIpv4, int sourcePort) {
        return sourceIpv4 == remoteIpv4 && (sourcePort == remotePort || sourcePort == flowUdpSourcePort);
    }

    /** The socket this QP sends from (null: the context's), for the CNPs the notification point sends for it. */
    UdpIo txSocket() {
        return txSocket;
    }

    /** The UDP source port of the packets this QP sends. */
    int txSourcePort() {
        return txSourcePort;
    }

    /** The peer's queue pair number (dest_qp_num). */
    int peerQpNumber() {
        return destQpNumber;
    }

    /** The pacer of this QP, null when congestion control is off or the QP has not reached RTS (tests). */
    TokenBucketPacer pacer() {
        return pacer;
    }

    boolean isClosedForInput() {
        return isClosed();
    }

    @Override
    protected void beforeTransition(QueuePairState from, QueuePairState to, QueuePairAttributes attributes) {
        if (attributes.has(QueuePairAttribute.PKEY_INDEX)) {
            // rejects an index outside the port's table before anything changes
            roce.pKey(attributes.pkeyIndex());
        }
        if (!attributes.has(QueuePairAttribute.ADDRESS_VECTOR)) {
            return;
        }
        Endpoint remote = attributes.remote();
        if (!RoceProvider.NAME.equals(remote.provider())) {
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT, "roce0 cannot connect to a "
                + remote.provider() + " endpoint (" + remote.device() + ")");
        }
        String address = remote.address();
        int colon = address.lastIndexOf(':');
        InetAddress ip = null;
        int port = -1;
        if (colon > 0) {
            try {
                ip = InetAddress.ofLiteral(address.substring(0, colon));
                port = Integer.parseInt(address.substring(colon + 1));
            } catch (IllegalArgumentException e) {
                ip = null;
            }
        }
        if (!(ip instanceof java.net.Inet4Address) || port < 1 || port > 65535) {
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT, "roce0: endpoint address '" + address
                + "' is not IPv4-literal:port");
        }
        remoteSocket = new InetSocketAddress(ip, port);
        remoteIpv4 = RoceContext.ipv4(ip);
        remotePort = port;
        int flowPort = UdpSourcePort.of(0, queuePairNumber, remote.queuePairNumber());
        if (txSocket != null) { // connected again (after a reset): the old pair's port goes back
            roce.releaseFlowSocket(flowUdpSourcePort);
        }
        flowUdpSourcePort = flowPort;
        txSocket = roce.acquireFlowSocket(flowPort);
        txSourcePort = txSocket != null ? flowPort : roce.localPort();
    }

    @Override
    protected void afterTransition(QueuePairState from, QueuePairState to) {
        pKey = roce.pKey(pkeyIndex);
        if (to == QueuePairState.READY_TO_SEND && from == QueuePairState.READY_TO_RECEIVE) {
            lastAckedPsn = Psn.add(sqPsn, -1);
            sentEndPsn = sqPsn;
            sentEnd = sendHead;
            retriesLeft = retryCount;
            rnrRetriesLeft = rnrRetry;
            // a loopback skb costs about the payload plus 1 KiB of the receive buffer; leave room for other QPs
            int fit = roce.receiveBufferBytes() / (4 * (mtuBytes() + 1024));
            windowPsns = Math.clamp(fit, 2, roce.maxWindowPsns());
            ackEveryPsns = Math.min(ACK_EVERY_PSNS, windowPsns / 2);
            pacer = roce.congestion().newPacer(System.nanoTime());
            roce.addTimed(this);
        }
        if (to == QueuePairState.READY_TO_SEND && from == QueuePairState.SEND_QUEUE_DRAINED) {
            transmit(); // sends posted while drained start now
        }
        if (to == QueuePairState.RESET) {
            // a reset QP starts over: nothing of the old connection's responder or timers survives
            msn = 0;
            nakSent = false;
            inMessage = false;
            writeRegion = null;
            java.util.Arrays.fill(atomicPsn, -1);
            atomicNext = 0;
            retransmitDeadlineNs = 0;
            rnrDeadlineNs = 0;
            paceDeadlineNs = 0;
            pacer = null;
            lastCnpNs = 0;
            startedRetry = false;
            expiryDrains = -1;
        }
    }

    @Override
    public int progress() {
        // a polling application thread receives for the whole context (RoceContext, "Who receives"); null while
        // the superclass constructor has attached this QP to its CQ and ours has not run yet
        RoceContext context = roce;
        if (context == null) {
            return 0;
        }
        return context.driveFromPoller();
    }

    @Override
    public void pollerParks() {
        RoceContext context = roce;
        if (context != null) {
            context.pollerParks();
        }
    }

    @Override
    protected void onSendPosted() {
        lockWithoutQueueing();
        try {
            if (state == QueuePairState.READY_TO_SEND) {
                transmit();
            }
        } finally {
            lock.unlock();
        }
    }

    private int mtuBytes() {
        return Math.min(pathMtu.bytes(), roce.portMtuBytes());
    }

    private static int operation(SendOpcode opcode) {
        return switch (opcode) {
            case SEND -> MessageSegmenter.SEND;
            case SEND_WITH_IMM -> MessageSegmenter.SEND_WITH_IMMEDIATE;
            case RDMA_WRITE -> MessageSegmenter.RDMA_WRITE;
            case RDMA_WRITE_WITH_IMM -> MessageSegmenter.RDMA_WRITE_WITH_IMMEDIATE;
            default -> -1;
        };
    }

    private static boolean isReadOrAtomic(SendOpcode opcode) {
        return opcode == SendOpcode.RDMA_READ || opcode.isAtomic();
    }

    /**
     * Sends what the window, max_rd_atomic, fences and an RNR wait allow (must hold the lock). Inside
     * {@link #onPacket} the batch is left for its end, which flushes it or holds a lone ACK: a flush here sent the ACK
     * of a peer's WRITE alone when the peer's own ACK came in the same GRO datagram (a ping-pong's answer), an extra
     * {@code sendmmsg} (about 4 µs on loopback) on every round trip's critical path.
     */
    private void transmit() {
        try {
            transmitQueued();
        } finally {
            if (!receiving) {
                flushTx();
            }
        }
    }

    private void transmitQueued() {
        if (rnrDeadlineNs != 0) {
            return; // the timer thread resumes the queue when the RNR wait ends
        }
        int mtu = mtuBytes();
        while (sendNext < sendTail && mayTransmit()) {
            SendSlot slot = sendSlot(sendNext);
            boolean readAtomic = isReadOrAtomic(slot.opcode);
            if (!slot.started) {
                if (!checkLocal(slot, readAtomic)) {
                    if (sendNext != sendHead) {
                        return; // complete in order: wait until everything before it is acknowledged
                    }
                    completeSend(WorkCompletionStatus.LOC_PROT_ERR, 0, 0);
                    continue;
                }
                if ((readAtomic || slot.fenced()) && sendNext > sendHead) {
                    int inFlight = readAtomicInFlight();
                    if ((readAtomic && inFlight >= Math.max(1, maxRdAtomic)) || (slot.fenced() && inFlight > 0)) {
                        return; // a READ/atomic response reopens it
                    }
                }
                slot.started = true;
                slot.progress = 0;
                slot.psn = sqPsn;
                if (slot.opcode == SendOpcode.RDMA_READ) {
                    // known before the last request of a long READ leaves: responses are checked against it
                    messageLastPsn[(int) (sendNext % messageLastPsn.length)] =
                        Psn.add(sqPsn, MessageSegmenter.packetCount(slot.length, mtu) - 1);
                }
            }
            if (Psn.distance(lastAckedPsn, sqPsn) > windowPsns) {
                return; // an ACK reopens the window
            }
            if (readAtomic) {
                if (!paced(RoceOpcode.packetLength(RoceOpcode.RDMA_READ_REQUEST, 0))) {
                    return; // the timer thread resumes when the pacer allows
                }
                if (!sendReadOrAtomic(slot, mtu)) {
                    return;
                }
                continue; // the window is checked again before the next request of a long READ
            }
            int operation = operation(slot.opcode);
            while (true) {
                if (Psn.distance(lastAckedPsn, sqPsn) > windowPsns) {
                    return;
                }
                int payload = (int) Math.min(mtu, slot.length - slot.progress);
                boolean first = slot.progress == 0;
                boolean last = slot.progress + payload == slot.length;
                int opcode = MessageSegmenter.opcode(operation, first, last);
                boolean ackRequest = last || Psn.distance(lastAckedPsn, sqPsn) % ackEveryPsns == 0;
                if (!paced(RoceOpcode.packetLength(opcode, payload))) {
                    return;
                }
                if (!sendRequest(slot, opcode, payload, ackRequest)) {
                    return;
                }
                slot.progress += payload;
                if (last) {
                    messageSent(sqPsn);
                    break;
                }
                advanceSendPsn(Psn.next(sqPsn));
            }
        }
    }

    /**
     * Whether the pacer lets a request packet of {@code length} bytes out now; if not, arms the timer thread to
     * call {@link #transmit()} again when it will (must hold the lock).
     */
    private boolean paced(int length) {
        if (pacer == null || pacer.controller().atLineRate()) {
            return true; // nothing to pace until a congestion signal: not even a clock read per packet
        }
        long now = System.nanoTime();
        long waitNs = pacer.delayNs(now, length);
        if (waitNs == 0) {
            return true;
        }
        long deadline = now + waitNs;
        paceDeadlineNs = deadline == 0 ? 1 : deadline;
        roce.timerArmed(deadline);
        return false;
    }

    /**
     * Whether the request at {@link #sendNext} may go out: in RTS any; in SQD only one that had started (a retry
     * while the send queue drains), new ones wait for RTS.
     */
    private boolean mayTransmit() {
        return state == QueuePairState.READY_TO_SEND || (state == QueuePairState.SEND_QUEUE_DRAINED
            && (sendNext < sentEnd || sendSlot(sendNext).started));
    }

    /** The message at {@link #sendNext} went out up to {@code lastPsn}: record it and move on. */
    private void messageSent(int lastPsn) {
        messageLastPsn[(int) (sendNext % messageLastPsn.length)] = lastPsn;
        advanceSendPsn(Psn.next(lastPsn));
        sendNext++;
        if (sendNext > sentEnd) {
            sentEnd = sendNext;
        }
    }

    /** Moves {@link #sqPsn} on after a packet went out; {@link #sentEndPsn} follows the highest. */
    private void advanceSendPsn(int psn) {
        sqPsn = psn;
        if (Psn.compare(psn, sentEndPsn) > 0) {
            sentEndPsn = psn;
        }
    }

    /**
     * Sends the next READ request of {@code slot}, or an atomic request. A READ request takes one PSN per response
     * packet (rxe's {@code req.psn = first + num_pkt}). A READ longer than the window goes out as several requests
     * of at most a window of responses each, each sent when the window allows: the responder answers a request at
     * once, and a burst larger than the receive socket buffer would be dropped by the kernel and resent, again and
     * again (rxe does not split; hardware relies on a lossless fabric).
     */
    private boolean sendReadOrAtomic(SendSlot slot, int mtu) {
        int opcode;
        int lastPsn;
        long chunk = 0;
        if (slot.opcode == SendOpcode.RDMA_READ) {
            // Requests cover fixed spans of the READ (windowPsns responses each), also when one resumes after a
            // loss: a resent request then lies inside one the responder executed, which it answers again, and
            // never reaches past it into one it has not seen (that one it would drop as no duplicate of its own).
            long span = (long) windowPsns * mtu;
            long spanEnd = Math.min(slot.length, (slot.progress / span + 1) * span);
            chunk = spanEnd - slot.progress;
            opcode = RoceOpcode.RDMA_READ_REQUEST;
            bth.wrap(tx, 0).init(opcode, 0, pKey, destQpNumber, sqPsn).ackRequest(true);
            reth.wrap(tx, RoceOpcode.rethOffset(opcode)).virtualAddress(slot.remoteAddress + slot.progress)
                .rKey(slot.rkey).dmaLength((int) chunk);
            lastPsn = Psn.add(sqPsn, MessageSegmenter.packetCount(chunk, mtu) - 1);
        } else {
            opcode = slot.opcode == SendOpcode.ATOMIC_CMP_AND_SWP ? RoceOpcode.COMPARE_SWAP : RoceOpcode.FETCH_ADD;
            bth.wrap(tx, 0).init(opcode, 0, pKey, destQpNumber, sqPsn).ackRequest(true);
            // ibv_post_send: compare_add is the compare value (CAS) or the addend (FETCH_ADD)
            atomicEth.wrap(tx, RoceOpcode.atomicEthOffset(opcode)).virtualAddress(slot.remoteAddress)
                .rKey(slot.rkey);
            if (opcode == RoceOpcode.COMPARE_SWAP) {
                atomicEth.swapOrAdd(slot.swap).compare(slot.compareAdd);
            } else {
                atomicEth.swapOrAdd(slot.compareAdd).compare(0);
            }
            lastPsn = sqPsn;
        }
        if (!transmitPacket(RoceOpcode.packetLength(opcode, 0), true)) {
            return false;
        }
        slot.progress += chunk;
        if (slot.opcode == SendOpcode.RDMA_READ && slot.progress < slot.length) {
            advanceSendPsn(Psn.next(lastPsn)); // more requests of this READ follow
        } else {
            messageSent(lastPsn);
        }
        return true;
    }

    private boolean sendRequest(SendSlot slot, int opcode, int payload, boolean ackRequest) {
        int pad = RoceOpcode.padCount(payload);
        int length = RoceOpcode.packetLength(opcode, payload);
        bth.wrap(tx, 0).init(opcode, pad, pKey, destQpNumber, sqPsn).ackRequest(ackRequest);
        int rethAt = RoceOpcode.rethOffset(opcode);
        if (rethAt >= 0) {
            reth.wrap(tx, rethAt).virtualAddress(slot.remoteAddress).rKey(slot.rkey).dmaLength(slot.length);
        }
        int immAt = RoceOpcode.immediateOffset(opcode);
        if (immAt >= 0) {
            immDt.wrap(tx, immAt).immediate(slot.immediateData);
        }
        int payloadAt = RoceOpcode.headerLength(opcode);
        if (payload > 0 && roce.zeroCopy() && payloadInPlace(slot, slot.progress, payloadAt, payload)) {
            // the kernel gathers the payload from the region (TxBatch.external): no copy into the batch
        } else if (payload > 0 && !gather(slot, slot.progress, txSegment, payloadAt, payload)) {
            // the region was deregistered while the message was going out
            if (sendNext == sendHead) {
                completeSend(WorkCompletionStatus.LOC_PROT_ERR, 0, 0);
            } else {
                enterError("local region vanished during a send");
            }
            return false;
        }
        for (int i = 0; i < pad; i++) {
            tx.put(payloadAt + payload + i, (byte) 0);
        }
        if (opcode == RoceOpcode.SEND_FIRST || opcode == RoceOpcode.SEND_ONLY
            || opcode == RoceOpcode.SEND_ONLY_WITH_IMMEDIATE) {
            context.counterSet().increment(Counter.RDMA_SENDS);
        }
        return transmitPacket(length, true);
    }

    /**
     * Whether bytes {@code skip..skip + length} of {@code slot}'s payload lie in one scatter/gather entry of a
     * region a {@link ByteBuffer} can view (up to 2 GiB): then the next {@link #transmitPacket} takes them from there
     * ({@link #externalLength}), for the ICRC and for the kernel. Else (inline data, a packet across entries, a bad
     * lkey, which {@code gather} then reports) false, and the payload is copied into the batch as before.
     */
    private boolean payloadInPlace(SendSlot slot, long skip, int payloadAt, int length) {
        if (slot.inline) {
            return false;
        }
        long position = 0;
        for (int i = 0; i < slot.sgeCount; i++) {
            int len = slot.sgeLength[i];
            if (position + len <= skip) {
                position += len;
                continue;
            }
            long from = skip - position;
            if (from + length > len) {
                return false;
            }
            io.jccl.verbs.spi.SoftMemoryRegion region = localRegion(slot.sgeAddress[i], len, slot.sgeLkey[i], false);
            if (region == null) {
                return false;
            }
            MemorySegment memory = region.segment();
            if (memory.byteSize() > Integer.MAX_VALUE) {
                return false;
            }
            if (memory != externalMemory) { // a view per region, made when the region changes
                externalMemory = memory;
                externalView = memory.asByteBuffer();
            }
            externalOffset = (int) (slot.sgeAddress[i] - region.address() + from);
            externalAt = payloadAt;
            externalLength = length;
            return true;
        }
        return false;
    }

    /**
     * Puts the ICRC on the packet in {@link #tx} and queues it in the batch (sent when the batch is full or the
     * lock is about to be released); a request arms the local ACK timer if it is off.
     */
    private boolean transmitPacket(int length, boolean request) {
        int value;
        if (externalLength > 0) {
            value = icrc.computeIpv4(roce.localIpv4(), remoteIpv4, 0, RoceContext.DONT_FRAGMENT, txSourcePort,
                remotePort, tx, 0, length, externalAt, externalView, externalOffset, externalLength);
            txBatch.external(externalAt, externalMemory.address() + externalOffset, externalLength);
            externalLength = 0;
        } else {
            value = icrc.computeIpv4(roce.localIpv4(), remoteIpv4, 0, RoceContext.DONT_FRAGMENT, txSourcePort,
                remotePort, tx, 0, length);
        }
        Icrc.put(tx, 0, length, value);
        if (request && pacer != null && bth.wrap(tx, 0).ackRequest()) {
            pacer.controller().onAckRequested(bth.psn(), System.nanoTime()); // an RTT sample for the delay mode
        }
        roce.queue(txBatch, txSocket, length);
        if (txBatch.isFull() && !flushTx()) {
            return false;
        }
        tx = txBatch.buffer();
        txSegment = txBatch.segment();
        if (request && retransmitDeadlineNs == 0 && timeout != 0) {
            armRetransmitTimer();
        }
        return true;
    }

    /** Sends an ACK held back by {@link #onPacket} (takes the lock; a cheap volatile check when none is). */
    void flushHeldAck() {
        if (!ackHeld) {
            return;
        }
        lockWithoutQueueing();
        try {
            flushTx();
        } finally {
            lock.unlock();
        }
    }

    /** Whether an ACK is held back (the receive thread sends it when no poller does). */
    boolean ackHeld() {
        return ackHeld;
    }

    /** Sends the queued packets (must hold the lock; before releasing it, whoever queued). */
    private boolean flushTx() {
        ackHeld = false;
        try {
            roce.flush(txBatch, txSocket, remoteSocket, remoteIpv4, remotePort);
            return true;
        } catch (IOException e) {
            Log.get().warn(-1, Log.Subsys.NET, "roce0: QP 0x" + Integer.toHexString(queuePairNumber)
                + ": send failed: " + e);
            enterError("send failed: " + e.getMessage());
            return false;
        } finally {
            tx = txBatch.buffer();
            txSegment = txBatch.segment();
        }
    }

    private void armRetransmitTimer() {
        long deadline = System.nanoTime() + roce.ackTimeoutNs(timeout);
        retransmitDeadlineNs = deadline == 0 ? 1 : deadline;
        roce.timerArmed(deadline);
    }

    private void sendAcknowledge(int psn, int syndrome) {
        int length = RoceOpcode.packetLength(RoceOpcode.ACKNOWLEDGE, 0);
        bth.wrap(tx, 0).init(RoceOpcode.ACKNOWLEDGE, 0, pKey, destQpNumber, psn);
        aeth.wrap(tx, BthFlyweight.LENGTH).syndrome(syndrome).msn(msn);
        transmitPacket(length, false);
    }

    // ------------------------------------------------------------------------------------------------ timers

    /**
     * Timer thread: fires the RNR wait or the local ACK timer when due (takes the lock only then).
     *
     * @return the earliest deadline still pending, 0 when none
     */
    long onTimer(long nowNs) {
        long pace = paceDeadlineNs;
        if (pace != 0 && nowNs - pace >= 0) {
            lockWithoutQueueing();
            try {
                if (paceDeadlineNs != 0 && nowNs - paceDeadlineNs >= 0) {
                    paceDeadlineNs = 0;
                    if (!isClosed() && (state == QueuePairState.READY_TO_SEND
                        || state == QueuePairState.SEND_QUEUE_DRAINED)) {
                        transmit();
                    }
                }
            } finally {
                lock.unlock();
            }
        }
        long next = earliestDeadline(nowNs);
        pace = paceDeadlineNs; // after: a go-back-N or RNR resume may have been paced
        return pace == 0 ? next : next == 0 || pace - next < 0 ? pace : next;
    }

    /** The RNR wait and the local ACK timer: fires them when due, returns the earliest still pending (0: none). */
    private long earliestDeadline(long nowNs) {
        long rnr = rnrDeadlineNs;
        long retransmit = retransmitDeadlineNs;
        if ((rnr != 0 && nowNs - rnr >= 0) || (retransmit != 0 && nowNs - retransmit >= 0)) {
            lock.lock();
            try {
                if (!isClosed() && (state == QueuePairState.READY_TO_SEND
                    || state == QueuePairState.SEND_QUEUE_DRAINED)) {
                    fire(nowNs);
                }
            } finally {
                flushTx();
                lock.unlock();
            }
            rnr = rnrDeadlineNs;
            retransmit = retransmitDeadlineNs;
        }
        if (rnr == 0) {
            return retransmit;
        }
        return retransmit == 0 || rnr - retransmit < 0 ? rnr : retransmit;
    }

    private void fire(long nowNs) {
        long rnr = rnrDeadlineNs;
        if (rnr != 0) {
            if (nowNs - rnr >= 0) {
                rnrDeadlineNs = 0;
                rewind();
                transmit();
            }
            return;
        }
        long retransmit = retransmitDeadlineNs;
        if (retransmit != 0 && nowNs - retransmit >= 0) {
            // An ACK may be waiting in our own socket behind a receive thread the host has not scheduled (on a
            // loaded host, for longer than the timer): going back N then resends what the peer has. Fire only
            // once the receive thread has found its socket empty after the expiry; ACKs it handles meanwhile
            // restart the timer (onProgress).
            long drains = roce.receiveDrains();
            if (expiryDrains == -1) {
                expiryDrains = drains;
                expiryNs = nowNs;
            }
            // bounded: a receive thread that never finds its socket empty (a peer that never pauses) waits one
            // more timeout at most
            if (drains == expiryDrains && !roce.receiveParked() && nowNs - expiryNs < roce.ackTimeoutNs(timeout)) {
                long recheck = nowNs + EXPIRY_RECHECK_NS;
                retransmitDeadlineNs = recheck == 0 ? 1 : recheck;
                roce.timerArmed(recheck);
                return;
            }
            expiryDrains = -1;
            retransmitDeadlineNs = 0;
            if (Psn.compare(sentEndPsn, Psn.next(lastAckedPsn)) > 0) {
                context.counterSet().increment(Counter.LOCAL_ACK_TIMEOUT_ERR);
                retry(true);
            }
        }
    }

    /**
     * Go-back-N (rxe's COMPST_ERROR_RETRY): resend everything from the first unacknowledged PSN, or, with no
     * retry left, complete the oldest send with RETRY_EXC_ERR (the QP enters ERR). A NAK or a lost response does
     * not start a second retry before something is acknowledged; a timeout always does.
     */
    private void retry(boolean timedOut) {
        if (sendHead >= sendTail) {
            return; // nothing to retry
        }
        if (startedRetry && !timedOut) {
            return;
        }
        if (retriesLeft > 0) {
            if (retryCount != INFINITE_RETRIES) {
                retriesLeft--;
            }
            context.counterSet().increment(Counter.COMPLETER_RETRY_ERR);
            startedRetry = true;
            rewind();
            transmit();
            return;
        }
        context.counterSet().increment(Counter.RETRY_EXCEEDED_ERR);
        completeSend(WorkCompletionStatus.RETRY_EXC_ERR, 0, 0);
    }

    /** Moves the send queue back (or forward) to the first unacknowledged PSN (rxe's {@code req_retry}). */
    private void rewind() {
        if (pacer != null) {
            pacer.controller().onRetransmit();
        }
        int mtu = mtuBytes();
        sqPsn = Psn.next(lastAckedPsn);
        sendNext = sendHead;
        if (sendHead < sendTail) {
            SendSlot head = sendSlot(sendHead);
            if (head.started) {
                // a partly acknowledged message resumes where the acknowledgement ends
                long done = (long) Psn.distance(head.psn, sqPsn) * mtu;
                head.progress = head.opcode.isAtomic() ? 0 : Math.min(done, head.length);
            }
            for (long i = sendHead + 1; i < sendTail; i++) {
                sendSlot(i).started = false;
            }
        }
    }

    /** Something was acknowledged: retry budgets are whole again and the ACK timer restarts (or stops). */
    private void onProgress() {
        retriesLeft = retryCount;
        rnrRetriesLeft = rnrRetry;
        startedRetry = false;
        expiryDrains = -1;
        if (Psn.compare(sentEndPsn, Psn.next(lastAckedPsn)) > 0 && timeout != 0) {
            armRetransmitTimer();
        } else {
            retransmitDeadlineNs = 0;
        }
    }

    // ------------------------------------------------------------------------------------------------ receive

    /**
     * Takes {@link #lock} the way the packet and posting paths must: {@code lock()} allocates a queue node each
     * time it has to wait (the requester's receive thread met the posting thread there about once per message,
     * 6 to 31 bytes per message). {@code tryLock} never queues: spin briefly (the holder sends a few packets),
     * then yield, then nap a microsecond at a time (a holder descheduled on a loaded host).
     */
    private void lockWithoutQueueing() {
        for (int i = 0; !lock.tryLock(); i++) {
            if (i < 64) {
                Thread.onSpinWait();
            } else if (i < 1024) {
                Thread.yield();
            } else {
                java.util.concurrent.locks.LockSupport.parkNanos(1_000);
            }
        }
    }

    /**
     * One checked datagram for this QP (the thread that drains the context's socket): a request for the responder
     * or a response. {@code tos} is the packet's IPv4 TOS byte (ECN in its low two bits; -1 where the socket does
     * not report it, {@link RoceContext#reportsTos()}).
     */
    void onPacket(ByteBuffer packet, MemorySegment packetSegment, int length, int sourceIpv4, int sourcePort,
                  int tos) {
        lockWithoutQueueing();
        receiving = true;
        try {
            if (isClosed() || (state != QueuePairState.READY_TO_RECEIVE && state != QueuePairState.READY_TO_SEND
                && state != QueuePairState.SEND_QUEUE_DRAINED) || !fromPeer(sourceIpv4, sourcePort)) {
                context.counterSet().increment(Counter.PORT_RCV_ERRORS);
                return;
            }
            inBth.wrap(packet, 0);
            if (!RoceSettings.pKeysMatch(inBth.pKey(), pKey)) {
                context.counterSet().increment(Counter.BAD_PKEY_CNTR);
                return;
            }
            int opcode = inBth.opcode();
            if (RoceOpcode.has(opcode, RoceOpcode.REQUEST_MASK)) {
                onRequest(packet, packetSegment, length, opcode);
            } else if (RoceOpcode.has(opcode, RoceOpcode.ACK_MASK) && (state == QueuePairState.READY_TO_SEND
                || state == QueuePairState.SEND_QUEUE_DRAINED)) {
                onResponse(packet, packetSegment, length, opcode);
            } else {
                context.counterSet().increment(Counter.PORT_RCV_ERRORS);
            }
        } finally {
            receiving = false;
            if (roce.holdsAck(txBatch)) {
                ackHeld = true; // the application's answer, or its next poll, takes it along (RoceContext)
                roce.ackWasHeld();
            } else {
                flushTx(); // ACKs and READ responses this packet caused
            }
            lock.unlock();
        }
    }

    /**
     * A congestion notification packet from the peer (receive thread; the context checked its ICRC): DCQCN's
     * reaction point cuts this QP's rate (rp_cnp_handled), or, with no controller that reacts, it is counted in
     * rp_cnp_ignored.
     */
    void onCnp(ByteBuffer packet, int sourceIpv4, int sourcePort) {
        lockWithoutQueueing();
        try {
            if (isClosed() || (state != QueuePairState.READY_TO_RECEIVE && state != QueuePairState.READY_TO_SEND
                && state != QueuePairState.SEND_QUEUE_DRAINED) || !fromPeer(sourceIpv4, sourcePort)) {
                context.counterSet().increment(Counter.PORT_RCV_ERRORS);
                return;
            }
            if (!RoceSettings.pKeysMatch(inBth.wrap(packet, 0).pKey(), pKey)) {
                context.counterSet().increment(Counter.BAD_PKEY_CNTR);
                return;
            }
            if (pacer != null && pacer.onCnp(System.nanoTime())) {
                context.counterSet().increment(Counter.RP_CNP_HANDLED);
            } else {
                context.counterSet().increment(Counter.RP_CNP_IGNORED);
            }
        } finally {
            lock.unlock();
        }
    }

    /** An ACK, NAK, READ response or atomic ACK (requester side, rxe's completer). */
    private void onResponse(ByteBuffer packet, MemorySegment packetSegment, int length, int opcode) {
        int psn = inBth.psn();
        // It may only speak of PSNs we sent and the peer has not acknowledged yet.
        if (Psn.compare(psn, lastAckedPsn) <= 0 || Psn.compare(psn, sentEndPsn) >= 0 || sendHead >= sendTail) {
            return; // a stale or duplicate response
        }
        int before = lastAckedPsn;
        if (opcode == RoceOpcode.ACKNOWLEDGE) {
            inAeth.wrap(packet, BthFlyweight.LENGTH);
            int type = inAeth.type();
            if (type == AethFlyweight.TYPE_ACK) {
                boolean complete = acknowledgeUpTo(psn);
                afterAcknowledge(before);
                if (!complete) {
                    context.counterSet().increment(Counter.RCVD_SEQ_ERR);
                    retry(false); // the ACK passed a READ or atomic whose response was lost
                }
                transmit();
                return;
            }
            // A NAK acknowledges every PSN before its own.
            acknowledgeUpTo(Psn.add(psn, -1));
            afterAcknowledge(before);
            onNak(type, psn);
            return;
        }
        if (!acknowledgeUpTo(Psn.add(psn, -1)) || Psn.compare(psn, Psn.next(lastAckedPsn)) > 0) {
            afterAcknowledge(before);
            context.counterSet().increment(Counter.RCVD_SEQ_ERR);
            retry(false); // a response before this one was lost
            return;
        }
        afterAcknowledge(before);
        if (sendHead >= sendTail) {
            return;
        }
        SendSlot slot = sendSlot(sendHead);
        if (opcode == RoceOpcode.ATOMIC_ACKNOWLEDGE) {
            onAtomicAcknowledge(packet, slot, psn);
        } else {
            onReadResponse(packet, packetSegment, length, opcode, slot, psn);
        }
        transmit();
    }

    /** After an acknowledgement moved {@link #lastAckedPsn}: progress bookkeeping, and skip what the peer has. */
    private void afterAcknowledge(int before) {
        if (Psn.compare(lastAckedPsn, before) > 0) {
            if (pacer != null) {
                pacer.controller().onAcknowledged(lastAckedPsn, System.nanoTime());
            }
            onProgress();
            if (Psn.compare(sqPsn, Psn.next(lastAckedPsn)) < 0) {
                rewind(); // the peer acknowledged beyond where a retry restarted: resume after it
            }
        }
    }

    private void onNak(int type, int psn) {
        if (sendHead >= sendTail) {
            return;
        }
        if (type == AethFlyweight.TYPE_RNR_NAK) {
            context.counterSet().increment(Counter.RCVD_RNR_ERR);
            if (rnrDeadlineNs != 0) {
                return; // already waiting
            }
            if (rnrRetriesLeft > 0) {
                if (rnrRetry != INFINITE_RETRIES) {
                    rnrRetriesLeft--;
                }
                retransmitDeadlineNs = 0;
                long deadline = System.nanoTime() + RnrTimer.delayNs(inAeth.value());
                rnrDeadlineNs = deadline == 0 ? 1 : deadline;
                roce.timerArmed(deadline);
                return;
            }
            context.counterSet().increment(Counter.RNR_RETRY_EXCEEDED_ERR);
            context.counterSet().increment(Counter.RNR_NAK_RETRY_ERR);
            completeSend(WorkCompletionStatus.RNR_RETRY_EXC_ERR, 0, 0);
            return;
        }
        if (type != AethFlyweight.TYPE_NAK) {
            completeSend(WorkCompletionStatus.BAD_RESP_ERR, 0, 0);
            return;
        }
        WorkCompletionStatus status;
        switch (inAeth.value()) {
            case AethFlyweight.NAK_PSN_SEQUENCE_ERROR -> {
                context.counterSet().increment(Counter.RCVD_SEQ_ERR);
                context.counterSet().increment(Counter.PACKET_SEQ_ERR);
                if (rnrDeadlineNs == 0) {
                    retry(false);
                }
                return;
            }
            case AethFlyweight.NAK_INVALID_REQUEST -> status = WorkCompletionStatus.REM_INV_REQ_ERR;
            case AethFlyweight.NAK_REMOTE_ACCESS_ERROR -> {
                context.counterSet().increment(Counter.REQ_REMOTE_ACCESS_ERRORS);
                status = WorkCompletionStatus.REM_ACCESS_ERR;
            }
            default -> status = WorkCompletionStatus.REM_OP_ERR;
        }
        completeSend(status, 0, 0);
    }

    /**
     * Completes, in order, every sent SEND/WRITE whose last PSN is at or before {@code psn} and moves
     * {@link #lastAckedPsn} forward. A READ or atomic completes only through its own response: an
     * acknowledgement that passes one means its response was lost.
     *
     * @return false when a READ or atomic ending at or before {@code psn} has no response yet
     */
    private boolean acknowledgeUpTo(int psn) {
        int acked = psn;
        boolean complete = true;
        while (sendHead < sendTail) {
            SendSlot slot = sendSlot(sendHead);
            boolean sent = sendHead < sentEnd;
            if (!sent && !(slot.started && slot.opcode == SendOpcode.RDMA_READ)) {
                break; // not fully sent: its last PSN is unknown (a partly sent READ knows it)
            }
            int last = messageLastPsn[(int) (sendHead % messageLastPsn.length)];
            if (isReadOrAtomic(slot.opcode)) {
                if (Psn.compare(slot.psn, psn) <= 0) {
                    acked = Psn.compare(lastAckedPsn, Psn.add(slot.psn, -1)) > 0 ? lastAckedPsn
                        : Psn.add(slot.psn, -1);
                    complete = Psn.compare(last, psn) > 0;
                }
                break;
            }
            if (Psn.compare(last, psn) > 0) {
                break;
            }
            completeSend(WorkCompletionStatus.SUCCESS, (int) slot.length, 0);
        }
        if (Psn.compare(acked, lastAckedPsn) > 0) {
            lastAckedPsn = acked;
        }
        return complete;
    }

    private void onReadResponse(ByteBuffer packet, MemorySegment packetSegment, int length, int opcode,
                                SendSlot slot, int psn) {
        int last = messageLastPsn[(int) (sendHead % messageLastPsn.length)];
        if (slot.opcode != SendOpcode.RDMA_READ || !slot.started || Psn.compare(psn, slot.psn) < 0
            || Psn.compare(psn, last) > 0 || !RoceOpcode.has(opcode, RoceOpcode.PAYLOAD_MASK)) {
            completeSend(WorkCompletionStatus.BAD_RESP_ERR, 0, 0);
            return;
        }
        int mtu = mtuBytes();
        long offset = (long) Psn.distance(slot.psn, psn) * mtu;
        int payloadAt = RoceOpcode.headerLength(opcode);
        int payload = length - payloadAt - inBth.padCount() - RoceOpcode.ICRC_LENGTH;
        boolean end = RoceOpcode.has(opcode, RoceOpcode.END_MASK);
        long expected = Math.min(mtu, slot.length - offset);
        // END closes each request of a long READ; the READ's own last PSN must carry it
        if (payload != expected || (psn == last && !end)) {
            completeSend(WorkCompletionStatus.BAD_RESP_ERR, 0, 0);
            return;
        }
        if (payload > 0 && !scatter(slot.sgeAddress, slot.sgeLength, slot.sgeLkey, slot.sgeCount, offset,
            packetSegment, payloadAt, payload)) {
            completeSend(WorkCompletionStatus.LOC_PROT_ERR, 0, 0);
            return;
        }
        int before = lastAckedPsn;
        lastAckedPsn = psn;
        afterAcknowledge(before);
        if (psn == last) {
            completeSend(WorkCompletionStatus.SUCCESS, (int) slot.length, 0);
        }
    }

    private void onAtomicAcknowledge(ByteBuffer packet, SendSlot slot, int psn) {
        if (!slot.opcode.isAtomic() || sendHead >= sentEnd || psn != slot.psn) {
            completeSend(WorkCompletionStatus.BAD_RESP_ERR, 0, 0);
            return;
        }
        long original = inAtomicAckEth.wrap(packet, RoceOpcode.atomicAckEthOffset(RoceOpcode.ATOMIC_ACKNOWLEDGE))
            .originalData();
        SoftMemoryRegion target = localRegion(slot.sgeAddress[0], 8, slot.sgeLkey[0], true);
        if (target == null) {
            completeSend(WorkCompletionStatus.LOC_PROT_ERR, 0, 0);
            return;
        }
        target.segment().set(ValueLayout.JAVA_LONG_UNALIGNED, slot.sgeAddress[0] - target.address(), original);
        int before = lastAckedPsn;
        lastAckedPsn = psn;
        afterAcknowledge(before);
        completeSend(WorkCompletionStatus.SUCCESS, 8, 0);
    }

    // ------------------------------------------------------------------------------------------------ responder

    private void onRequest(ByteBuffer packet, MemorySegment packetSegment, int length, int opcode) {
        int psn = inBth.psn();
        boolean ackRequest = inBth.ackRequest();
        int order = Psn.compare(psn, rqPsn);
        if (order < 0) {
            onDuplicate(packet, opcode, psn);
            return;
        }
        if (order > 0) {
            // Something before it was lost: one NAK per gap (rxe's sent_psn_nak), then drop until ePSN arrives.
            context.counterSet().increment(Counter.OUT_OF_SEQ_REQUEST);
            context.counterSet().increment(Counter.OUT_OF_SEQUENCE);
            if (!nakSent) {
                nakSent = true;
                sendAcknowledge(rqPsn, AethFlyweight.TYPE_NAK | AethFlyweight.NAK_PSN_SEQUENCE_ERROR);
            }
            return;
        }
        if (RoceOpcode.has(opcode, RoceOpcode.READ_MASK) || RoceOpcode.has(opcode, RoceOpcode.ATOMIC_MASK)) {
            if (inMessage || length != RoceOpcode.headerLength(opcode) + RoceOpcode.ICRC_LENGTH) {
                fatalNak(AethFlyweight.NAK_INVALID_REQUEST, "invalid request " + RoceOpcode.name(opcode));
                return;
            }
            if (RoceOpcode.has(opcode, RoceOpcode.READ_MASK)) {
                executeRead(packet, opcode, psn);
            } else {
                executeAtomic(packet, opcode, psn);
            }
            return;
        }
        int payloadAt = RoceOpcode.headerLength(opcode);
        int payload = length - payloadAt - inBth.padCount() - RoceOpcode.ICRC_LENGTH;
        boolean start = RoceOpcode.has(opcode, RoceOpcode.START_MASK);
        boolean end = RoceOpcode.has(opcode, RoceOpcode.END_MASK);
        int operation = RoceOpcode.has(opcode, RoceOpcode.SEND_MASK) ? MessageSegmenter.SEND
            : RoceOpcode.has(opcode, RoceOpcode.WRITE_MASK) ? MessageSegmenter.RDMA_WRITE : -1;
        if (operation < 0 || start == inMessage || (inMessage && operation != messageOperation)
            || payload > mtuBytes() || (!end && payload != mtuBytes())) {
            // a packet out of message order, or of the wrong size
            fatalNak(AethFlyweight.NAK_INVALID_REQUEST, "invalid request " + RoceOpcode.name(opcode));
            return;
        }
        boolean done = operation == MessageSegmenter.SEND
            ? receiveSend(packet, packetSegment, opcode, payloadAt, payload, start, end)
            : receiveWrite(packet, packetSegment, opcode, payloadAt, payload, start, end);
        if (!done) {
            return;
        }
        nakSent = false;
        rqPsn = Psn.next(rqPsn);
        inMessage = !end;
        messageOperation = operation;
        if (end) {
            msn = (msn + 1) & Psn.MASK;
        }
        if (ackRequest) {
            sendAcknowledge(psn, AethFlyweight.TYPE_ACK | AethFlyweight.CREDITS_UNLIMITED);
        } else {
            context.counterSet().increment(Counter.ACK_DEFERRED);
        }
    }

    /**
     * A request before the expected PSN: executed already, so never again (C9-105). SEND and WRITE are
     * re-ACKed with the last PSN executed; a READ is answered again; an atomic gets its cached result.
     */
    private void onDuplicate(ByteBuffer packet, int opcode, int psn) {
        context.counterSet().increment(Counter.DUPLICATE_REQUEST);
        if (RoceOpcode.has(opcode, RoceOpcode.READ_MASK)) {
            inReth.wrap(packet, RoceOpcode.rethOffset(opcode));
            long address = inReth.virtualAddress();
            long readLength = inReth.dmaLength() & 0xFFFF_FFFFL;
            SoftMemoryRegion region = readLength == 0 ? null
                : remoteRegion(inReth.rKey(), address, readLength, AccessFlag.REMOTE_READ);
            int packets = MessageSegmenter.packetCount(readLength, mtuBytes());
            if ((readLength > 0 && region == null) || Psn.compare(Psn.add(psn, packets - 1), rqPsn) >= 0) {
                return; // not a request we executed: drop it
            }
            sendReadResponses(psn, region, address, readLength);
            return;
        }
        if (RoceOpcode.has(opcode, RoceOpcode.ATOMIC_MASK)) {
            for (int i = 0; i < atomicPsn.length; i++) {
                if (atomicPsn[i] == psn) {
                    sendAtomicAcknowledge(psn, atomicOriginal[i]);
                    return;
                }
            }
            return; // its result is no longer cached: drop, as rxe does
        }
        sendAcknowledge(Psn.add(rqPsn, -1), AethFlyweight.TYPE_ACK | AethFlyweight.CREDITS_UNLIMITED);
    }

    private void executeRead(ByteBuffer packet, int opcode, int psn) {
        if (!acceptsIncoming(SendOpcode.RDMA_READ)) {
            fatalNak(AethFlyweight.NAK_INVALID_REQUEST, "RDMA READ without REMOTE_READ access");
            return;
        }
        inReth.wrap(packet, RoceOpcode.rethOffset(opcode));
        long address = inReth.virtualAddress();
        long readLength = inReth.dmaLength() & 0xFFFF_FFFFL;
        SoftMemoryRegion region = readLength == 0 ? null
            : remoteRegion(inReth.rKey(), address, readLength, AccessFlag.REMOTE_READ);
        if (readLength > 0 && region == null) {
            context.counterSet().increment(Counter.REMOTE_ACCESS_ERRORS);
            fatalNak(AethFlyweight.NAK_REMOTE_ACCESS_ERROR, "RDMA READ: bad rkey, range or access");
            return;
        }
        nakSent = false;
        msn = (msn + 1) & Psn.MASK;
        int packets = MessageSegmenter.packetCount(readLength, mtuBytes());
        rqPsn = Psn.add(psn, packets);
        sendReadResponses(psn, region, address, readLength);
    }

    /** READ RESPONSE FIRST/MIDDLE/LAST or ONLY from {@code psn} on, read from the region now. */
    private void sendReadResponses(int psn, SoftMemoryRegion region, long address, long readLength) {
        int mtu = mtuBytes();
        int packets = MessageSegmenter.packetCount(readLength, mtu);
        for (int i = 0; i < packets && state != QueuePairState.ERROR; i++) {
            long offset = (long) i * mtu;
            int payload = (int) Math.min(mtu, readLength - offset);
            int opcode = MessageSegmenter.opcode(MessageSegmenter.RDMA_READ_RESPONSE, i == 0, i == packets - 1);
            int pad = RoceOpcode.padCount(payload);
            bth.wrap(tx, 0).init(opcode, pad, pKey, destQpNumber, Psn.add(psn, i));
            int aethAt = RoceOpcode.aethOffset(opcode);
            if (aethAt >= 0) {
                aeth.wrap(tx, aethAt).syndrome(AethFlyweight.TYPE_ACK | AethFlyweight.CREDITS_UNLIMITED).msn(msn);
            }
            int payloadAt = RoceOpcode.headerLength(opcode);
            if (payload > 0) {
                if (!region.isValid()) {
                    fatalNak(AethFlyweight.NAK_REMOTE_ACCESS_ERROR, "region deregistered during an RDMA READ");
                    return;
                }
                MemorySegment.copy(region.segment(), address - region.address() + offset, txSegment, payloadAt,
                    payload);
            }
            for (int p = 0; p < pad; p++) {
                tx.put(payloadAt + payload + p, (byte) 0);
            }
            transmitPacket(RoceOpcode.packetLength(opcode, payload), false);
        }
    }

    private void executeAtomic(ByteBuffer packet, int opcode, int psn) {
        SendOpcode operation = opcode == RoceOpcode.COMPARE_SWAP ? SendOpcode.ATOMIC_CMP_AND_SWP
            : SendOpcode.ATOMIC_FETCH_AND_ADD;
        if (!acceptsIncoming(operation)) {
            fatalNak(AethFlyweight.NAK_INVALID_REQUEST, "atomic without REMOTE_ATOMIC access");
            return;
        }
        inAtomicEth.wrap(packet, RoceOpcode.atomicEthOffset(opcode));
        long address = inAtomicEth.virtualAddress();
        if ((address & 7) != 0) {
            fatalNak(AethFlyweight.NAK_INVALID_REQUEST, "atomic on a misaligned address");
            return;
        }
        SoftMemoryRegion region = remoteRegion(inAtomicEth.rKey(), address, 8, AccessFlag.REMOTE_ATOMIC);
        if (region == null) {
            context.counterSet().increment(Counter.REMOTE_ACCESS_ERRORS);
            fatalNak(AethFlyweight.NAK_REMOTE_ACCESS_ERROR, "atomic: bad rkey, range or access");
            return;
        }
        long offset = address - region.address();
        MemorySegment segment = region.segment();
        long original = opcode == RoceOpcode.COMPARE_SWAP
            ? (long) LONG.compareAndExchange(segment, offset, inAtomicEth.compare(), inAtomicEth.swapOrAdd())
            : (long) LONG.getAndAdd(segment, offset, inAtomicEth.swapOrAdd());
        // remember the result: a duplicate of this request is answered from here, never executed again
        int slots = Math.clamp(maxDestRdAtomic, 1, MAX_RD_ATOMIC);
        atomicNext = atomicNext % slots;
        atomicPsn[atomicNext] = psn;
        atomicOriginal[atomicNext] = original;
        atomicNext++;
        nakSent = false;
        msn = (msn + 1) & Psn.MASK;
        rqPsn = Psn.next(psn);
        sendAtomicAcknowledge(psn, original);
    }

    private void sendAtomicAcknowledge(int psn, long original) {
        int opcode = RoceOpcode.ATOMIC_ACKNOWLEDGE;
        bth.wrap(tx, 0).init(opcode, 0, pKey, destQpNumber, psn);
        aeth.wrap(tx, RoceOpcode.aethOffset(opcode)).syndrome(AethFlyweight.TYPE_ACK | AethFlyweight.CREDITS_UNLIMITED)
            .msn(msn);
        atomicAckEth.wrap(tx, RoceOpcode.atomicAckEthOffset(opcode)).originalData(original);
        transmitPacket(RoceOpcode.packetLength(opcode, 0), false);
    }

    private boolean receiveSend(ByteBuffer packet, MemorySegment packetSegment, int opcode, int payloadAt,
                                int payload, boolean start, boolean end) {
        if (receiveHead >= receiveTail) {
            if (!start) {
                fatalNak(AethFlyweight.NAK_REMOTE_OPERATIONAL_ERROR, "receive vanished inside a SEND");
                return false;
            }
            rnrNak();
            return false;
        }
        if (start) {
            messageOffset = 0;
        }
        ReceiveSlot slot = receiveSlot(receiveHead);
        if (messageOffset + payload > slot.length) {
            completeReceive(WorkCompletionStatus.LOC_LEN_ERR, WorkCompletionOpcode.RECV, 0, 0, false, destQpNumber);
            sendAcknowledge(inBth.psn(), AethFlyweight.TYPE_NAK | AethFlyweight.NAK_INVALID_REQUEST);
            return false;
        }
        if (payload > 0 && !scatter(slot.sgeAddress, slot.sgeLength, slot.sgeLkey, slot.sgeCount, messageOffset,
            packetSegment, payloadAt, payload)) {
            completeReceive(WorkCompletionStatus.LOC_PROT_ERR, WorkCompletionOpcode.RECV, 0, 0, false,
                destQpNumber);
            sendAcknowledge(inBth.psn(), AethFlyweight.TYPE_NAK | AethFlyweight.NAK_REMOTE_OPERATIONAL_ERROR);
            return false;
        }
        messageOffset += payload;
        if (end) {
            boolean withImmediate = RoceOpcode.has(opcode, RoceOpcode.IMMDT_MASK);
            int immediate = withImmediate ? inImmDt.wrap(packet, RoceOpcode.immediateOffset(opcode)).immediate() : 0;
            context.counterSet().increment(Counter.RDMA_RECVS);
            completeReceive(WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV, (int) messageOffset, immediate,
                withImmediate, destQpNumber);
        }
        return true;
    }

    private boolean receiveWrite(ByteBuffer packet, MemorySegment packetSegment, int opcode, int payloadAt,
                                 int payload, boolean start, boolean end) {
        if (start) {
            if (!acceptsIncoming(SendOpcode.RDMA_WRITE)) {
                fatalNak(AethFlyweight.NAK_INVALID_REQUEST, "RDMA WRITE without REMOTE_WRITE access");
                return false;
            }
            inReth.wrap(packet, RoceOpcode.rethOffset(opcode));
            writeAddress = inReth.virtualAddress();
            writeLength = inReth.dmaLength();
            writeRegion = writeLength == 0 ? null
                : remoteRegion(inReth.rKey(), writeAddress, writeLength, AccessFlag.REMOTE_WRITE);
            if (writeLength > 0 && writeRegion == null) {
                context.counterSet().increment(Counter.REMOTE_ACCESS_ERRORS);
                fatalNak(AethFlyweight.NAK_REMOTE_ACCESS_ERROR, "RDMA WRITE: bad rkey, range or access");
                return false;
            }
            messageOffset = 0;
        }
        if (messageOffset + payload > writeLength || (end && messageOffset + payload != writeLength)) {
            fatalNak(AethFlyweight.NAK_INVALID_REQUEST, "RDMA WRITE payload disagrees with the RETH length");
            return false;
        }
        boolean withImmediate = RoceOpcode.has(opcode, RoceOpcode.IMMDT_MASK);
        if (end && withImmediate && receiveHead >= receiveTail) {
            rnrNak();
            return false;
        }
        if (payload > 0) {
            if (!writeRegion.isValid()) {
                fatalNak(AethFlyweight.NAK_REMOTE_ACCESS_ERROR, "region deregistered during an RDMA WRITE");
                return false;
            }
            MemorySegment.copy(packetSegment, payloadAt, writeRegion.segment(),
                writeAddress - writeRegion.address() + messageOffset, payload);
        }
        messageOffset += payload;
        if (end && withImmediate) {
            int immediate = inImmDt.wrap(packet, RoceOpcode.immediateOffset(opcode)).immediate();
            completeReceive(WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV_RDMA_WITH_IMM,
                (int) writeLength, immediate, true, destQpNumber);
        }
        if (end) {
            writeRegion = null;
        }
        return true;
    }

    /**
     * No receive posted: an RNR NAK with our min_rnr_timer. Later packets of the burst are dropped silently (the
     * NAK latch) until the requester resends this PSN after its wait.
     */
    private void rnrNak() {
        context.counterSet().increment(Counter.SEND_RNR_ERR);
        nakSent = true;
        sendAcknowledge(inBth.psn(), AethFlyweight.TYPE_RNR_NAK | (minRnrTimer & 0x1F));
    }

    /**
     * Moves the QP to ERR and NAKs the current request (IB's class C responder errors). ERR first: once the
     * requester sees the NAK, this QP must already refuse everything.
     */
    private void fatalNak(int nakCode, String reason) {
        int psn = inBth.psn();
        enterError(reason);
        sendAcknowledge(psn, AethFlyweight.TYPE_NAK | nakCode);
    }

    @Override
    protected void onError() {
        // Nothing goes on the wire: an RC peer learns of it when its requests are NAKed or time out.
        writeRegion = null;
        retransmitDeadlineNs = 0;
        rnrDeadlineNs = 0;
    }

    @Override
    protected void destroy() {
        // The socket belongs to the context; the flow-label one is shared by the QPs that hash to its port.
        roce.removeTimed(this);
        if (txSocket != null) {
            txSocket = null;
            roce.releaseFlowSocket(flowUdpSourcePort);
        }
    }
}
