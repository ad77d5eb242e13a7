package io.jccl.transport.tcp;

import io.jccl.verbs.Counter;
import io.jccl.verbs.QueuePairState;
import io.jccl.verbs.RnrTimer;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.WorkCompletionStatus;
import io.jccl.verbs.spi.CounterSet;
import io.jccl.verbs.spi.SendSlot;
import io.jccl.verbs.spi.SoftMemoryRegion;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;

/**
 * The requester role of a QP, as rxe's {@code rxe_req} and {@code rxe_comp}: turns the send queue into request
 * frames in posting order (READs and atomics limited to {@code min(max_rd_atomic, peer's max_dest_rd_atomic)}
 * outstanding, FENCE waiting for them), checks local scatter/gather entries as a request starts (LOC_PROT_ERR,
 * completed in order), completes requests strictly in order on ACK, NAK, READ_RESPONSE and ATOMIC_RESPONSE (every
 * response implicitly acknowledges the requests before it), retries after RNR NAKs (go-back-N, after the responder's
 * timer). The send-queue ring itself is the base class's; this class keeps what the protocol
 * adds to it. Runs under the QP's lock.
 */
final class TcpRequester {
    private static final ValueLayout.OfInt BIG_INT = ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.BIG_ENDIAN);
    private static final ValueLayout.OfLong BIG_LONG =
        ValueLayout.JAVA_LONG_UNALIGNED.withOrder(ByteOrder.BIG_ENDIAN);
    private final TcpQueuePair qp;
    private final TcpOutput output;
    private final TcpInput input;
    private final CounterSet counters;
    /** READs and atomics sent and not yet answered. */
    private int inFlightReadAtomic;
    /** When an RNR-NAKed request may be sent again (0: no RNR wait). */
    private long rnrResumeNs;
    /** Index of a request that failed its local check and completes once the requests before it did (-1: none). */
    private long localErrorIndex = -1;
    private WorkCompletionStatus localErrorStatus;
    /** Payload length of the READ_RESPONSE being placed. */
    private int readResponseLength;
    /** READ_LIST frames sent and READ_RESPONSE_LIST frames received (tests, diagnostics). */
    private long readListsSent;
    private long readResponseListsReceived;

    TcpRequester(TcpQueuePair qp) {
        this.qp = qp;
        this.output = qp.output;
        this.input = qp.input;
        this.counters = qp.counters;
    }

    /** Whether posted requests have not been sent yet. */
    boolean hasUnsent() {
        return qp.sendNext() < qp.sendTail();
    }

    private int psnOf(long index) {
        return (qp.sqPsn() + (int) index) & Wire.PSN_MASK;
    }

    // ------------------------------------------------------------------------------------------------ requests

    /** Builds this QP's next request into the output, if one may start now. */
    boolean nextRequest() {
        if (!qp.connection.up()) {
            return false;
        }
        if (localErrorIndex >= 0) {
            if (qp.sendHead() == localErrorIndex) {
                localErrorIndex = -1;
                qp.completeRequest(localErrorStatus, 0);
            }
            return false;
        }
        long next = qp.sendNext();
        if (qp.state() != QueuePairState.READY_TO_SEND || next >= qp.sendTail()) {
            return false;
        }
        if (rnrResumeNs != 0) {
            if (System.nanoTime() - rnrResumeNs < 0) {
                return false;
            }
            rnrResumeNs = 0;
        }
        SendSlot slot = qp.request(next);
        boolean readAtomic = slot.opcode == SendOpcode.RDMA_READ || slot.opcode.isAtomic();
        if (slot.fenced() && inFlightReadAtomic > 0) {
            return false;
        }
        if (readAtomic && inFlightReadAtomic >= Math.min(Math.max(1, qp.maxRdAtomic()),
            qp.connection.peerMaxDestRdAtomic())) {
            return false;
        }
        return buildRequest(slot, readAtomic);
    }

    private boolean buildRequest(SendSlot slot, boolean readAtomic) {
        long index = qp.sendNext();
        if (!slot.started) {
            slot.started = true;
            slot.rnrRetriesLeft = qp.rnrRetry();
        }
        int psn = psnOf(index);
        int flags = ((slot.flags & SendFlag.SOLICITED) != 0 ? Wire.FLAG_SOLICITED : 0)
            | (slot.fenced() ? Wire.FLAG_FENCE : 0);
        int length = (int) slot.length;
        SendOpcode op = slot.opcode;
        if (readAtomic) {
            if (!qp.localEntriesValid(slot, true)) {
                return localError(index);
            }
            if (op == SendOpcode.RDMA_READ) {
                int count = listableReads(index);
                if (count > 1) {
                    return buildReadList(index, psn, flags, count);
                }
                output.header(Wire.READ_REQUEST, flags, 0, 0, psn, length, slot.rkey, slot.remoteAddress, 0, 0, 0);
            } else {
                output.header(op == SendOpcode.ATOMIC_CMP_AND_SWP ? Wire.COMPARE_SWAP : Wire.FETCH_ADD, flags, 0, 0,
                    psn, 8, slot.rkey, slot.remoteAddress, slot.compareAdd, slot.swap, 0);
            }
            inFlightReadAtomic++;
            qp.sendNext(index + 1);
            return true;
        }
        int type = switch (op) {
            case SEND -> Wire.SEND;
            case SEND_WITH_IMM -> Wire.SEND_IMM;
            case RDMA_WRITE -> Wire.WRITE;
            default -> Wire.WRITE_IMM;
        };
        boolean oneSided = type == Wire.WRITE || type == Wire.WRITE_IMM;
        if (length <= TcpOutput.SMALL_PAYLOAD_BYTES || slot.inline) {
            output.header(type, flags, 0, 0, psn, length, oneSided ? slot.rkey : 0,
                oneSided ? slot.remoteAddress : 0, 0, 0, slot.immediateData);
            if (length > 0) {
                if (!qp.gatherInto(slot, output.frameSegment(), output.payloadOffset(), length)) {
                    output.cancelFrame();
                    return localError(index);
                }
                output.inlinePayload(length);
            }
        } else {
            int count = 0;
            for (int i = 0; i < slot.sgeCount; i++) {
                int len = slot.sgeLength[i];
                if (len == 0) {
                    continue;
                }
                SoftMemoryRegion region = qp.checkedLocalRegion(slot.sgeAddress[i], len, slot.sgeLkey[i], false);
                if (region == null) {
                    output.dropSources(count);
                    return localError(index);
                }
                output.source(count, region, slot.sgeAddress[i] - region.address(), len);
                count++;
            }
            output.header(type, flags, 0, 0, psn, length, oneSided ? slot.rkey : 0,
                oneSided ? slot.remoteAddress : 0, 0, 0, slot.immediateData);
            output.sources(count);
        }
        counters.add(Counter.PORT_XMIT_DATA, length);
        if (!oneSided) {
            counters.increment(Counter.RDMA_SENDS);
        }
        qp.sendNext(index + 1);
        return true;
    }

    /**
     * How many READs from {@code index} on (the first already checked) may leave in one READ_LIST frame: posted,
     * within the READ credit left, unfenced, and with valid local entries (one that fails its check ends the list
     * and fails on its own, in order, as the next request).
     */
    private int listableReads(long index) {
        int credit = Math.min(Math.max(1, qp.maxRdAtomic()), qp.connection.peerMaxDestRdAtomic()) - inFlightReadAtomic;
        long end = Math.min(qp.sendTail(), index + Math.min(credit, Wire.LIST_MAX));
        long i = index + 1;
        while (i < end) {
            SendSlot next = qp.request(i);
            if (next.opcode != SendOpcode.RDMA_READ || next.fenced() || !qp.localEntriesValid(next, true)) {
                break;
            }
            i++;
        }
        return (int) (i - index);
    }

    /**
     * Builds one READ_LIST frame for the {@code count} READs from {@code index} (each keeps its PSN, response and
     * completion: the frame only saves a header per READ on the wire and in both sides' parsing).
     */
    private boolean buildReadList(long index, int psn, int flags, int count) {
        output.header(Wire.READ_LIST, flags, 0, 0, psn, count * Wire.LIST_ENTRY, 0, 0, 0, 0, count);
        MemorySegment frame = output.frameSegment();
        long at = output.payloadOffset();
        for (int k = 0; k < count; k++, at += Wire.LIST_ENTRY) {
            SendSlot slot = qp.request(index + k);
            if (!slot.started) {
                slot.started = true;
                slot.rnrRetriesLeft = qp.rnrRetry();
            }
            frame.set(BIG_INT, at + Wire.LIST_OFF_RKEY, slot.rkey);
            frame.set(BIG_INT, at + Wire.LIST_OFF_LENGTH, (int) slot.length);
            frame.set(BIG_LONG, at + Wire.LIST_OFF_VA, slot.remoteAddress);
        }
        output.inlinePayload(count * Wire.LIST_ENTRY);
        inFlightReadAtomic += count;
        readListsSent++;
        qp.sendNext(index + count);
        return true;
    }

    /** READ_LIST frames sent so far (tests, diagnostics). */
    long readListsSent() {
        return readListsSent;
    }

    /** Request {@code index} failed its local check: it completes in order, once everything before it has. */
    private boolean localError(long index) {
        localErrorIndex = index;
        localErrorStatus = WorkCompletionStatus.LOC_PROT_ERR;
        if (qp.sendHead() == localErrorIndex) {
            localErrorIndex = -1;
            qp.completeRequest(localErrorStatus, 0);
        }
        return false;
    }

    // ------------------------------------------------------------------------------------------------ completion

    /** A response frame (not a piggybacked ACK) arrived for {@code psn}. */
    void onResponse(int type, int syndrome, int timer, int psn, int length, long value) {
        if (type == Wire.ACK) {
            if (!acknowledge(psn, true)) {
                qp.malformed("ACK for PSN " + psn + " that is not outstanding", true);
            }
            return;
        }
        if (!acknowledge(psn, false) || qp.sendHead() >= qp.sendNext() || psnOf(qp.sendHead()) != psn) {
            qp.malformed(Wire.typeName(type) + " for PSN " + psn + " that is not outstanding", true);
            return;
        }
        SendSlot slot = qp.request(qp.sendHead());
        switch (type) {
            case Wire.READ_RESPONSE -> {
                if (slot.opcode != SendOpcode.RDMA_READ || length != slot.length) {
                    qp.malformed("READ_RESPONSE does not match the READ", true);
                    return;
                }
                placeReadResponse(slot, length);
            }
            case Wire.READ_RESPONSE_LIST -> {
                // count (in the immediate field) READs from the head, their payloads back to back
                int count = (int) value;
                if (count < 2 || count > Wire.LIST_MAX || qp.sendNext() - qp.sendHead() < count) {
                    qp.malformed("READ_RESPONSE_LIST of " + count + " READs", true);
                    return;
                }
                long total = 0;
                for (int k = 0; k < count; k++) {
                    SendSlot s = qp.request(qp.sendHead() + k);
                    if (s.opcode != SendOpcode.RDMA_READ) {
                        qp.malformed("READ_RESPONSE_LIST covers a request that is not a READ", true);
                        return;
                    }
                    total += s.length;
                }
                if (total != length) {
                    qp.malformed("READ_RESPONSE_LIST length " + length + " does not match its READs (" + total
                        + ")", true);
                    return;
                }
                readResponseListsReceived++;
                input.listResponses(count);
                onListedReadResponse();
            }
            case Wire.ATOMIC_RESPONSE -> {
                if (!slot.opcode.isAtomic() || length != 8) {
                    qp.malformed("ATOMIC_RESPONSE does not match the request", true);
                    return;
                }
                SoftMemoryRegion target = qp.checkedLocalRegion(slot.sgeAddress[0], 8, slot.sgeLkey[0], true);
                if (target == null) {
                    qp.completeRequest(WorkCompletionStatus.LOC_PROT_ERR, 0);
                    return;
                }
                target.segment().set(ValueLayout.JAVA_LONG_UNALIGNED, slot.sgeAddress[0] - target.address(), value);
                inFlightReadAtomic--;
                qp.completeRequest(WorkCompletionStatus.SUCCESS, 8);
            }
            case Wire.NAK -> onNak(slot, syndrome, timer);
            default -> qp.malformed("unexpected " + Wire.typeName(type), true);
        }
    }

    /** Points the input's sink at the local entries of READ {@code slot}, whose {@code length} bytes come next. */
    private void placeReadResponse(SendSlot slot, int length) {
        input.clearSink();
        for (int i = 0; i < slot.sgeCount; i++) {
            int len = slot.sgeLength[i];
            if (len == 0) {
                continue;
            }
            SoftMemoryRegion target = qp.checkedLocalRegion(slot.sgeAddress[i], len, slot.sgeLkey[i], true);
            if (target == null) {
                input.dropSink();
                qp.completeRequest(WorkCompletionStatus.LOC_PROT_ERR, 0);
                return;
            }
            input.sink(target, slot.sgeAddress[i] - target.address(), len);
        }
        readResponseLength = length;
        input.placeForRequester();
    }

    /**
     * The next READ of a READ_RESPONSE_LIST: its payload (as long as its request asked) comes next in the stream.
     * The list's header was checked against the READs it covers, which are the oldest outstanding in order.
     */
    void onListedReadResponse() {
        SendSlot slot = qp.request(qp.sendHead());
        placeReadResponse(slot, (int) slot.length);
    }

    /** READ_RESPONSE_LIST frames received so far (tests, diagnostics). */
    long readResponseListsReceived() {
        return readResponseListsReceived;
    }

    /** The READ_RESPONSE payload is in place: the READ completes. */
    void onReadResponsePlaced() {
        counters.add(Counter.PORT_RCV_DATA, readResponseLength);
        inFlightReadAtomic--;
        qp.completeRequest(WorkCompletionStatus.SUCCESS, readResponseLength);
    }

    /**
     * Completes outstanding WRITE/SEND requests before {@code psn} (and the one at {@code psn} when
     * {@code inclusive}): every response implicitly acknowledges the requests before it, as in RC.
     *
     * @return false when the PSN is not outstanding or the range holds a READ/atomic still waiting for its data
     */
    boolean acknowledge(int psn, boolean inclusive) {
        long head = qp.sendHead();
        long distance = (psn - psnOf(head)) & Wire.PSN_MASK;
        long count = inclusive ? distance + 1 : distance;
        if (distance >= Wire.PSN_HALF || head + distance >= qp.sendNext()) {
            return false;
        }
        for (long i = 0; i < count; i++) {
            SendOpcode op = qp.request(head + i).opcode;
            if (op == SendOpcode.RDMA_READ || op.isAtomic()) {
                return false;
            }
        }
        for (long i = 0; i < count; i++) {
            qp.completeRequest(WorkCompletionStatus.SUCCESS, (int) qp.request(qp.sendHead()).length);
        }
        return true;
    }

    private void onNak(SendSlot slot, int syndrome, int timer) {
        switch (syndrome) {
            case Wire.NAK_RNR -> {
                counters.increment(Counter.RCVD_RNR_ERR);
                if (qp.rnrRetry() != 7) {
                    if (slot.rnrRetriesLeft <= 0) {
                        counters.increment(Counter.RNR_NAK_RETRY_ERR);
                        qp.completeRequest(WorkCompletionStatus.RNR_RETRY_EXC_ERR, 0);
                        return;
                    }
                    slot.rnrRetriesLeft--;
                }
                // Go back to the NAKed request; the responder drops everything after it until it comes again.
                qp.sendNext(qp.sendHead());
                inFlightReadAtomic = 0;
                rnrResumeNs = System.nanoTime() + Math.max(1, RnrTimer.delayNs(timer));
                qp.engine.schedule(rnrResumeNs);
            }
            case Wire.NAK_REMOTE_ACCESS -> {
                counters.increment(Counter.REQ_REMOTE_ACCESS_ERRORS);
                qp.completeRequest(WorkCompletionStatus.REM_ACCESS_ERR, 0);
            }
            case Wire.NAK_INVALID_REQUEST -> qp.completeRequest(WorkCompletionStatus.REM_INV_REQ_ERR, 0);
            case Wire.NAK_REMOTE_OPERATION -> qp.completeRequest(WorkCompletionStatus.REM_OP_ERR, 0);
            default -> qp.malformed("NAK with unknown class " + syndrome, true);
        }
    }

    // ------------------------------------------------------------------------------------------------ timers

    /**
     * With the connection up: the end of an RNR wait. Returns when to look again. (A peer that stops answering is
     * {@link TcpLiveness}'s: it probes and fails the QP whether or not requests are outstanding.)
     */
    long onTimer(long nowNs) throws IOException {
        long next = Long.MAX_VALUE;
        if (rnrResumeNs != 0) {
            if (nowNs - rnrResumeNs >= 0) {
                rnrResumeNs = 0;
                qp.ioRound();
            } else {
                next = rnrResumeNs;
            }
        }
        return next;
    }

    /** A new connection, or the QP entered ERR: nothing in flight, no RNR wait, no pending local error. */
    void reset() {
        inFlightReadAtomic = 0;
        rnrResumeNs = 0;
        localErrorIndex = -1;
    }
}
