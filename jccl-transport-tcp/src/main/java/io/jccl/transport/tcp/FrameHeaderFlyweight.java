package io.jccl.transport.tcp;

import java.nio.ByteBuffer;

/**
 * A view of one 48-byte frame header ({@link Wire}) at an offset of a {@link ByteBuffer}, as Aeron's flyweights
 * view their frames: {@link #wrap} it, then read or write named fields. It is the only code that knows where a
 * header field sits: {@link TcpInput} parses every incoming frame through one, {@link TcpOutput} builds every
 * outgoing frame through another. Absolute accesses only (the buffer's position and limit are left alone), big-endian
 * as the buffer is; nothing is allocated.
 */
final class FrameHeaderFlyweight {
    private ByteBuffer buffer;
    private int offset;

    /** Points this view at the header starting at {@code offset} of {@code buffer}. */
    FrameHeaderFlyweight wrap(ByteBuffer buffer, int offset) {
        this.buffer = buffer;
        this.offset = offset;
        return this;
    }

    int type() {
        return buffer.get(offset + Wire.OFF_TYPE) & 0xFF;
    }

    int flags() {
        return buffer.get(offset + Wire.OFF_FLAGS) & 0xFF;
    }

    /** NAK class. */
    int syndrome() {
        return buffer.get(offset + Wire.OFF_SYNDROME) & 0xFF;
    }

    /** RNR timer code of an RNR NAK. */
    int rnrTimer() {
        return buffer.get(offset + Wire.OFF_TIMER) & 0xFF;
    }

    int psn() {
        return buffer.getInt(offset + Wire.OFF_PSN);
    }

    /** Payload bytes (READ: bytes requested; atomics: 8). */
    int length() {
        return buffer.getInt(offset + Wire.OFF_LENGTH);
    }

    int rkey() {
        return buffer.getInt(offset + Wire.OFF_RKEY);
    }

    /** Remote virtual address. */
    long va() {
        return buffer.getLong(offset + Wire.OFF_VA);
    }

    /** Compare / add operand; the original value in an atomic response. */
    long operand1() {
        return buffer.getLong(offset + Wire.OFF_OPERAND1);
    }

    /** Swap operand. */
    long operand2() {
        return buffer.getLong(offset + Wire.OFF_OPERAND2);
    }

    int immediate() {
        return buffer.getInt(offset + Wire.OFF_IMM);
    }

    /** 0, or on a request {@link Wire#ACK_PRESENT} plus the PSN of a piggybacked ACK. */
    int ackWord() {
        return buffer.getInt(offset + Wire.OFF_ACK);
    }

    FrameHeaderFlyweight type(int type) {
        buffer.put(offset + Wire.OFF_TYPE, (byte) type);
        return this;
    }

    FrameHeaderFlyweight flags(int flags) {
        buffer.put(offset + Wire.OFF_FLAGS, (byte) flags);
        return this;
    }

    FrameHeaderFlyweight syndrome(int syndrome) {
        buffer.put(offset + Wire.OFF_SYNDROME, (byte) syndrome);
        return this;
    }

    FrameHeaderFlyweight rnrTimer(int timer) {
        buffer.put(offset + Wire.OFF_TIMER, (byte) timer);
        return this;
    }

    FrameHeaderFlyweight psn(int psn) {
        buffer.putInt(offset + Wire.OFF_PSN, psn);
        return this;
    }

    FrameHeaderFlyweight length(int length) {
        buffer.putInt(offset + Wire.OFF_LENGTH, length);
        return this;
    }

    FrameHeaderFlyweight rkey(int rkey) {
        buffer.putInt(offset + Wire.OFF_RKEY, rkey);
        return this;
    }

    FrameHeaderFlyweight va(long va) {
        buffer.putLong(offset + Wire.OFF_VA, va);
        return this;
    }

    FrameHeaderFlyweight operand1(long operand) {
        buffer.putLong(offset + Wire.OFF_OPERAND1, operand);
        return this;
    }

    FrameHeaderFlyweight operand2(long operand) {
        buffer.putLong(offset + Wire.OFF_OPERAND2, operand);
        return this;
    }

    FrameHeaderFlyweight immediate(int immediate) {
        buffer.putInt(offset + Wire.OFF_IMM, immediate);
        return this;
    }

    FrameHeaderFlyweight ackWord(int ackWord) {
        buffer.putInt(offset + Wire.OFF_ACK, ackWord);
        return this;
    }
}
