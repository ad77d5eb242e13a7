package io.jccl.collectives;

import io.jccl.verbs.MemoryRegion;

import java.lang.foreign.MemorySegment;

/** One directed transfer of an exchange (reused; engine-internal). */
final class Xfer {
    Peer peer;
    boolean send;
    MemorySegment seg;
    long off;
    long len;
    MemoryRegion region;
    long regionOff;
    boolean reduce;
    DataType type;
    ReduceOp op;
    Xfer after;
    long done;
    boolean finished;
    Signature sig;

    Xfer reset() {
        peer = null;
        seg = null;
        region = null;
        after = null;
        reduce = false;
        done = 0;
        finished = false;
        return this;
    }
}
