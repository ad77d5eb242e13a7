package io.jccl.transport.tcp;

import java.nio.ByteBuffer;
import java.util.Arrays;

/**
 * HMAC-SHA256 (RFC 2104 over FIPS 180-4 SHA-256) for the connection handshake, in plain Java.
 *
 * <p>Why not {@code javax.crypto.Mac}: its first use in a process loads and verifies the SunJCE provider, measured
 * at 45–106 ms (median ~56 ms) in a JVM that already has a tcp context open, paid by the first connection of every
 * process; {@code MessageDigest.getInstance("SHA-256")} still costs 13–59 ms (median ~16 ms) for the provider
 * framework. This class costs 0.2–4 ms (median ~0.7 ms) on first use, mostly class loading and interpretation
 * (docs/transport-tcp.md, "Connection establishment and security"). It is checked against
 * {@code javax.crypto.Mac} and {@code MessageDigest} with the RFC 4231 and FIPS 180 vectors and random inputs
 * ({@code HmacSha256Test}). Secrets only flow through additions, rotations and logic operations (no table lookups
 * indexed by secret data, no data-dependent branches), like the JDK's own Java implementation.
 *
 * <p>Use: {@link #init} with a key, then per message {@code update…} and {@link #finish}; a message starts over
 * after {@code finish}. Not thread-safe: one instance per connection, used under the QP's lock.
 */
final class HmacSha256 {
    /** Bytes of a MAC. */
    static final int MAC_BYTES = 32;
    private static final int BLOCK = 64;
    private static final int[] ROUND = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
    private static final int[] INITIAL = {
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

    private final int[] state = new int[8];
    private final int[] schedule = new int[64];
    private final byte[] block = new byte[BLOCK];
    private int blockFill;
    private long totalBytes;
    /** SHA-256 state after the key XOR ipad block, and after the key XOR opad block. */
    private final int[] innerStart = new int[8];
    private final int[] outerStart = new int[8];
    private final byte[] innerDigest = new byte[MAC_BYTES];
    private boolean keyed;

    /** Keys the MAC (RFC 2104: a key longer than the 64-byte block is hashed first) and starts a message. */
    HmacSha256 init(byte[] key) {
        byte[] k = key.length > BLOCK ? sha256(key) : key;
        byte[] pad = new byte[BLOCK];
        for (int i = 0; i < BLOCK; i++) {
            pad[i] = (byte) ((i < k.length ? k[i] : 0) ^ 0x36);
        }
        System.arraycopy(INITIAL, 0, state, 0, 8);
        compress(pad, 0);
        System.arraycopy(state, 0, innerStart, 0, 8);
        for (int i = 0; i < BLOCK; i++) {
            pad[i] = (byte) ((i < k.length ? k[i] : 0) ^ 0x5c);
        }
        System.arraycopy(INITIAL, 0, state, 0, 8);
        compress(pad, 0);
        System.arraycopy(state, 0, outerStart, 0, 8);
        Arrays.fill(pad, (byte) 0);
        keyed = true;
        begin();
        return this;
    }

    /** Forgets the key (the precomputed pad states). */
    void clear() {
        Arrays.fill(innerStart, 0);
        Arrays.fill(outerStart, 0);
        Arrays.fill(state, 0);
        Arrays.fill(schedule, 0);
        Arrays.fill(block, (byte) 0);
        Arrays.fill(innerDigest, (byte) 0);
        keyed = false;
    }

    /** Starts a new message under the current key (what {@link #finish} does too). */
    HmacSha256 begin() {
        if (!keyed) {
            throw new IllegalStateException("HMAC without a key");
        }
        System.arraycopy(innerStart, 0, state, 0, 8);
        blockFill = 0;
        totalBytes = BLOCK;
        return this;
    }

    HmacSha256 update(byte b) {
        block[blockFill++] = b;
        totalBytes++;
        if (blockFill == BLOCK) {
            compress(block, 0);
            blockFill = 0;
        }
        return this;
    }

    HmacSha256 update(byte[] bytes, int offset, int length) {
        for (int i = 0; i < length; i++) {
            update(bytes[offset + i]);
        }
        return this;
    }

    /** Absolute: the buffer's position and limit are left alone. */
    HmacSha256 update(ByteBuffer buffer, int offset, int length) {
        for (int i = 0; i < length; i++) {
            update(buffer.get(offset + i));
        }
        return this;
    }

    /** Four bytes, big-endian. */
    HmacSha256 updateInt(int value) {
        return update((byte) (value >>> 24)).update((byte) (value >>> 16)).update((byte) (value >>> 8))
            .update((byte) value);
    }

    /** Eight bytes, big-endian. */
    HmacSha256 updateLong(long value) {
        return updateInt((int) (value >>> 32)).updateInt((int) value);
    }

    /** Writes the MAC of the message so far at {@code out[offset..offset+32)} and starts a new message. */
    void finish(byte[] out, int offset) {
        finishHash(innerDigest, 0);
        System.arraycopy(outerStart, 0, state, 0, 8);
        blockFill = 0;
        totalBytes = BLOCK;
        update(innerDigest, 0, MAC_BYTES);
        finishHash(out, offset);
        begin();
    }

    /** SHA-256 of {@code message} (RFC 2104 key shortening; tests). */
    static byte[] sha256(byte[] message) {
        HmacSha256 h = new HmacSha256();
        System.arraycopy(INITIAL, 0, h.state, 0, 8);
        h.update(message, 0, message.length);
        byte[] out = new byte[MAC_BYTES];
        h.finishHash(out, 0);
        return out;
    }

    /** HMAC-SHA256 of the concatenated {@code parts} under {@code key} (one-shot). */
    static byte[] mac(byte[] key, byte[]... parts) {
        HmacSha256 h = new HmacSha256().init(key);
        for (byte[] part : parts) {
            h.update(part, 0, part.length);
        }
        byte[] out = new byte[MAC_BYTES];
        h.finish(out, 0);
        return out;
    }

    /** FIPS 180-4 padding: 0x80, zeros up to 56 mod 64, the message length in bits (big-endian). */
    private void finishHash(byte[] out, int offset) {
        long bits = totalBytes * 8;
        update((byte) 0x80);
        while (blockFill != 56) {
            update((byte) 0);
        }
        for (int i = 7; i >= 0; i--) {
            update((byte) (bits >>> (8 * i)));
        }
        for (int i = 0; i < 8; i++) {
            int v = state[i];
            out[offset + 4 * i] = (byte) (v >>> 24);
            out[offset + 4 * i + 1] = (byte) (v >>> 16);
            out[offset + 4 * i + 2] = (byte) (v >>> 8);
            out[offset + 4 * i + 3] = (byte) v;
        }
    }

    private void compress(byte[] in, int offset) {
        int[] w = schedule;
        for (int t = 0; t < 16; t++) {
            int o = offset + 4 * t;
            w[t] = (in[o] & 0xFF) << 24 | (in[o + 1] & 0xFF) << 16 | (in[o + 2] & 0xFF) << 8 | (in[o + 3] & 0xFF);
        }
        for (int t = 16; t < 64; t++) {
            int x = w[t - 15];
            int y = w[t - 2];
            int s0 = Integer.rotateRight(x, 7) ^ Integer.rotateRight(x, 18) ^ (x >>> 3);
            int s1 = Integer.rotateRight(y, 17) ^ Integer.rotateRight(y, 19) ^ (y >>> 10);
            w[t] = w[t - 16] + s0 + w[t - 7] + s1;
        }
        int a = state[0];
        int b = state[1];
        int c = state[2];
        int d = state[3];
        int e = state[4];
        int f = state[5];
        int g = state[6];
        int h = state[7];
        for (int t = 0; t < 64; t++) {
            int t1 = h + (Integer.rotateRight(e, 6) ^ Integer.rotateRight(e, 11) ^ Integer.rotateRight(e, 25))
                + ((e & f) ^ (~e & g)) + ROUND[t] + w[t];
            int t2 = (Integer.rotateRight(a, 2) ^ Integer.rotateRight(a, 13) ^ Integer.rotateRight(a, 22))
                + ((a & b) ^ (a & c) ^ (b & c));
            h = g;
            g = f;
            f = e;
            e = d + t1;
            d = c;
            c = b;
            b = a;
            a = t1 + t2;
        }
        state[0] += a;
        state[1] += b;
        state[2] += c;
        state[3] += d;
        state[4] += e;
        state[5] += f;
        state[6] += g;
        state[7] += h;
    }
}
