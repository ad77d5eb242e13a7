package io.jccl.verbs;

/**
 * One entry of a scatter/gather list: {@code length} bytes at native {@code address}, inside the memory region
 * whose local key is {@code lkey} ({@code struct ibv_sge}). Mutable and reusable.
 */
public final class ScatterGatherElement {
    private long address;
    private int length;
    private int lkey;

    /** Sets all three fields. */
    public ScatterGatherElement set(long address, int length, int lkey) {
        this.address = address;
        this.length = length;
        this.lkey = lkey;
        return this;
    }

    /** Points at {@code length} bytes at {@code offset} within {@code region}. */
    public ScatterGatherElement set(MemoryRegion region, long offset, int length) {
        return set(region.address() + offset, length, region.lkey());
    }

    /** Native address of the first byte. */
    public long address() {
        return address;
    }

    /** Length in bytes. */
    public int length() {
        return length;
    }

    /** Local key of the region that contains the bytes. */
    public int lkey() {
        return lkey;
    }

    @Override
    public String toString() {
        return "sge{addr=0x" + Long.toHexString(address) + ", len=" + length + ", lkey=0x" + Integer.toHexString(lkey) + "}";
    }
}
