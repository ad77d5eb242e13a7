package io.jccl.transport.tcp;

import java.nio.ByteBuffer;

/**
 * A view of one 64-byte HELLO or ACCEPT ({@link Wire}) at an offset of a {@link ByteBuffer}: the only code that
 * builds or parses the handshake. The listener ({@link TcpContext}) checks a connector's HELLO through one, the
 * connection ({@link TcpConnection}) writes its HELLO or ACCEPT and checks the peer's ACCEPT through another.
 * Absolute accesses only: the buffer's position and limit are left alone.
 */
final class HelloFlyweight {
    private ByteBuffer buffer;
    private int offset;

    /** Points this view at the message starting at {@code offset} of {@code buffer}. */
    HelloFlyweight wrap(ByteBuffer buffer, int offset) {
        this.buffer = buffer;
        this.offset = offset;
        return this;
    }

    /** Whether magic and version are this protocol's and the message is of {@code kind} (HELLO or ACCEPT). */
    boolean is(int kind) {
        return buffer.getInt(offset + Wire.HELLO_OFF_MAGIC) == Wire.MAGIC
            && buffer.get(offset + Wire.HELLO_OFF_VERSION) == Wire.VERSION
            && buffer.get(offset + Wire.HELLO_OFF_KIND) == kind;
    }

    /** QP number of the receiver of this message. */
    int destinationQpn() {
        return buffer.getInt(offset + Wire.HELLO_OFF_DEST_QPN);
    }

    /** QP number of the sender of this message. */
    int sourceQpn() {
        return buffer.getInt(offset + Wire.HELLO_OFF_SOURCE_QPN);
    }

    /** The receiver's secret as the sender was given it (high 64 bits). */
    long destinationSecretHigh() {
        return buffer.getLong(offset + Wire.HELLO_OFF_DEST_SECRET);
    }

    long destinationSecretLow() {
        return buffer.getLong(offset + Wire.HELLO_OFF_DEST_SECRET + 8);
    }

    /** The sender's own secret (high 64 bits). */
    long sourceSecretHigh() {
        return buffer.getLong(offset + Wire.HELLO_OFF_SOURCE_SECRET);
    }

    long sourceSecretLow() {
        return buffer.getLong(offset + Wire.HELLO_OFF_SOURCE_SECRET + 8);
    }

    /** The sender's max_dest_rd_atomic. */
    int maxDestRdAtomic() {
        return buffer.getInt(offset + Wire.HELLO_OFF_MAX_DEST_RD_ATOMIC);
    }

    /** Writes a whole {@link Wire#HELLO}-byte message of {@code kind}, reserved bytes zero. */
    void write(int kind, int destinationQpn, int sourceQpn, long destinationSecretHigh, long destinationSecretLow,
               long sourceSecretHigh, long sourceSecretLow, int maxDestRdAtomic) {
        ByteBuffer b = buffer;
        int o = offset;
        b.putInt(o + Wire.HELLO_OFF_MAGIC, Wire.MAGIC);
        b.put(o + Wire.HELLO_OFF_VERSION, (byte) Wire.VERSION);
        b.put(o + Wire.HELLO_OFF_KIND, (byte) kind);
        b.putShort(o + Wire.HELLO_OFF_ZERO, (short) 0);
        b.putInt(o + Wire.HELLO_OFF_DEST_QPN, destinationQpn);
        b.putInt(o + Wire.HELLO_OFF_SOURCE_QPN, sourceQpn);
        b.putLong(o + Wire.HELLO_OFF_DEST_SECRET, destinationSecretHigh);
        b.putLong(o + Wire.HELLO_OFF_DEST_SECRET + 8, destinationSecretLow);
        b.putLong(o + Wire.HELLO_OFF_SOURCE_SECRET, sourceSecretHigh);
        b.putLong(o + Wire.HELLO_OFF_SOURCE_SECRET + 8, sourceSecretLow);
        b.putInt(o + Wire.HELLO_OFF_MAX_DEST_RD_ATOMIC, maxDestRdAtomic);
        b.putInt(o + Wire.HELLO_OFF_PADDING, 0);
        b.putLong(o + Wire.HELLO_OFF_PADDING + 4, 0);
    }
}
