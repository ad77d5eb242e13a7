package io.jccl.collectives;

import io.jccl.verbs.MemoryRegion;

import java.lang.foreign.MemorySegment;

/** One directed transfer of an exchange (reused; engine-internal). */
final class Xfer {
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
    Xfer after;
    long done;
    boolean finished;
    Signature sig;
    int rdv;
    /** Sender of an active rendezvous: the receiver's destination (address of byte 0 of the transfer) and rkey. */
    long remoteAddress;
    int remoteKey;

    Xfer reset() {
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
}
