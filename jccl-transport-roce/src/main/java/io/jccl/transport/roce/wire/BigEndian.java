package io.jccl.transport.roce.wire;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/** Network-order access to a buffer at absolute indices, whatever order the caller set on the buffer. */
final class BigEndian {
    private BigEndian() {
    }

    static int getUnsignedByte(ByteBuffer buffer, int index) {
        return buffer.get(index) & 0xFF;
    }

    static int getUnsignedShort(ByteBuffer buffer, int index) {
        short value = buffer.getShort(index);
        return (buffer.order() == ByteOrder.BIG_ENDIAN ? value : Short.reverseBytes(value)) & 0xFFFF;
    }

    static void putShort(ByteBuffer buffer, int index, int value) {
        short v = (short) value;
        buffer.putShort(index, buffer.order() == ByteOrder.BIG_ENDIAN ? v : Short.reverseBytes(v));
    }

    /** The 24-bit unsigned value at {@code index} (QPNs, PSNs, MSNs). */
    static int getUnsigned24(ByteBuffer buffer, int index) {
        return (getUnsignedByte(buffer, index) << 16) | (getUnsignedByte(buffer, index + 1) << 8)
            | getUnsignedByte(buffer, index + 2);
    }

    static void putUnsigned24(ByteBuffer buffer, int index, int value) {
        buffer.put(index, (byte) (value >>> 16));
        buffer.put(index + 1, (byte) (value >>> 8));
        buffer.put(index + 2, (byte) value);
    }

    static int getInt(ByteBuffer buffer, int index) {
        int value = buffer.getInt(index);
        return buffer.order() == ByteOrder.BIG_ENDIAN ? value : Integer.reverseBytes(value);
    }

    static void putInt(ByteBuffer buffer, int index, int value) {
        buffer.putInt(index, buffer.order() == ByteOrder.BIG_ENDIAN ? value : Integer.reverseBytes(value));
    }

    static long getLong(ByteBuffer buffer, int index) {
        long value = buffer.getLong(index);
        return buffer.order() == ByteOrder.BIG_ENDIAN ? value : Long.reverseBytes(value);
    }

    static void putLong(ByteBuffer buffer, int index, long value) {
        buffer.putLong(index, buffer.order() == ByteOrder.BIG_ENDIAN ? value : Long.reverseBytes(value));
    }

    static void checkBounds(ByteBuffer buffer, int offset, int length, String header) {
        if (offset < 0 || offset > buffer.capacity() - length) {
            throw new IndexOutOfBoundsException(header + " of " + length + " bytes at offset " + offset
                + " does not fit a buffer of " + buffer.capacity() + " bytes");
        }
    }
}
