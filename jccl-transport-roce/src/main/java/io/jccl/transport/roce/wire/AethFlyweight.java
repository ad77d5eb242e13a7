package io.jccl.transport.roce.wire;

import java.nio.ByteBuffer;

/**
 * The ACK extended transport header (AETH, 4 bytes): an 8-bit syndrome and the 24-bit message sequence number (MSN)
 * of the last message the responder completed. The syndrome's top three bits give its type, as {@code ib_pack.h}
 * defines them:
 * <ul>
 *   <li>{@code 000} ACK: low 5 bits are the credit count ({@link #CREDITS_UNLIMITED} = no end-to-end credits, as
 *       rxe sends)</li>
 *   <li>{@code 001} RNR NAK: low 5 bits are the RNR timer code ({@code min_rnr_timer}) the requester waits</li>
 *   <li>{@code 011} NAK: low 5 bits are a {@code NAK_*} code</li>
 * </ul>
 */
public final class AethFlyweight {
    /** Header length in bytes. */
    public static final int LENGTH = RoceOpcode.AETH_LENGTH;

    /** Mask of the syndrome's type bits. */
    public static final int TYPE_MASK = 0xE0;
    /** Syndrome type of a positive acknowledgement. */
    public static final int TYPE_ACK = 0x00;
    /** Syndrome type of a receiver-not-ready NAK. */
    public static final int TYPE_RNR_NAK = 0x20;
    /** Syndrome type of a NAK. */
    public static final int TYPE_NAK = 0x60;
    /** Credit count meaning "no end-to-end flow control" (rxe's {@code AETH_ACK_UNLIMITED}). */
    public static final int CREDITS_UNLIMITED = 0x1F;
    /** NAK code: PSN sequence error (the requester goes back to the NAK's PSN). */
    public static final int NAK_PSN_SEQUENCE_ERROR = 0;
    /** NAK code: invalid request. */
    public static final int NAK_INVALID_REQUEST = 1;
    /** NAK code: remote access error (R_Key, bounds or permission). */
    public static final int NAK_REMOTE_ACCESS_ERROR = 2;
    /** NAK code: remote operational error. */
    public static final int NAK_REMOTE_OPERATIONAL_ERROR = 3;
    /** NAK code: invalid RD request. */
    public static final int NAK_INVALID_RD_REQUEST = 4;

    private ByteBuffer buffer;
    private int offset;

    /** Creates an unwrapped flyweight. */
    public AethFlyweight() {
    }

    /** Points this flyweight at the AETH that starts at {@code offset}. */
    public AethFlyweight wrap(ByteBuffer buffer, int offset) {
        BigEndian.checkBounds(buffer, offset, LENGTH, "AETH");
        this.buffer = buffer;
        this.offset = offset;
        return this;
    }

    /** The raw syndrome byte. */
    public int syndrome() {
        return BigEndian.getUnsignedByte(buffer, offset);
    }

    /** Sets the raw syndrome byte. */
    public AethFlyweight syndrome(int syndrome) {
        buffer.put(offset, (byte) syndrome);
        return this;
    }

    /** The syndrome's type: {@link #TYPE_ACK}, {@link #TYPE_RNR_NAK}, {@link #TYPE_NAK} or a reserved value. */
    public int type() {
        return syndrome() & TYPE_MASK;
    }

    /** The syndrome's low 5 bits: credits (ACK), RNR timer code (RNR NAK) or NAK code (NAK). */
    public int value() {
        return syndrome() & 0x1F;
    }

    /** The message sequence number (24 bits). */
    public int msn() {
        return BigEndian.getUnsigned24(buffer, offset + 1);
    }

    /** Sets the message sequence number (taken modulo 2^24, as it wraps). */
    public AethFlyweight msn(int msn) {
        BigEndian.putUnsigned24(buffer, offset + 1, msn & Psn.MASK);
        return this;
    }

    /** Writes an ACK with unlimited credits. */
    public AethFlyweight ack(int msn) {
        return syndrome(TYPE_ACK | CREDITS_UNLIMITED).msn(msn);
    }

    /** Writes an RNR NAK asking the requester to wait {@code rnrTimerCode} (5-bit min_rnr_timer encoding). */
    public AethFlyweight rnrNak(int rnrTimerCode, int msn) {
        if (rnrTimerCode < 0 || rnrTimerCode > 31) {
            throw new IllegalArgumentException("RNR timer code " + rnrTimerCode + " outside 0..31");
        }
        return syndrome(TYPE_RNR_NAK | rnrTimerCode).msn(msn);
    }

    /** Writes a NAK with one of the {@code NAK_*} codes. */
    public AethFlyweight nak(int nakCode, int msn) {
        if (nakCode < NAK_PSN_SEQUENCE_ERROR || nakCode > NAK_INVALID_RD_REQUEST) {
            throw new IllegalArgumentException("NAK code " + nakCode + " outside 0..4");
        }
        return syndrome(TYPE_NAK | nakCode).msn(msn);
    }
}
