package io.jccl.verbs;

/** A receive-queue work request ({@code struct ibv_recv_wr}). Mutable and reusable, like {@link SendWorkRequest}. */
public final class ReceiveWorkRequest extends ScatterGatherList {
    private long wrId;

    /** A request with {@link ScatterGatherList#DEFAULT_CAPACITY} scatter/gather entries. */
    public ReceiveWorkRequest() {
        this(DEFAULT_CAPACITY);
    }

    /** A request with room for {@code sgeCapacity} scatter/gather entries. */
    public ReceiveWorkRequest(int sgeCapacity) {
        super(sgeCapacity);
    }

    /** Caller's identifier, returned in the completion. */
    public long wrId() {
        return wrId;
    }

    /** Sets the caller's identifier. */
    public ReceiveWorkRequest wrId(long wrId) {
        this.wrId = wrId;
        return this;
    }

    /** Uses a single scatter/gather entry of {@code length} bytes at {@code offset} within {@code region}. */
    public ReceiveWorkRequest local(MemoryRegion region, long offset, int length) {
        single(region, offset, length);
        return this;
    }

    /** Uses no scatter/gather entries (accepts zero-length messages and immediate-only writes). */
    public ReceiveWorkRequest noData() {
        setSgeCount(0);
        return this;
    }
}
