package io.jccl.verbs.spi;

import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;

/**
 * A provider's copy of a posted send request, preallocated per send-queue entry so posting allocates nothing.
 * Fields are public: this is a C-style record the providers' data paths read and update directly.
 */
public final class SendSlot {
    /** Caller's id. */
    public long wrId;
    /** Operation. */
    public SendOpcode opcode;
    /** {@link SendFlag} bits. */
    public int flags;
    /** Whether a successful completion is reported (SIGNALED or sq_sig_all). */
    public boolean signaled;
    /** Remote address (one-sided). */
    public long remoteAddress;
    /** Remote key (one-sided). */
    public int rkey;
    /** Immediate data. */
    public int immediateData;
    /** Atomic compare value or addend. */
    public long compareAdd;
    /** Atomic swap value. */
    public long swap;
    /** Number of scatter/gather entries used. */
    public int sgeCount;
    /** Scatter/gather addresses. */
    public final long[] sgeAddress;
    /** Scatter/gather lengths. */
    public final int[] sgeLength;
    /** Scatter/gather local keys. */
    public final int[] sgeLkey;
    /** Total payload length. */
    public long length;
    /** Inline payload copied at post time (when {@link SendFlag#INLINE} was set). */
    public final MemorySegment inlineData;
    /** Whether the payload is in {@link #inlineData}. */
    public boolean inline;
    /** Provider progress: bytes already sent or PSN bookkeeping. */
    public long progress;
    /** Provider progress: the PSN this request was sent with. */
    public int psn;
    /** Provider progress: RNR retries left. */
    public int rnrRetriesLeft;
    /** Provider progress: transport retries left. */
    public int retriesLeft;
    /** Provider progress: earliest time (System.nanoTime) of the next attempt. */
    public long notBeforeNs;
    /** Provider progress: whether execution started. */
    public boolean started;

    SendSlot(int maxSge, int maxInline, Arena arena) {
        sgeAddress = new long[maxSge];
        sgeLength = new int[maxSge];
        sgeLkey = new int[maxSge];
        inlineData = maxInline > 0 ? arena.allocate(maxInline, 8) : MemorySegment.NULL;
    }

    void copyFrom(SendWorkRequest request, boolean signalAll) {
        wrId = request.wrId();
        opcode = request.opcode();
        flags = request.flags();
        signaled = signalAll || (flags & SendFlag.SIGNALED) != 0;
        remoteAddress = request.remoteAddress();
        rkey = request.rkey();
        immediateData = request.immediateData();
        compareAdd = request.compareAdd();
        swap = request.swap();
        sgeCount = request.sgeCount();
        long total = 0;
        for (int i = 0; i < sgeCount; i++) {
            var sge = request.sge(i);
            sgeAddress[i] = sge.address();
            sgeLength[i] = sge.length();
            sgeLkey[i] = sge.lkey();
            total += sge.length();
        }
        length = total;
        inline = false;
        progress = 0;
        psn = 0;
        started = false;
        notBeforeNs = 0;
    }

    /** Whether the request is fenced. */
    public boolean fenced() {
        return (flags & SendFlag.FENCE) != 0;
    }
}
