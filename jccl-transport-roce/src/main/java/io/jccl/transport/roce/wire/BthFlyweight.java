package io.jccl.transport.roce.wire;

import java.nio.ByteBuffer;

/**
 * The InfiniBand base transport header (BTH, 12 bytes), the first header of every RoCEv2 packet after UDP:
 * <pre>
 *  byte 0     opcode
 *  byte 1     SE(7) M(6) PadCnt(5:4) TVer(3:0)
 *  bytes 2-3  P_Key
 *  byte 4     FECN(7) BECN(6) reserved(5:0)
 *  bytes 5-7  destination QP
 *  byte 8     AckReq(7) reserved(6:0)
 *  bytes 9-11 PSN (24 bits, wraps)
 * </pre>
 * A flyweight: {@link #wrap} it around a buffer and an offset, then read or write fields in place; one instance is
 * reused for every packet. All fields are big-endian whatever order the buffer has.
 */
public final class BthFlyweight {
    /** Header length in bytes. */
    public static final int LENGTH = RoceOpcode.BTH_LENGTH;
    /** The P_Key of the default partition, full member (what rxe sends). */
    public static final int DEFAULT_PKEY = 0xFFFF;
    /** The only transport header version defined. */
    public static final int TRANSPORT_VERSION = 0;

    private static final int OPCODE = 0;
    private static final int FLAGS = 1;
    private static final int PKEY = 2;
    private static final int FECN_BECN = 4;
    private static final int DEST_QP = 5;
    private static final int ACK_REQ = 8;
    private static final int PSN = 9;

    private static final int SOLICITED_BIT = 0x80;
    private static final int MIGRATION_BIT = 0x40;
    private static final int PAD_SHIFT = 4;
    private static final int PAD_BITS = 0x30;
    private static final int TVER_BITS = 0x0F;
    private static final int FECN_BIT = 0x80;
    private static final int BECN_BIT = 0x40;
    private static final int ACK_REQ_BIT = 0x80;

    private ByteBuffer buffer;
    private int offset;

    /** Creates an unwrapped flyweight. */
    public BthFlyweight() {
    }

    /**
     * Points this flyweight at the BTH that starts at {@code offset}.
     *
     * @throws IndexOutOfBoundsException when the 12 bytes do not fit
     */
    public BthFlyweight wrap(ByteBuffer buffer, int offset) {
        BigEndian.checkBounds(buffer, offset, LENGTH, "BTH");
        this.buffer = buffer;
        this.offset = offset;
        return this;
    }

    /** The buffer this flyweight views. */
    public ByteBuffer buffer() {
        return buffer;
    }

    /** Offset of the BTH in {@link #buffer()}. */
    public int offset() {
        return offset;
    }

    /**
     * Writes a whole header with the common defaults: no solicited event, migration state 1 (migrated: as rxe sends
     * it; there is no alternate path), TVer 0, FECN/BECN clear, AckReq clear, reserved bits zero.
     */
    public BthFlyweight init(int opcode, int padCount, int pKey, int destQp, int psn) {
        buffer.put(offset + OPCODE, (byte) opcode);
        buffer.put(offset + FLAGS, (byte) (MIGRATION_BIT | ((padCount << PAD_SHIFT) & PAD_BITS)));
        BigEndian.putShort(buffer, offset + PKEY, pKey);
        BigEndian.putInt(buffer, offset + FECN_BECN, destQp & Psn.MASK);
        BigEndian.putInt(buffer, offset + ACK_REQ, psn & Psn.MASK);
        return this;
    }

    /** The opcode (see {@link RoceOpcode}). */
    public int opcode() {
        return BigEndian.getUnsignedByte(buffer, offset + OPCODE);
    }

    /** Sets the opcode. */
    public BthFlyweight opcode(int opcode) {
        buffer.put(offset + OPCODE, (byte) opcode);
        return this;
    }

    /** Solicited event requested. */
    public boolean solicitedEvent() {
        return (buffer.get(offset + FLAGS) & SOLICITED_BIT) != 0;
    }

    /** Sets the solicited event bit. */
    public BthFlyweight solicitedEvent(boolean value) {
        return setBit(FLAGS, SOLICITED_BIT, value);
    }

    /** The migration request bit (M). */
    public boolean migrationRequest() {
        return (buffer.get(offset + FLAGS) & MIGRATION_BIT) != 0;
    }

    /** Sets the migration request bit. */
    public BthFlyweight migrationRequest(boolean value) {
        return setBit(FLAGS, MIGRATION_BIT, value);
    }

    /** Pad bytes after the payload (0..3). */
    public int padCount() {
        return (buffer.get(offset + FLAGS) & PAD_BITS) >>> PAD_SHIFT;
    }

    /** Sets the pad count. */
    public BthFlyweight padCount(int padCount) {
        if (padCount < 0 || padCount > 3) {
            throw new IllegalArgumentException("pad count " + padCount + " outside 0..3");
        }
        int flags = buffer.get(offset + FLAGS) & ~PAD_BITS;
        buffer.put(offset + FLAGS, (byte) (flags | (padCount << PAD_SHIFT)));
        return this;
    }

    /** Transport header version (must be 0). */
    public int transportVersion() {
        return buffer.get(offset + FLAGS) & TVER_BITS;
    }

    /** The partition key. */
    public int pKey() {
        return BigEndian.getUnsignedShort(buffer, offset + PKEY);
    }

    /** Sets the partition key. */
    public BthFlyweight pKey(int pKey) {
        BigEndian.putShort(buffer, offset + PKEY, pKey);
        return this;
    }

    /** Forward explicit congestion notification (set by a switch that marked the packet, in IB fabrics). */
    public boolean fecn() {
        return (buffer.get(offset + FECN_BECN) & FECN_BIT) != 0;
    }

    /** Sets FECN. */
    public BthFlyweight fecn(boolean value) {
        return setBit(FECN_BECN, FECN_BIT, value);
    }

    /** Backward explicit congestion notification (set on CNPs). */
    public boolean becn() {
        return (buffer.get(offset + FECN_BECN) & BECN_BIT) != 0;
    }

    /** Sets BECN. */
    public BthFlyweight becn(boolean value) {
        return setBit(FECN_BECN, BECN_BIT, value);
    }

    /** The destination queue pair number (24 bits). */
    public int destQp() {
        return BigEndian.getUnsigned24(buffer, offset + DEST_QP);
    }

    /** Sets the destination queue pair number. */
    public BthFlyweight destQp(int qpn) {
        if ((qpn & ~Psn.MASK) != 0) {
            throw new IllegalArgumentException("QP number " + qpn + " outside 0..0xFFFFFF");
        }
        BigEndian.putUnsigned24(buffer, offset + DEST_QP, qpn);
        return this;
    }

    /** The responder is asked to acknowledge this packet. */
    public boolean ackRequest() {
        return (buffer.get(offset + ACK_REQ) & ACK_REQ_BIT) != 0;
    }

    /** Sets AckReq. */
    public BthFlyweight ackRequest(boolean value) {
        return setBit(ACK_REQ, ACK_REQ_BIT, value);
    }

    /** The packet sequence number (24 bits). */
    public int psn() {
        return BigEndian.getUnsigned24(buffer, offset + PSN);
    }

    /** Sets the packet sequence number. */
    public BthFlyweight psn(int psn) {
        BigEndian.putUnsigned24(buffer, offset + PSN, Psn.checked(psn));
        return this;
    }

    private BthFlyweight setBit(int field, int bit, boolean value) {
        int b = buffer.get(offset + field);
        buffer.put(offset + field, (byte) (value ? b | bit : b & ~bit));
        return this;
    }
}
