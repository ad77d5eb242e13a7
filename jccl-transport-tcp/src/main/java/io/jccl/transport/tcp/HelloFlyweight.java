package io.jccl.transport.tcp;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;

/**
 * A view of one 96-byte handshake message ({@link Wire#HANDSHAKE}: HELLO, CHALLENGE or PROOF) at an offset of a
 * {@link ByteBuffer}, and the handshake's keys and MACs: the only code that builds, parses or authenticates the
 * handshake. The listener ({@link TcpContext}) checks a HELLO's fields through one; the connection
 * ({@link TcpConnection}) writes and verifies the messages of its side through another. Absolute accesses only: the
 * buffer's position and limit are left alone.
 *
 * <pre>
 *  0 u32 magic 'JCCL'      8 u32 destination QPN    16 16 B nonce (HELLO: connector's nC, CHALLENGE: acceptor's nA,
 *  4 u8  version 3        12 u32 source QPN                     PROOF: 0)
 *  5 u8  kind 1/2/3                                 32 u32 max_dest_rd_atomic of the sender (0..65535; PROOF: 0)
 *  6 u16 0                                          36 28 B 0
 *                                                   64 32 B MAC
 * </pre>
 *
 * <p>Keys and MACs (HMAC-SHA256, {@link HmacSha256}):
 * <ul>
 *   <li>pair key K = HMAC(key = "JCCL tcp v3 pair key", connector QPN | connector secret | acceptor QPN | acceptor
 *       secret): an HKDF-Extract of the two 128-bit secrets of the endpoint records, in the order the election fixed
 *       (QPNs u32, secrets 16 bytes, big-endian);</li>
 *   <li>HELLO: HMAC(K, bytes 0..63); CHALLENGE: HMAC(K, bytes 0..63 | nC); PROOF: HMAC(K, bytes 0..63 | nC | nA).
 *       Bytes 0..63 hold the kind and both QP numbers in the sender's direction, so no MAC stands for another
 *       message or the other direction, and each side's fresh nonce makes the other side's MAC unrepeatable.</li>
 * </ul>
 */
final class HelloFlyweight {
    private static final byte[] PAIR_KEY_LABEL = "JCCL tcp v3 pair key".getBytes(StandardCharsets.US_ASCII);

    private ByteBuffer buffer;
    private int offset;

    /** Points this view at the message starting at {@code offset} of {@code buffer}. */
    HelloFlyweight wrap(ByteBuffer buffer, int offset) {
        this.buffer = buffer;
        this.offset = offset;
        return this;
    }

    /**
     * Whether every field but the MAC is valid for a message of {@code kind}: magic, version, kind, the zero
     * fields, 24-bit QP numbers, max_dest_rd_atomic within 0..65535 (PROOF: nonce and max_dest_rd_atomic 0).
     */
    boolean wellFormed(int kind) {
        ByteBuffer b = buffer;
        int o = offset;
        if (b.getInt(o + Wire.HS_OFF_MAGIC) != Wire.MAGIC || b.get(o + Wire.HS_OFF_VERSION) != Wire.VERSION
            || b.get(o + Wire.HS_OFF_KIND) != kind || b.getShort(o + Wire.HS_OFF_ZERO) != 0
            || (destinationQpn() & ~Wire.PSN_MASK) != 0 || (sourceQpn() & ~Wire.PSN_MASK) != 0) {
            return false;
        }
        int maxDest = maxDestRdAtomic();
        if (kind == Wire.KIND_PROOF ? (maxDest | nonceHigh() | nonceLow()) != 0
            : maxDest < 0 || maxDest > Wire.HS_MAX_DEST_RD_ATOMIC) {
            return false;
        }
        long reserved = 0;
        for (int i = Wire.HS_OFF_RESERVED; i < Wire.HS_SIGNED; i += 4) {
            reserved |= b.getInt(o + i);
        }
        return reserved == 0;
    }

    /** QP number of the receiver of this message. */
    int destinationQpn() {
        return buffer.getInt(offset + Wire.HS_OFF_DEST_QPN);
    }

    /** QP number of the sender of this message. */
    int sourceQpn() {
        return buffer.getInt(offset + Wire.HS_OFF_SOURCE_QPN);
    }

    /** The sender's nonce (high 64 bits). */
    long nonceHigh() {
        return buffer.getLong(offset + Wire.HS_OFF_NONCE);
    }

    long nonceLow() {
        return buffer.getLong(offset + Wire.HS_OFF_NONCE + 8);
    }

    /** The sender's max_dest_rd_atomic. */
    int maxDestRdAtomic() {
        return buffer.getInt(offset + Wire.HS_OFF_MAX_DEST_RD_ATOMIC);
    }

    /** Writes the 64 signed bytes of a message of {@code kind}, zero fields zero; {@link #sign} adds the MAC. */
    HelloFlyweight write(int kind, int destinationQpn, int sourceQpn, long nonceHigh, long nonceLow,
                         int maxDestRdAtomic) {
        ByteBuffer b = buffer;
        int o = offset;
        b.putInt(o + Wire.HS_OFF_MAGIC, Wire.MAGIC);
        b.put(o + Wire.HS_OFF_VERSION, (byte) Wire.VERSION);
        b.put(o + Wire.HS_OFF_KIND, (byte) kind);
        b.putShort(o + Wire.HS_OFF_ZERO, (short) 0);
        b.putInt(o + Wire.HS_OFF_DEST_QPN, destinationQpn);
        b.putInt(o + Wire.HS_OFF_SOURCE_QPN, sourceQpn);
        b.putLong(o + Wire.HS_OFF_NONCE, nonceHigh);
        b.putLong(o + Wire.HS_OFF_NONCE + 8, nonceLow);
        b.putInt(o + Wire.HS_OFF_MAX_DEST_RD_ATOMIC, maxDestRdAtomic);
        for (int i = Wire.HS_OFF_RESERVED; i < Wire.HS_SIGNED; i += 4) {
            b.putInt(o + i, 0);
        }
        return this;
    }

    /**
     * Writes the MAC of this message (its kind is read from the message) under the key {@code mac} holds, with the
     * connector's nonce {@code nC} and the acceptor's nonce {@code nA} where the kind uses them.
     */
    void sign(HmacSha256 mac, long nCHigh, long nCLow, long nAHigh, long nALow) {
        byte[] computed = new byte[HmacSha256.MAC_BYTES];
        compute(mac, nCHigh, nCLow, nAHigh, nALow, computed);
        for (int i = 0; i < HmacSha256.MAC_BYTES; i++) {
            buffer.put(offset + Wire.HS_OFF_MAC + i, computed[i]);
        }
    }

    /**
     * Whether the message's MAC is the one {@code mac}'s key gives with these nonces, compared in constant time
     * ({@link MessageDigest#isEqual}).
     */
    boolean macMatches(HmacSha256 mac, long nCHigh, long nCLow, long nAHigh, long nALow) {
        byte[] expected = new byte[HmacSha256.MAC_BYTES];
        byte[] presented = new byte[HmacSha256.MAC_BYTES];
        compute(mac, nCHigh, nCLow, nAHigh, nALow, expected);
        for (int i = 0; i < HmacSha256.MAC_BYTES; i++) {
            presented[i] = buffer.get(offset + Wire.HS_OFF_MAC + i);
        }
        return MessageDigest.isEqual(expected, presented);
    }

    private void compute(HmacSha256 mac, long nCHigh, long nCLow, long nAHigh, long nALow, byte[] out) {
        int kind = buffer.get(offset + Wire.HS_OFF_KIND);
        mac.begin().update(buffer, offset, Wire.HS_SIGNED);
        if (kind != Wire.KIND_HELLO) {
            mac.updateLong(nCHigh).updateLong(nCLow);
        }
        if (kind == Wire.KIND_PROOF) {
            mac.updateLong(nAHigh).updateLong(nALow);
        }
        mac.finish(out, 0);
    }

    /**
     * The pair key of a connector and an acceptor (see the class comment) into {@code out[0..32)}, keying
     * {@code mac} with it.
     */
    static void pairKey(HmacSha256 mac, int connectorQpn, long connectorHigh, long connectorLow, int acceptorQpn,
                        long acceptorHigh, long acceptorLow, byte[] out) {
        mac.init(PAIR_KEY_LABEL).updateInt(connectorQpn).updateLong(connectorHigh).updateLong(connectorLow)
            .updateInt(acceptorQpn).updateLong(acceptorHigh).updateLong(acceptorLow).finish(out, 0);
        mac.init(out);
    }
}
