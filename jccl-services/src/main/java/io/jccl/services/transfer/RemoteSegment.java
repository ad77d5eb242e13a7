package io.jccl.services.transfer;

/**
 * A handle on a segment some rank registered (Mooncake's {@code openSegment} → {@code SegmentHandle}): its owner,
 * length, and the address and key on the device that reaches the owner. Opening it connected this engine to the
 * owner. Handles are cheap values; a handle whose segment was unregistered fails its transfers with a remote access
 * error (the owner's keys are refused), never anything else's.
 */
public final class RemoteSegment {
    private final String name;
    private final int rank;
    private final long length;
    final long address;
    final int rkey;
    /** The owner's own segment when the owner is this engine (transfers are memory copies), else null. */
    final LocalSegment self;
    /** The engine that opened it: only that engine's batches can use it (its links and keys). */
    final TransferEngine engine;

    RemoteSegment(TransferEngine engine, String name, int rank, long length, long address, int rkey,
                  LocalSegment self) {
        this.engine = engine;
        this.name = name;
        this.rank = rank;
        this.length = length;
        this.address = address;
        this.rkey = rkey;
        this.self = self;
    }

    /** The name it was registered under. */
    public String name() {
        return name;
    }

    /** The rank that registered it. */
    public int rank() {
        return rank;
    }

    /** Length in bytes. */
    public long length() {
        return length;
    }

    @Override
    public String toString() {
        return "segment '" + name + "' of rank " + rank + " (" + length + " B)";
    }
}
