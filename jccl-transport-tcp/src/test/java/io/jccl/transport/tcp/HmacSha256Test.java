package io.jccl.transport.tcp;

import org.junit.jupiter.api.Test;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;

/**
 * Known answers for the handshake's HMAC-SHA256: FIPS 180 SHA-256 examples, the RFC 4231 HMAC-SHA-256 test cases
 * (each also against {@code javax.crypto.Mac}), and random keys and messages of every length around the block
 * boundaries against {@code javax.crypto.Mac} and {@code MessageDigest}, fed whole, byte by byte and from a
 * {@link ByteBuffer}.
 */
class HmacSha256Test {
    private static final HexFormat HEX = HexFormat.of();

    private static byte[] repeat(int value, int count) {
        byte[] b = new byte[count];
        Arrays.fill(b, (byte) value);
        return b;
    }

    private static byte[] ascii(String s) {
        return s.getBytes(StandardCharsets.US_ASCII);
    }

    private static byte[] jdkMac(byte[] key, byte[] message) throws Exception {
        Mac mac = Mac.getInstance("HmacSHA256");
        // SecretKeySpec refuses an empty key; HMAC pads keys with zeros, so one zero byte is the same key.
        mac.init(new SecretKeySpec(key.length == 0 ? new byte[1] : key, "HmacSHA256"));
        return mac.doFinal(message);
    }

    @Test
    void shouldHashTheFips180Examples() throws Exception {
        assertEquals("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            HEX.formatHex(HmacSha256.sha256(new byte[0])));
        assertEquals("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            HEX.formatHex(HmacSha256.sha256(ascii("abc"))));
        assertEquals("248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
            HEX.formatHex(HmacSha256.sha256(ascii("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))));
        byte[] million = repeat('a', 1_000_000);
        assertEquals("cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0",
            HEX.formatHex(HmacSha256.sha256(million)));
        assertArrayEquals(MessageDigest.getInstance("SHA-256").digest(million), HmacSha256.sha256(million));
    }

    @Test
    void shouldMatchRfc4231() throws Exception {
        Object[][] cases = {
            {repeat(0x0b, 20), ascii("Hi There"),
                "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
            {ascii("Jefe"), ascii("what do ya want for nothing?"),
                "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
            {repeat(0xaa, 20), repeat(0xdd, 50),
                "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
            {HEX.parseHex("0102030405060708090a0b0c0d0e0f10111213141516171819"), repeat(0xcd, 50),
                "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
            {repeat(0x0c, 20), ascii("Test With Truncation"), "a3b6167473100ee06e0c796c2955552b"}, // 128 bits
            {repeat(0xaa, 131), ascii("Test Using Larger Than Block-Size Key - Hash Key First"),
                "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
            {repeat(0xaa, 131), ascii("This is a test using a larger than block-size key and a larger than "
                + "block-size data. The key needs to be hashed before being used by the HMAC algorithm."),
                "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
        };
        for (Object[] c : cases) {
            byte[] key = (byte[]) c[0];
            byte[] message = (byte[]) c[1];
            String expected = (String) c[2];
            String ours = HEX.formatHex(HmacSha256.mac(key, message));
            assertEquals(expected, ours.substring(0, expected.length()));
            assertEquals(HEX.formatHex(jdkMac(key, message)), ours);
        }
    }

    @Test
    void shouldMatchTheJdkOnRandomInputs() throws Exception {
        Random random = new Random(2104);
        HmacSha256 reused = new HmacSha256();
        MessageDigest sha = MessageDigest.getInstance("SHA-256");
        for (int keyLength : new int[] {0, 1, 16, 31, 32, 33, 63, 64, 65, 127, 128, 200}) {
            byte[] key = new byte[keyLength];
            random.nextBytes(key);
            reused.init(key);
            for (int length = 0; length <= 300; length++) {
                byte[] message = new byte[length];
                random.nextBytes(message);
                byte[] expected = jdkMac(key, message);
                assertArrayEquals(expected, HmacSha256.mac(key, message), "key " + keyLength + ", length " + length);
                // The same key again for a new message, fed in pieces: a byte, a ByteBuffer slice, an array slice.
                byte[] out = new byte[HmacSha256.MAC_BYTES + 3];
                int first = Math.min(1, length);
                int split = Math.max(first, length / 2);
                if (first == 1) {
                    reused.update(message[0]);
                }
                ByteBuffer buffer = ByteBuffer.allocateDirect(length + 5);
                buffer.put(5, message, 0, length);
                reused.update(buffer, 5 + first, split - first);
                reused.update(message, split, length - split);
                reused.finish(out, 3);
                assertArrayEquals(expected, Arrays.copyOfRange(out, 3, out.length), "pieces " + length);
                if (keyLength == 0) {
                    assertArrayEquals(sha.digest(message), HmacSha256.sha256(message), "sha256 " + length);
                }
            }
        }
    }

    @Test
    void shouldFeedIntegersBigEndianAndStartOverAfterFinish() {
        byte[] key = ascii("k");
        HmacSha256 h = new HmacSha256().init(key);
        byte[] a = new byte[HmacSha256.MAC_BYTES];
        h.updateInt(0x01020304).updateLong(0x05060708090A0B0CL).finish(a, 0);
        assertArrayEquals(HmacSha256.mac(key, HEX.parseHex("0102030405060708090a0b0c")), a);
        byte[] again = new byte[HmacSha256.MAC_BYTES];
        h.updateInt(0x01020304).updateLong(0x05060708090A0B0CL).finish(again, 0);
        assertArrayEquals(a, again);
        h.init(ascii("other key"));
        h.updateInt(0x01020304).updateLong(0x05060708090A0B0CL).finish(again, 0);
        assertNotEquals(HEX.formatHex(a), HEX.formatHex(again));
    }
}
