package io.jccl.collectives.message;

import io.jccl.collectives.DataType;
import io.jccl.collectives.ReduceOp;
import io.jccl.collectives.core.Signature;
import io.jccl.verbs.MemoryRegion;

import java.lang.foreign.MemorySegment;

/** One directed transfer of an {@link Exchange}: a send to or a receive from one peer (reused, never allocated per op). */
public final class Transfer {
    /**
     * Rendezvous states: eager chunks through the inbox; waiting for (sender) or about to post (receiver) the
     * clear-to-send; data written straight into the receiver's buffer.
     */
    static final int EAGER = 0;
    static final int RDV_WANTED = 1;
    static final int RDV_ACTIVE = 2;
    Peer peer;
    boolean send;
    MemorySegment seg;
    long off;
    long len;
    MemoryRegion region;
    long regionOff;
    boolean reduce;
    /** Local operand of a reducing receive when it is not {@link #seg} (out-of-place ring all-reduce), else null. */
    MemorySegment src;
    DataType type;
    ReduceOp op;
    Transfer after;
    long done;
    boolean finished;
    Signature sig;
    int rdv;
    /** Sender of an active rendezvous: the receiver's destination (address of byte 0 of the transfer) and rkey. */
    long remoteAddress;
    int remoteKey;

    Transfer reset() {
        peer = null;
        seg = null;
        src = null;
        region = null;
        after = null;
        reduce = false;
        done = 0;
        rdv = EAGER;
        finished = false;
        return this;
    }

    /**
     * Pipelines this transfer behind {@code previous} (a receive of the same exchange): a chunk goes out only once
     * {@code previous} has delivered as many bytes (ring steps forward what the step before received); returns this.
     */
    public Transfer after(Transfer previous) {
        this.after = previous;
        return this;
    }

    /**
     * A reducing receive whose local operand is {@code operand} instead of its destination (out-of-place ring
     * all-reduce: each received block is combined with the input's block into the output); returns this.
     */
    public Transfer reduceWith(MemorySegment operand) {
        this.src = operand;
        return this;
    }

    /**
     * Marks a transfer the receiver only copies (no reduction) for rendezvous when it is large enough for its
     * peer's device ({@link Peer#rendezvousBytes}): the receiver registers its destination and sends a
     * clear-to-send, the sender writes straight into it (no copy out of the inbox). Both ends of a transfer must
     * mark it, which the algorithms do by marking sends and receives of the same steps. Returns this.
     */
    public Transfer placed() {
        long min = peer.rendezvousBytes;
        if (min > 0 && len >= min) {
            rdv = RDV_WANTED;
        }
        return this;
    }
}
