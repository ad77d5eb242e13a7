package io.jccl.transport.roce.wire;

import java.nio.ByteBuffer;

/**
 * The atomic extended transport header (AtomicETH, 28 bytes) of COMPARE_SWAP and FETCH_ADD: remote virtual address
 * (8 bytes), R_Key (4), swap or add operand (8), compare operand (8; unused by FETCH_ADD), big-endian.
 */
public final class AtomicEthFlyweight {
    /** Header length in bytes. */
    public static final int LENGTH = RoceOpcode.ATOMIC_ETH_LENGTH;

    private ByteBuffer buffer;
    private int offset;

    /** Creates an unwrapped flyweight. */
    public AtomicEthFlyweight() {
    }

    /** Points this flyweight at the AtomicETH that starts at {@code offset}. */
    public AtomicEthFlyweight wrap(ByteBuffer buffer, int offset) {
        BigEndian.checkBounds(buffer, offset, LENGTH, "AtomicETH");
        this.buffer = buffer;
        this.offset = offset;
        return this;
    }

    /** Remote virtual address (8-byte aligned for the operation to be valid). */
    public long virtualAddress() {
        return BigEndian.getLong(buffer, offset);
    }

    /** Sets the remote virtual address. */
    public AtomicEthFlyweight virtualAddress(long address) {
        BigEndian.putLong(buffer, offset, address);
        return this;
    }

    /** Remote key. */
    public int rKey() {
        return BigEndian.getInt(buffer, offset + 8);
    }

    /** Sets the remote key. */
    public AtomicEthFlyweight rKey(int rKey) {
        BigEndian.putInt(buffer, offset + 8, rKey);
        return this;
    }

    /** The value to swap in (COMPARE_SWAP) or to add (FETCH_ADD). */
    public long swapOrAdd() {
        return BigEndian.getLong(buffer, offset + 12);
    }

    /** Sets the swap or add operand. */
    public AtomicEthFlyweight swapOrAdd(long value) {
        BigEndian.putLong(buffer, offset + 12, value);
        return this;
    }

    /** The value to compare with (COMPARE_SWAP). */
    public long compare() {
        return BigEndian.getLong(buffer, offset + 20);
    }

    /** Sets the compare operand. */
    public AtomicEthFlyweight compare(long value) {
        BigEndian.putLong(buffer, offset + 20, value);
        return this;
    }
}
