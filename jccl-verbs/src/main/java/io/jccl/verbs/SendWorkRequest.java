package io.jccl.verbs;

/**
 * A send-queue work request ({@code struct ibv_send_wr}). Mutable and meant to be reused: the provider copies what
 * it needs when the request is posted, so the same object can be changed and posted again at once, and re-posting
 * allocates nothing.
 */
public final class SendWorkRequest extends ScatterGatherList {
    private long wrId;
    private SendOpcode opcode = SendOpcode.SEND;
    private int flags;
    private long remoteAddress;
    private int rkey;
    private int immediateData;
    private long compareAdd;
    private long swap;

    /** A request with {@link ScatterGatherList#DEFAULT_CAPACITY} scatter/gather entries. */
    public SendWorkRequest() {
        this(DEFAULT_CAPACITY);
    }

    /** A request with room for {@code sgeCapacity} scatter/gather entries. */
    public SendWorkRequest(int sgeCapacity) {
        super(sgeCapacity);
    }

    /** Caller's identifier, returned in the completion. */
    public long wrId() {
        return wrId;
    }

    /** Sets the caller's identifier. */
    public SendWorkRequest wrId(long wrId) {
        this.wrId = wrId;
        return this;
    }

    /** The operation. */
    public SendOpcode opcode() {
        return opcode;
    }

    /** Sets the operation. */
    public SendWorkRequest opcode(SendOpcode opcode) {
        this.opcode = opcode;
        return this;
    }

    /** {@link SendFlag} bits. */
    public int flags() {
        return flags;
    }

    /** Sets the {@link SendFlag} bits. */
    public SendWorkRequest flags(int flags) {
        this.flags = flags;
        return this;
    }

    /** Remote virtual address for one-sided operations. */
    public long remoteAddress() {
        return remoteAddress;
    }

    /** Remote key for one-sided operations. */
    public int rkey() {
        return rkey;
    }

    /** Sets the remote address and key of a one-sided operation. */
    public SendWorkRequest remote(long remoteAddress, int rkey) {
        this.remoteAddress = remoteAddress;
        this.rkey = rkey;
        return this;
    }

    /** Immediate data (host order here; the wire carries it in network order). */
    public int immediateData() {
        return immediateData;
    }

    /** Sets the immediate data. */
    public SendWorkRequest immediateData(int immediateData) {
        this.immediateData = immediateData;
        return this;
    }

    /** Compare value (CMP_AND_SWP) or addend (FETCH_AND_ADD). */
    public long compareAdd() {
        return compareAdd;
    }

    /** Swap value (CMP_AND_SWP). */
    public long swap() {
        return swap;
    }

    /** Sets the atomic operands: compare value or addend, and swap value. */
    public SendWorkRequest atomic(long compareAdd, long swap) {
        this.compareAdd = compareAdd;
        this.swap = swap;
        return this;
    }

    /** Uses a single scatter/gather entry of {@code length} bytes at {@code offset} within {@code region}. */
    public SendWorkRequest local(MemoryRegion region, long offset, int length) {
        single(region, offset, length);
        return this;
    }

    /** Uses no scatter/gather entries (a zero-length message). */
    public SendWorkRequest noData() {
        setSgeCount(0);
        return this;
    }

    @Override
    public String toString() {
        return "SendWorkRequest{wrId=" + wrId + ", " + opcode + ", flags=" + SendFlag.describe(flags) + ", sges="
            + sgeCount() + ", len=" + totalLength() + ", remote=0x" + Long.toHexString(remoteAddress) + "/0x"
            + Integer.toHexString(rkey) + "}";
    }
}
