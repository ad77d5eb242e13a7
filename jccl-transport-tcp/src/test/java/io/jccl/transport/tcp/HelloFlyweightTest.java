package io.jccl.transport.tcp;

import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.util.Arrays;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The handshake messages: every field is checked, no byte of a message can change without the receiver noticing
 * (a field check or the MAC), the MACs bind the nonces, and the pair key depends on both records in the elected
 * order.
 */
class HelloFlyweightTest {
    private static final int CONNECTOR = 0x00ABCDEF;
    private static final int ACCEPTOR = 0x00123456;

    private static HmacSha256 pairKey(int connectorQpn, long connectorLow, int acceptorQpn, long acceptorLow) {
        HmacSha256 mac = new HmacSha256();
        HelloFlyweight.pairKey(mac, connectorQpn, 11, connectorLow, acceptorQpn, 22, acceptorLow,
            new byte[HmacSha256.MAC_BYTES]);
        return mac;
    }

    /** A signed message of {@code kind} from the side it belongs to, nonces nC = (1, 2) and nA = (3, 4). */
    private static ByteBuffer message(HmacSha256 key, int kind) {
        ByteBuffer b = ByteBuffer.allocate(Wire.HANDSHAKE);
        HelloFlyweight h = new HelloFlyweight().wrap(b, 0);
        switch (kind) {
            case Wire.KIND_HELLO -> h.write(kind, ACCEPTOR, CONNECTOR, 1, 2, 16);
            case Wire.KIND_CHALLENGE -> h.write(kind, CONNECTOR, ACCEPTOR, 3, 4, 16);
            default -> h.write(kind, ACCEPTOR, CONNECTOR, 0, 0, 0);
        }
        h.sign(key, 1, 2, 3, 4);
        return b;
    }

    private static boolean accepted(HmacSha256 key, ByteBuffer b, int kind) {
        HelloFlyweight h = new HelloFlyweight().wrap(b, 0);
        return h.wellFormed(kind) && h.macMatches(key, 1, 2, 3, 4);
    }

    @Test
    void shouldNoticeAnyChangedByte() {
        HmacSha256 key = pairKey(CONNECTOR, 33, ACCEPTOR, 44);
        for (int kind : new int[] {Wire.KIND_HELLO, Wire.KIND_CHALLENGE, Wire.KIND_PROOF}) {
            assertTrue(accepted(key, message(key, kind), kind), "kind " + kind);
            for (int i = 0; i < Wire.HANDSHAKE; i++) {
                for (int bit = 0; bit < 8; bit++) {
                    ByteBuffer b = message(key, kind);
                    b.put(i, (byte) (b.get(i) ^ (1 << bit)));
                    assertFalse(accepted(key, b, kind), "kind " + kind + ", byte " + i + ", bit " + bit);
                }
            }
        }
    }

    @Test
    void shouldCheckEveryField() {
        HmacSha256 key = pairKey(CONNECTOR, 33, ACCEPTOR, 44);
        ByteBuffer b = message(key, Wire.KIND_HELLO);
        HelloFlyweight h = new HelloFlyweight().wrap(b, 0);
        assertTrue(h.wellFormed(Wire.KIND_HELLO));
        assertFalse(h.wellFormed(Wire.KIND_CHALLENGE));
        assertFalse(h.wellFormed(Wire.KIND_PROOF));
        b.putInt(Wire.HS_OFF_MAX_DEST_RD_ATOMIC, Wire.HS_MAX_DEST_RD_ATOMIC);
        assertTrue(h.wellFormed(Wire.KIND_HELLO));
        b.putInt(Wire.HS_OFF_MAX_DEST_RD_ATOMIC, Wire.HS_MAX_DEST_RD_ATOMIC + 1);
        assertFalse(h.wellFormed(Wire.KIND_HELLO), "max_dest_rd_atomic above 65535");
        b.putInt(Wire.HS_OFF_MAX_DEST_RD_ATOMIC, -1);
        assertFalse(h.wellFormed(Wire.KIND_HELLO), "negative max_dest_rd_atomic");
        b.putInt(Wire.HS_OFF_MAX_DEST_RD_ATOMIC, 16);
        b.putInt(Wire.HS_OFF_DEST_QPN, 0x01000000);
        assertFalse(h.wellFormed(Wire.KIND_HELLO), "25-bit QPN");
        ByteBuffer proof = message(key, Wire.KIND_PROOF);
        HelloFlyweight p = new HelloFlyweight().wrap(proof, 0);
        assertTrue(p.wellFormed(Wire.KIND_PROOF));
        proof.putLong(Wire.HS_OFF_NONCE, 1);
        assertFalse(p.wellFormed(Wire.KIND_PROOF), "a PROOF carries no nonce");
        proof.putLong(Wire.HS_OFF_NONCE, 0).putInt(Wire.HS_OFF_MAX_DEST_RD_ATOMIC, 1);
        assertFalse(p.wellFormed(Wire.KIND_PROOF), "nor max_dest_rd_atomic");
    }

    @Test
    void shouldBindTheNoncesAndTheKey() {
        HmacSha256 key = pairKey(CONNECTOR, 33, ACCEPTOR, 44);
        ByteBuffer challenge = message(key, Wire.KIND_CHALLENGE);
        HelloFlyweight c = new HelloFlyweight().wrap(challenge, 0);
        assertFalse(c.macMatches(key, 1, 5, 3, 4), "CHALLENGE for another connector nonce");
        ByteBuffer proof = message(key, Wire.KIND_PROOF);
        HelloFlyweight p = new HelloFlyweight().wrap(proof, 0);
        assertFalse(p.macMatches(key, 1, 2, 3, 5), "PROOF for another acceptor nonce");
        assertFalse(p.macMatches(key, 1, 5, 3, 4), "PROOF for another connector nonce");
        // A key from any other record — either secret, either QPN, or the two records swapped — fails.
        for (HmacSha256 other : new HmacSha256[] {pairKey(CONNECTOR, 34, ACCEPTOR, 44),
            pairKey(CONNECTOR, 33, ACCEPTOR, 45), pairKey(CONNECTOR ^ 1, 33, ACCEPTOR, 44),
            pairKey(ACCEPTOR, 44, CONNECTOR, 33)}) {
            assertFalse(accepted(other, message(key, Wire.KIND_HELLO), Wire.KIND_HELLO));
            assertFalse(accepted(other, proof, Wire.KIND_PROOF));
        }
    }

    @Test
    void shouldDeriveThePairKeyAsDocumented() {
        byte[] k = new byte[HmacSha256.MAC_BYTES];
        HelloFlyweight.pairKey(new HmacSha256(), CONNECTOR, 11, 33, ACCEPTOR, 22, 44, k);
        ByteBuffer input = ByteBuffer.allocate(40).putInt(CONNECTOR).putLong(11).putLong(33).putInt(ACCEPTOR)
            .putLong(22).putLong(44);
        assertArrayEquals(HmacSha256.mac("JCCL tcp v3 pair key".getBytes(java.nio.charset.StandardCharsets.US_ASCII),
            input.array()), k);
        // The HELLO's MAC is HMAC(K, bytes 0..63).
        HmacSha256 key = new HmacSha256().init(k);
        ByteBuffer hello = message(key, Wire.KIND_HELLO);
        byte[] signed = Arrays.copyOf(hello.array(), Wire.HS_SIGNED);
        assertArrayEquals(HmacSha256.mac(k, signed), Arrays.copyOfRange(hello.array(), Wire.HS_OFF_MAC,
            Wire.HANDSHAKE));
        assertEquals(Wire.HANDSHAKE, Wire.HS_OFF_MAC + HmacSha256.MAC_BYTES);
    }
}
