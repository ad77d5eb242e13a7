package io.jccl.verbs.spi;

import java.security.SecureRandom;

/**
 * Unpredictable keys, QP numbers and PSNs. ReDMArk (USENIX Security '21) showed that sequential or
 * weakly-seeded rkeys, QPNs and PSNs let an attacker inject packets or guess keys; everything here comes from a
 * CSPRNG, so knowing one value says nothing about the next.
 */
public final class SecureIds {
    private static final SecureRandom RANDOM = new SecureRandom();

    private SecureIds() {
    }

    /** A random non-zero 32-bit key. */
    public static int key() {
        int key;
        do {
            key = RANDOM.nextInt();
        } while (key == 0);
        return key;
    }

    /** A random 24-bit QP number above 1 (0 and 1 are special QPs in InfiniBand). */
    public static int queuePairNumber() {
        int qpn;
        do {
            qpn = RANDOM.nextInt() & 0xFFFFFF;
        } while (qpn <= 1);
        return qpn;
    }

    /** A random 24-bit PSN. */
    public static int packetSequenceNumber() {
        return RANDOM.nextInt() & 0xFFFFFF;
    }

    /** A random 64-bit value (connection secrets, nonces). */
    public static long nonce() {
        return RANDOM.nextLong();
    }

    /** Random bytes. */
    public static byte[] bytes(int n) {
        byte[] bytes = new byte[n];
        RANDOM.nextBytes(bytes);
        return bytes;
    }
}
