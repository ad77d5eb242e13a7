package io.jccl.transport.tcp;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.Counter;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.WorkCompletionOpcode;
import io.jccl.verbs.WorkCompletionStatus;
import io.jccl.verbs.spi.CounterSet;
import io.jccl.verbs.spi.ReceiveSlot;
import io.jccl.verbs.spi.SoftMemoryRegion;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;

/**
 * The responder role of a QP, as rxe's {@code rxe_resp}: executes the peer's requests. Every check happens on the
 * header, before a single payload byte is placed (PSN, the QP's access flags, rkey, range and permission, atomic
 * alignment, a posted receive); WRITE and SEND payloads are then placed by the input's sink straight into registered
 * memory, READs are answered from it, atomics run on it with hardware atomics. Responses wait in a ring of
 * {@code 2·max_dest_rd_atomic + 4} entries, in order; consecutive ACKs coalesce (they are cumulative), and an ACK
 * that is the ring's only entry may ride on the next outgoing request ({@link TcpOutput#offerAck}), and consecutive
 * small READ responses leave as one READ_RESPONSE_LIST (one header for up to {@link Wire#LIST_MAX}). A READ_LIST's
 * entries arrive here one by one from the input, as READs of their own. Runs under the QP's lock.
 */
final class TcpResponder {
    private static final VarHandle LONG = ValueLayout.JAVA_LONG.varHandle();

    // What to do when an incoming payload has been placed.
    private static final int A_WRITE = 1;
    private static final int A_WRITE_IMM = 2;
    private static final int A_SEND = 3;

    private final TcpQueuePair qp;
    private final TcpOutput output;
    private final TcpInput input;
    private final CounterSet counters;

    // The response ring: [head, tail) in order.
    private int[] respType = new int[0];
    private int[] respPsn;
    private int[] respSyndrome;
    private SoftMemoryRegion[] respRegion;
    private long[] respOffset;
    private int[] respLength;
    private long[] respValue;
    private long head;
    private long tail;

    /** After an RNR NAK, requests are dropped until the NAKed PSN comes again. */
    private boolean rnrDiscarding;
    private int rnrDiscardPsn;

    // The request whose payload is being placed.
    private int pendingAction;
    private int pendingPsn;
    private int pendingLength;
    private int pendingImmediate;
    private boolean pendingHasImmediate;

    /** Receive completions produced (to tell whether a poll delivered a message). */
    private long receivesDelivered;
    /** Whether a message above {@link IoDriverPolicy#HOLD_MAX_BYTES} was delivered since the last mark. */
    private boolean largeDelivered;
    /** ACK frames sent on their own, and ACKs carried in a request header (diagnostics and tests). */
    private long standaloneAcks;
    private long piggybackedAcks;
    /** READ_RESPONSE_LIST frames built (tests, diagnostics). */
    private long responseLists;
    /** Payload bytes of the responses the last {@link #listableResponses} counted. */
    private long listableBytes;

    TcpResponder(TcpQueuePair qp) {
        this.qp = qp;
        this.output = qp.output;
        this.input = qp.input;
        this.counters = qp.counters;
    }

    /** Sizes the ring for {@code maxDestRdAtomic} (at least 1) outstanding READs/atomics. */
    void sizeRing(int maxDestRdAtomic) {
        int n = 2 * maxDestRdAtomic + 4;
        if (respType.length != n) {
            respType = new int[n];
            respPsn = new int[n];
            respSyndrome = new int[n];
            respRegion = new SoftMemoryRegion[n];
            respOffset = new long[n];
            respLength = new int[n];
            respValue = new long[n];
        }
    }

    /** A new connection: no responses, no RNR discarding. */
    void reset() {
        rnrDiscarding = false;
        head = tail = 0;
    }

    // ------------------------------------------------------------------------------------------------ requests

    /** A request header arrived and passed the input's common checks. */
    void onRequest(int type, int psn, int length, int rkey, long va, long operand1, long operand2, int imm) {
        boolean payload = Wire.requestCarriesPayload(type);
        if ((type == Wire.COMPARE_SWAP || type == Wire.FETCH_ADD) && length != 8) {
            qp.malformed("atomic with length " + length, false);
            return;
        }
        if (rnrDiscarding) {
            int distance = (psn - rnrDiscardPsn) & Wire.PSN_MASK;
            if (distance != 0) {
                if (distance >= Wire.PSN_HALF) {
                    qp.malformed("PSN " + psn + " behind the RNR-NAKed " + rnrDiscardPsn, false);
                    return;
                }
                // Sent before the requester saw our RNR NAK: dropped, it will come again.
                input.discardPayload(payload ? length : 0);
                return;
            }
            rnrDiscarding = false;
        }
        if (psn != qp.expectedPsn()) {
            counters.increment(Counter.OUT_OF_SEQUENCE);
            qp.malformed("PSN " + psn + ", expected " + qp.expectedPsn(), false);
            return;
        }
        SendOpcode op = switch (type) {
            case Wire.SEND -> SendOpcode.SEND;
            case Wire.SEND_IMM -> SendOpcode.SEND_WITH_IMM;
            case Wire.WRITE -> SendOpcode.RDMA_WRITE;
            case Wire.WRITE_IMM -> SendOpcode.RDMA_WRITE_WITH_IMM;
            case Wire.READ_REQUEST -> SendOpcode.RDMA_READ;
            case Wire.COMPARE_SWAP -> SendOpcode.ATOMIC_CMP_AND_SWP;
            default -> SendOpcode.ATOMIC_FETCH_AND_ADD;
        };
        // Every check happens here, on the header, before a single payload byte is placed.
        if (!qp.accessAllows(op)) {
            respondError(Wire.NAK_INVALID_REQUEST, psn);
            return;
        }
        SoftMemoryRegion region = null;
        if (op.isAtomic()) {
            if ((va & 7) != 0) {
                respondError(Wire.NAK_INVALID_REQUEST, psn);
                return;
            }
            region = qp.checkedRemoteRegion(rkey, va, 8, AccessFlag.REMOTE_ATOMIC);
        } else if (op.isOneSided() && length > 0) {
            region = qp.checkedRemoteRegion(rkey, va, length,
                op == SendOpcode.RDMA_READ ? AccessFlag.REMOTE_READ : AccessFlag.REMOTE_WRITE);
        }
        if (region == null && (op.isAtomic() || (op.isOneSided() && length > 0))) {
            counters.increment(Counter.REMOTE_ACCESS_ERRORS);
            respondError(Wire.NAK_REMOTE_ACCESS, psn);
            return;
        }
        if (op.consumesReceive() && qp.receiveQueueEmpty()) {
            counters.increment(Counter.SEND_RNR_ERR);
            enqueueNak(Wire.NAK_RNR, psn, qp.minRnrTimer());
            rnrDiscarding = true;
            rnrDiscardPsn = psn;
            input.discardPayload(payload ? length : 0);
            return;
        }
        pendingLength = length;
        pendingImmediate = imm;
        pendingHasImmediate = op.hasImmediate();
        switch (op) {
            case SEND, SEND_WITH_IMM -> {
                ReceiveSlot receive = qp.nextReceive();
                if (length > receive.length) {
                    enqueueNak(Wire.NAK_INVALID_REQUEST, psn, 0);
                    qp.completeNextReceive(WorkCompletionStatus.LOC_LEN_ERR, WorkCompletionOpcode.RECV, 0, 0, false);
                    return;
                }
                input.clearSink();
                long left = length;
                for (int i = 0; i < receive.sgeCount && left > 0; i++) {
                    int len = receive.sgeLength[i];
                    if (len == 0) {
                        continue;
                    }
                    SoftMemoryRegion target = qp.checkedLocalRegion(receive.sgeAddress[i], len, receive.sgeLkey[i],
                        true);
                    if (target == null) {
                        input.dropSink();
                        enqueueNak(Wire.NAK_REMOTE_OPERATION, psn, 0);
                        qp.completeNextReceive(WorkCompletionStatus.LOC_PROT_ERR, WorkCompletionOpcode.RECV, 0, 0,
                            false);
                        return;
                    }
                    long n = Math.min(len, left);
                    input.sink(target, receive.sgeAddress[i] - target.address(), n);
                    left -= n;
                }
                qp.advanceExpectedPsn();
                pendingAction = A_SEND;
                pendingPsn = psn;
                input.placeForResponder();
            }
            case RDMA_WRITE, RDMA_WRITE_WITH_IMM -> {
                qp.advanceExpectedPsn();
                pendingAction = op == SendOpcode.RDMA_WRITE ? A_WRITE : A_WRITE_IMM;
                pendingPsn = psn;
                input.clearSink();
                if (length > 0) {
                    input.sink(region, va - region.address(), length);
                }
                input.placeForResponder();
            }
            case RDMA_READ -> {
                qp.advanceExpectedPsn();
                int i = enqueueResponse(Wire.READ_RESPONSE, psn);
                respRegion[i] = region;
                respOffset[i] = region == null ? 0 : va - region.address();
                respLength[i] = length;
            }
            default -> {
                qp.advanceExpectedPsn();
                long offset = va - region.address();
                MemorySegment segment = region.segment();
                long original = op == SendOpcode.ATOMIC_CMP_AND_SWP
                    ? (long) LONG.compareAndExchange(segment, offset, operand1, operand2)
                    : (long) LONG.getAndAdd(segment, offset, operand1);
                int i = enqueueResponse(Wire.ATOMIC_RESPONSE, psn);
                respValue[i] = original;
            }
        }
    }

    /** A request failed a responder check: NAK it, move to ERR, close once the NAK is out. */
    private void respondError(int syndrome, int psn) {
        enqueueNak(syndrome, psn, 0);
        qp.enterErrorUnlessThere();
    }

    /**
     * The payload of the current WRITE or SEND is in place: queue its ACK and, for WRITE_WITH_IMM and SEND, complete
     * the receive (immediate data reaches the CQ only after the data is in place).
     */
    void onPayloadPlaced() {
        int action = pendingAction;
        pendingAction = 0;
        switch (action) {
            case A_WRITE -> {
                counters.add(Counter.PORT_RCV_DATA, pendingLength);
                enqueueAck(pendingPsn);
            }
            case A_WRITE_IMM -> {
                counters.add(Counter.PORT_RCV_DATA, pendingLength);
                enqueueAck(pendingPsn);
                receivesDelivered++;
                largeDelivered |= pendingLength > IoDriverPolicy.HOLD_MAX_BYTES;
                qp.completeNextReceive(WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV_RDMA_WITH_IMM,
                    pendingLength, pendingImmediate, true);
            }
            case A_SEND -> {
                counters.add(Counter.PORT_RCV_DATA, pendingLength);
                counters.increment(Counter.RDMA_RECVS);
                enqueueAck(pendingPsn);
                receivesDelivered++;
                largeDelivered |= pendingLength > IoDriverPolicy.HOLD_MAX_BYTES;
                qp.completeNextReceive(WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV, pendingLength,
                    pendingImmediate, pendingHasImmediate);
            }
            default -> {
            }
        }
    }

    /** Marks the start of a poll's I/O round: returns the deliveries so far and forgets earlier large ones. */
    long markDeliveries() {
        largeDelivered = false;
        return receivesDelivered;
    }

    /** Whether messages were delivered since {@code mark}, none of them above {@link IoDriverPolicy#HOLD_MAX_BYTES}. */
    boolean deliveredSmallSince(long mark) {
        return receivesDelivered != mark && !largeDelivered;
    }

    // ------------------------------------------------------------------------------------------------ the ring

    /** Free ring entries (requests are read only while at least 2 are free). */
    int free() {
        return respType.length - (int) (tail - head);
    }

    boolean hasResponses() {
        return tail > head;
    }

    /** Whether the ring holds exactly one entry and it is an ACK (which a request may carry). */
    boolean onlyAckLeft() {
        return tail - head == 1 && respType[(int) (head % respType.length)] == Wire.ACK;
    }

    /** The ACK word for the ring's lone ACK (see {@link #onlyAckLeft()}). */
    int soleAckWord() {
        return Wire.ACK_PRESENT | respPsn[(int) (head % respType.length)];
    }

    /** Builds the oldest response into the output and takes it off the ring. */
    void buildResponse() {
        int i = (int) (head % respType.length);
        int type = respType[i];
        int psn = respPsn[i];
        switch (type) {
            case Wire.ACK -> output.header(Wire.ACK, 0, 0, 0, psn, 0, 0, 0, 0, 0, 0);
            case Wire.NAK -> output.header(Wire.NAK, 0, respSyndrome[i], (int) respValue[i], psn, 0, 0, 0, 0, 0, 0);
            case Wire.ATOMIC_RESPONSE -> output.header(Wire.ATOMIC_RESPONSE, 0, 0, 0, psn, 8, 0, 0, respValue[i], 0,
                0);
            default -> {
                int length = respLength[i];
                int count = listableResponses();
                if (count > 1) {
                    buildResponseList(count, listableBytes);
                    return;
                }
                output.header(Wire.READ_RESPONSE, 0, 0, 0, psn, length, 0, 0, 0, 0, 0);
                if (length > 0) {
                    SoftMemoryRegion region = respRegion[i];
                    if (length <= TcpOutput.SMALL_PAYLOAD_BYTES) {
                        MemorySegment.copy(region.segment(), respOffset[i], output.frameSegment(),
                            output.payloadOffset(), length);
                        output.inlinePayload(length);
                    } else {
                        output.source(0, region, respOffset[i], length);
                        output.sources(1);
                    }
                    counters.add(Counter.PORT_XMIT_DATA, length);
                }
                respRegion[i] = null;
            }
        }
        head++;
    }

    /**
     * How many READ responses from the ring's head may leave as one READ_RESPONSE_LIST: consecutive READ entries
     * with consecutive PSNs, each non-empty and small (a larger READ is written from its region on its own, as
     * before), at most {@link Wire#LIST_MAX}, their payloads together within the
     * room the frame buffer has left behind the list's header. An ACK, a NAK or an atomic response ends the list
     * (responses stay in order).
     */
    private int listableResponses() {
        int n = respType.length;
        int first = respPsn[(int) (head % n)];
        long room = output.listRoom();
        long total = 0;
        int count = 0;
        for (long j = head; j < tail && count < Wire.LIST_MAX; j++, count++) {
            int i = (int) (j % n);
            int length = respLength[i];
            if (respType[i] != Wire.READ_RESPONSE || respPsn[i] != ((first + count) & Wire.PSN_MASK) || length <= 0
                || length > TcpOutput.SMALL_PAYLOAD_BYTES || total + length > room) {
                break;
            }
            total += length;
        }
        listableBytes = total;
        return count;
    }

    /**
     * Builds one READ_RESPONSE_LIST for the {@code count} READ responses at the ring's head ({@code total} payload
     * bytes, as {@link #listableResponses} summed them): one header, then each
     * READ's bytes copied behind it, in order (the frame is written with the frames coalesced before it).
     */
    private void buildResponseList(int count, long total) {
        int n = respType.length;
        output.header(Wire.READ_RESPONSE_LIST, 0, 0, 0, respPsn[(int) (head % n)], (int) total, 0, 0, 0, 0, count);
        MemorySegment frame = output.frameSegment();
        long at = output.payloadOffset();
        for (int k = 0; k < count; k++) {
            int i = (int) (head % n);
            MemorySegment.copy(respRegion[i].segment(), respOffset[i], frame, at, respLength[i]);
            at += respLength[i];
            respRegion[i] = null;
            head++;
        }
        output.inlinePayload((int) total);
        counters.add(Counter.PORT_XMIT_DATA, total);
        responseLists++;
    }

    /** READ_RESPONSE_LIST frames built so far (tests, diagnostics). */
    long responseLists() {
        return responseLists;
    }

    /** The ring's lone ACK went out in a request header. */
    void ackCarried() {
        head++;
        piggybackedAcks++;
        qp.io.releaseHold();
    }

    /** The request that carried the ACK was not sent after all: the ACK is the ring's again. */
    void ackReturned() {
        head--;
        piggybackedAcks--;
    }

    /** An ACK frame of its own was built. */
    void ackSentAlone() {
        standaloneAcks++;
        qp.io.releaseHold();
    }

    /** {standalone ACK frames sent, ACKs carried on requests} so far. */
    long[] ackCounts() {
        return new long[] {standaloneAcks, piggybackedAcks};
    }

    private int enqueueResponse(int type, int psn) {
        int i = (int) (tail % respType.length);
        respType[i] = type;
        respPsn[i] = psn;
        tail++;
        return i;
    }

    private void enqueueAck(int psn) {
        if (tail > head) {
            int last = (int) ((tail - 1) % respType.length);
            if (respType[last] == Wire.ACK) {
                respPsn[last] = psn; // ACKs are cumulative: one covers every PSN up to its own
                return;
            }
        }
        enqueueResponse(Wire.ACK, psn);
    }

    private void enqueueNak(int syndrome, int psn, int timer) {
        int i = enqueueResponse(Wire.NAK, psn);
        respSyndrome[i] = syndrome;
        respValue[i] = timer;
    }
}
