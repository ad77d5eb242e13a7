package io.jccl.transport.roce.wire;

import java.nio.ByteBuffer;

/** The atomic ACK extended transport header (AtomicAckETH, 8 bytes): the remote value before the atomic. */
public final class AtomicAckEthFlyweight {
    /** Header length in bytes. */
    public static final int LENGTH = RoceOpcode.ATOMIC_ACK_ETH_LENGTH;

    private ByteBuffer buffer;
    private int offset;

    /** Creates an unwrapped flyweight. */
    public AtomicAckEthFlyweight() {
    }

    /** Points this flyweight at the AtomicAckETH that starts at {@code offset}. */
    public AtomicAckEthFlyweight wrap(ByteBuffer buffer, int offset) {
        BigEndian.checkBounds(buffer, offset, LENGTH, "AtomicAckETH");
        this.buffer = buffer;
        this.offset = offset;
        return this;
    }

    /** The original remote data. */
    public long originalData() {
        return BigEndian.getLong(buffer, offset);
    }

    /** Sets the original remote data. */
    public AtomicAckEthFlyweight originalData(long value) {
        BigEndian.putLong(buffer, offset, value);
        return this;
    }
}
