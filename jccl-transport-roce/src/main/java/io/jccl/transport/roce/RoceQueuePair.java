package io.jccl.transport.roce;

import io.jccl.common.Log;
import io.jccl.transport.roce.wire.AethFlyweight;
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
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;

/**
 * A reliable-connected queue pair of roce0, minimal: the requester segments SEND and RDMA WRITE messages (with or
 * without immediate) by the path MTU and sends them in PSN order, at most {@link #WINDOW_PSNS} packets ahead of the
 * last ACK, asking for an ACK on each message's last packet and every {@link #ACK_EVERY_PSNS} packets (rxe's
 * cadence); the responder accepts packets strictly in PSN order, executes them against receive work requests or
 * registered memory, and ACKs or NAKs as rxe does. Where the kernel grants a small receive buffer
 * ({@code net.core.rmem_max}) the window shrinks so that one QP's packets fit in the peer's socket buffer: with no
 * retransmission yet, a packet the kernel drops would stall the QP.
 *
 * <p><b>Not yet:</b> retransmission (a lost packet stalls the QP: no go-back-N, no ACK timeout), RNR retry (an RNR
 * NAK completes the send with RNR_RETRY_EXC_ERR, as rnr_retry 0 would), RDMA READ and atomics (LOC_QP_OP_ERR),
 * P_Keys other than the default, telling the peer when this QP enters ERR. All state is guarded by {@link #lock};
 * packets are built in one reusable direct buffer per QP: nothing is allocated per packet.
 */
final class RoceQueuePair extends AbstractQueuePair {
    /** Most packets in flight beyond the last acknowledged PSN (rxe's RXE_MAX_UNACKED_PSNS). */
    static final int WINDOW_PSNS = 128;
    /** AckReq at least this often within a long message (rxe's RXE_MAX_PKT_PER_ACK). */
    static final int ACK_EVERY_PSNS = 64;

    private final RoceContext roce;
    private final ByteBuffer tx = ByteBuffer.allocateDirect(MessageSegmenter.MAX_MTU + 64);
    private final MemorySegment txSegment = MemorySegment.ofBuffer(tx);
    private final BthFlyweight bth = new BthFlyweight();
    private final RethFlyweight reth = new RethFlyweight();
    private final ImmDtFlyweight immDt = new ImmDtFlyweight();
    private final AethFlyweight aeth = new AethFlyweight();
    private final Icrc icrc = new Icrc();
    // receive-side views (receive thread, under the lock)
    private final BthFlyweight inBth = new BthFlyweight();
    private final RethFlyweight inReth = new RethFlyweight();
    private final ImmDtFlyweight inImmDt = new ImmDtFlyweight();
    private final AethFlyweight inAeth = new AethFlyweight();

    private InetSocketAddress remoteSocket;
    private int remoteIpv4;
    private int remotePort;
    /** The source port rdma_get_udp_sport gives this QP pair; see docs/transport-roce.md for why it is not used. */
    private int flowUdpSourcePort;

    // requester
    private int lastAckedPsn;
    /** Packets in flight at most: {@link #WINDOW_PSNS}, less where the socket buffer is small. */
    private int windowPsns = WINDOW_PSNS;
    /** AckReq cadence within a message: half the window. */
    private int ackEveryPsns = ACK_EVERY_PSNS;
    /** Last PSN of each message, by send ring position (what an ACK must reach to complete it). */
    private final int[] messageLastPsn;

    // responder
    private int msn;
    private boolean nakSent;
    private boolean inMessage;
    private int messageOperation;
    private long messageOffset;
    private SoftMemoryRegion writeRegion;
    private long writeAddress;
    private long writeLength;

    RoceQueuePair(RoceProtectionDomain domain, RoceContext context, QueuePairInitAttributes init) {
        super(domain, init);
        this.roce = context;
        this.messageLastPsn = new int[init.maxSendWorkRequests()];
    }

    @Override
    protected String localAddress() {
        return roce.addressText();
    }

    /** Packets this QP sends beyond the last acknowledged PSN at most. */
    int windowPsns() {
        return windowPsns;
    }

    /** The UDP source port the flow label gives this connection ({@code rdma_get_udp_sport}). */
    int flowUdpSourcePort() {
        return flowUdpSourcePort;
    }

    boolean isClosedForInput() {
        return isClosed();
    }

    @Override
    protected void beforeTransition(QueuePairState from, QueuePairState to, QueuePairAttributes attributes) {
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
        flowUdpSourcePort = UdpSourcePort.of(0, queuePairNumber, remote.queuePairNumber());
    }

    @Override
    protected void afterTransition(QueuePairState from, QueuePairState to) {
        if (to == QueuePairState.READY_TO_SEND && from == QueuePairState.READY_TO_RECEIVE) {
            lastAckedPsn = Psn.add(sqPsn, -1);
            // a loopback skb costs about the payload plus 1 KiB of the receive buffer; leave room for other QPs
            int fit = roce.receiveBufferBytes() / (4 * (mtuBytes() + 1024));
            windowPsns = Math.clamp(fit, 2, WINDOW_PSNS);
            ackEveryPsns = Math.min(ACK_EVERY_PSNS, windowPsns / 2);
        }
    }

    @Override
    public int progress() {
        return 0; // the context's receive thread and the posting thread do all the work
    }

    @Override
    protected void onSendPosted() {
        lock.lock();
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

    /** Sends what the window allows (must hold the lock). */
    private void transmit() {
        int mtu = mtuBytes();
        while (sendNext < sendTail && state == QueuePairState.READY_TO_SEND) {
            SendSlot slot = sendSlot(sendNext);
            int operation = operation(slot.opcode);
            if (!slot.started) {
                if (operation < 0 || !checkLocal(slot, false)) {
                    if (sendNext != sendHead) {
                        return; // complete in order: wait until everything before it is acknowledged
                    }
                    completeSend(operation < 0 ? WorkCompletionStatus.LOC_QP_OP_ERR
                        : WorkCompletionStatus.LOC_PROT_ERR, 0, 0);
                    continue;
                }
                slot.started = true;
                slot.progress = 0;
            }
            while (true) {
                if (Psn.distance(lastAckedPsn, sqPsn) > windowPsns) {
                    return; // an ACK reopens the window (onAcknowledge calls transmit)
                }
                int payload = (int) Math.min(mtu, slot.length - slot.progress);
                boolean first = slot.progress == 0;
                boolean last = slot.progress + payload == slot.length;
                int opcode = MessageSegmenter.opcode(operation, first, last);
                boolean ackRequest = last || Psn.distance(lastAckedPsn, sqPsn) % ackEveryPsns == 0;
                if (!sendRequest(slot, opcode, payload, ackRequest)) {
                    return;
                }
                slot.progress += payload;
                if (last) {
                    messageLastPsn[(int) (sendNext % messageLastPsn.length)] = sqPsn;
                    sqPsn = Psn.next(sqPsn);
                    sendNext++;
                    break;
                }
                sqPsn = Psn.next(sqPsn);
            }
        }
    }

    private boolean sendRequest(SendSlot slot, int opcode, int payload, boolean ackRequest) {
        int pad = RoceOpcode.padCount(payload);
        int length = RoceOpcode.packetLength(opcode, payload);
        bth.wrap(tx, 0).init(opcode, pad, BthFlyweight.DEFAULT_PKEY, destQpNumber, sqPsn).ackRequest(ackRequest);
        int rethAt = RoceOpcode.rethOffset(opcode);
        if (rethAt >= 0) {
            reth.wrap(tx, rethAt).virtualAddress(slot.remoteAddress).rKey(slot.rkey).dmaLength(slot.length);
        }
        int immAt = RoceOpcode.immediateOffset(opcode);
        if (immAt >= 0) {
            immDt.wrap(tx, immAt).immediate(slot.immediateData);
        }
        int payloadAt = RoceOpcode.headerLength(opcode);
        if (payload > 0 && !gather(slot, slot.progress, txSegment, payloadAt, payload)) {
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
        return transmitPacket(length);
    }

    private boolean transmitPacket(int length) {
        int value = icrc.computeIpv4(roce.localIpv4(), remoteIpv4, 0, RoceContext.DONT_FRAGMENT, roce.localPort(),
            remotePort, tx, 0, length);
        Icrc.put(tx, 0, length, value);
        try {
            roce.send(tx, length, remoteSocket);
            return true;
        } catch (IOException e) {
            Log.get().warn(-1, Log.Subsys.NET, "roce0: QP 0x" + Integer.toHexString(queuePairNumber)
                + ": send failed: " + e);
            enterError("send failed: " + e.getMessage());
            return false;
        }
    }

    private void sendAcknowledge(int psn, int syndrome) {
        int length = RoceOpcode.packetLength(RoceOpcode.ACKNOWLEDGE, 0);
        bth.wrap(tx, 0).init(RoceOpcode.ACKNOWLEDGE, 0, BthFlyweight.DEFAULT_PKEY, destQpNumber, psn);
        aeth.wrap(tx, BthFlyweight.LENGTH).syndrome(syndrome).msn(msn);
        transmitPacket(length);
    }

    // ------------------------------------------------------------------------------------------------ receive

    /** One checked datagram for this QP (receive thread): a request for the responder or a response. */
    void onPacket(ByteBuffer packet, MemorySegment packetSegment, int length, InetSocketAddress from) {
        lock.lock();
        try {
            if (isClosed() || (state != QueuePairState.READY_TO_RECEIVE && state != QueuePairState.READY_TO_SEND)
                || !from.equals(remoteSocket)) {
                context.counterSet().increment(Counter.PORT_RCV_ERRORS);
                return;
            }
            inBth.wrap(packet, 0);
            int opcode = inBth.opcode();
            if (RoceOpcode.has(opcode, RoceOpcode.REQUEST_MASK)) {
                onRequest(packet, packetSegment, length, opcode);
            } else if (opcode == RoceOpcode.ACKNOWLEDGE && state == QueuePairState.READY_TO_SEND) {
                onAcknowledge(packet);
            } else {
                context.counterSet().increment(Counter.PORT_RCV_ERRORS);
            }
        } finally {
            lock.unlock();
        }
    }

    private void onAcknowledge(ByteBuffer packet) {
        int psn = inBth.psn();
        inAeth.wrap(packet, BthFlyweight.LENGTH);
        // An ACK or NAK may only speak of PSNs we sent: between the last one acknowledged and the last one sent.
        if (Psn.compare(psn, lastAckedPsn) < 0 || Psn.compare(psn, sqPsn) >= 0) {
            context.counterSet().increment(Counter.DUPLICATE_REQUEST);
            return;
        }
        int type = inAeth.type();
        if (type == AethFlyweight.TYPE_ACK) {
            lastAckedPsn = psn;
            completeAcknowledged(psn);
            transmit();
            return;
        }
        // A NAK acknowledges every PSN before its own.
        completeAcknowledged(Psn.add(psn, -1));
        if (sendHead >= sendTail) {
            return;
        }
        WorkCompletionStatus status;
        if (type == AethFlyweight.TYPE_RNR_NAK) {
            context.counterSet().increment(Counter.RCVD_RNR_ERR);
            status = WorkCompletionStatus.RNR_RETRY_EXC_ERR; // no RNR retry yet: as rnr_retry 0
        } else if (type == AethFlyweight.TYPE_NAK) {
            status = switch (inAeth.value()) {
                case AethFlyweight.NAK_PSN_SEQUENCE_ERROR -> {
                    context.counterSet().increment(Counter.PACKET_SEQ_ERR);
                    yield WorkCompletionStatus.RETRY_EXC_ERR; // a packet was lost: no go-back-N yet
                }
                case AethFlyweight.NAK_INVALID_REQUEST -> WorkCompletionStatus.REM_INV_REQ_ERR;
                case AethFlyweight.NAK_REMOTE_ACCESS_ERROR -> {
                    context.counterSet().increment(Counter.REQ_REMOTE_ACCESS_ERRORS);
                    yield WorkCompletionStatus.REM_ACCESS_ERR;
                }
                default -> WorkCompletionStatus.REM_OP_ERR;
            };
        } else {
            status = WorkCompletionStatus.BAD_RESP_ERR;
        }
        completeSend(status, 0, 0);
    }

    /** Completes, in order, every fully sent message whose last PSN is at or before {@code psn}. */
    private void completeAcknowledged(int psn) {
        while (sendHead < sendNext) {
            int last = messageLastPsn[(int) (sendHead % messageLastPsn.length)];
            if (Psn.compare(last, psn) > 0) {
                return;
            }
            SendSlot slot = sendSlot(sendHead);
            completeSend(WorkCompletionStatus.SUCCESS, (int) slot.length, 0);
        }
    }

    private void onRequest(ByteBuffer packet, MemorySegment packetSegment, int length, int opcode) {
        int psn = inBth.psn();
        boolean ackRequest = inBth.ackRequest();
        int order = Psn.compare(psn, rqPsn);
        if (order < 0) {
            // A duplicate of something executed: never execute it twice, but say again how far we are.
            context.counterSet().increment(Counter.DUPLICATE_REQUEST);
            sendAcknowledge(Psn.add(rqPsn, -1), AethFlyweight.TYPE_ACK | AethFlyweight.CREDITS_UNLIMITED);
            return;
        }
        if (order > 0) {
            // Something before it was lost: one NAK per gap (rxe's sent_psn_nak), then drop until ePSN arrives.
            context.counterSet().increment(Counter.OUT_OF_SEQUENCE);
            if (!nakSent) {
                nakSent = true;
                sendAcknowledge(rqPsn, AethFlyweight.TYPE_NAK | AethFlyweight.NAK_PSN_SEQUENCE_ERROR);
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
            // READ/atomics (not yet), a packet out of message order, or a packet of the wrong size
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
        }
    }

    private boolean receiveSend(ByteBuffer packet, MemorySegment packetSegment, int opcode, int payloadAt,
                                int payload, boolean start, boolean end) {
        if (receiveHead >= receiveTail) {
            if (!start) {
                fatalNak(AethFlyweight.NAK_REMOTE_OPERATIONAL_ERROR, "receive vanished inside a SEND");
                return false;
            }
            context.counterSet().increment(Counter.SEND_RNR_ERR);
            sendAcknowledge(inBth.psn(), AethFlyweight.TYPE_RNR_NAK | (minRnrTimer & 0x1F));
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
            context.counterSet().increment(Counter.SEND_RNR_ERR);
            sendAcknowledge(inBth.psn(), AethFlyweight.TYPE_RNR_NAK | (minRnrTimer & 0x1F));
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
        // Nothing goes on the wire: an RC peer learns of it when its requests are NAKed or time out (no timeout
        // yet: see the class comment).
        writeRegion = null;
    }

    @Override
    protected void destroy() {
        // The socket belongs to the context.
    }
}
