package io.jccl.transport.roce.wire;

import java.nio.ByteBuffer;

/** Immediate data (ImmDt, 4 bytes) of SEND/RDMA WRITE with immediate; opaque to the transport, network order. */
public final class ImmDtFlyweight {
    /** Header length in bytes. */
    public static final int LENGTH = RoceOpcode.IMMDT_LENGTH;

    private ByteBuffer buffer;
    private int offset;

    /** Creates an unwrapped flyweight. */
    public ImmDtFlyweight() {
    }

    /** Points this flyweight at the immediate data that starts at {@code offset}. */
    public ImmDtFlyweight wrap(ByteBuffer buffer, int offset) {
        BigEndian.checkBounds(buffer, offset, LENGTH, "ImmDt");
        this.buffer = buffer;
        this.offset = offset;
        return this;
    }

    /** The immediate value as the four bytes read in network order. */
    public int immediate() {
        return BigEndian.getInt(buffer, offset);
    }

    /** Sets the immediate value (written in network order). */
    public ImmDtFlyweight immediate(int value) {
        BigEndian.putInt(buffer, offset, value);
        return this;
    }
}
