package io.jccl.transport.roce.wire;

import java.nio.ByteBuffer;

/**
 * The RDMA extended transport header (RETH, 16 bytes) of RDMA WRITE FIRST/ONLY and RDMA READ requests: remote
 * virtual address (8 bytes), R_Key (4) and the DMA length of the whole message (4), big-endian.
 */
public final class RethFlyweight {
    /** Header length in bytes. */
    public static final int LENGTH = RoceOpcode.RETH_LENGTH;

    private ByteBuffer buffer;
    private int offset;

    /** Creates an unwrapped flyweight. */
    public RethFlyweight() {
    }

    /** Points this flyweight at the RETH that starts at {@code offset}. */
    public RethFlyweight wrap(ByteBuffer buffer, int offset) {
        BigEndian.checkBounds(buffer, offset, LENGTH, "RETH");
        this.buffer = buffer;
        this.offset = offset;
        return this;
    }

    /** Remote virtual address. */
    public long virtualAddress() {
        return BigEndian.getLong(buffer, offset);
    }

    /** Sets the remote virtual address. */
    public RethFlyweight virtualAddress(long address) {
        BigEndian.putLong(buffer, offset, address);
        return this;
    }

    /** Remote key. */
    public int rKey() {
        return BigEndian.getInt(buffer, offset + 8);
    }

    /** Sets the remote key. */
    public RethFlyweight rKey(int rKey) {
        BigEndian.putInt(buffer, offset + 8, rKey);
        return this;
    }

    /** Length of the whole message in bytes (unsigned 32 bits). */
    public long dmaLength() {
        return BigEndian.getInt(buffer, offset + 12) & 0xFFFF_FFFFL;
    }

    /** Sets the DMA length. */
    public RethFlyweight dmaLength(long lengthBytes) {
        if (lengthBytes < 0 || lengthBytes > 0xFFFF_FFFFL) {
            throw new IllegalArgumentException("DMA length " + lengthBytes + " outside 0..2^32-1");
        }
        BigEndian.putInt(buffer, offset + 12, (int) lengthBytes);
        return this;
    }
}
