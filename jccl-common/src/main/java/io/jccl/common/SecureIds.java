package io.jccl.common;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.util.Arrays;

/**
 * Unpredictable keys, QP numbers and PSNs. ReDMArk (USENIX Security '21) showed that sequential or
 * weakly-seeded rkeys, QPNs and PSNs let an attacker inject packets or guess keys; everything here comes from a
 * CSPRNG, so knowing one value says nothing about the next.
 *
 * <p>The source is the kernel's CSPRNG, {@code /dev/urandom}, read 512 bytes at a time (never blocks once the
 * kernel pool is initialised at boot). Creating a {@link SecureRandom} instead costs ~20 ms at start-up (the
 * security provider framework and its seeding); it is only the fallback where {@code /dev/urandom} cannot be read.
 */
public final class SecureIds {
    private static final Path URANDOM = Path.of("/dev/urandom");
    private static final byte[] POOL = new byte[512];
    /** Next unread byte of {@link #POOL}; {@code POOL.length} means empty. Guarded by the class lock. */
    private static int next = POOL.length;
    private static InputStream source;
    private static SecureRandom fallback;

    private SecureIds() {
    }

    /** A random non-zero 32-bit key. */
    public static int key() {
        int key;
        do {
            key = nextInt();
        } while (key == 0);
        return key;
    }

    /** A random 24-bit QP number above 1 (0 and 1 are special QPs in InfiniBand). */
    public static int queuePairNumber() {
        int qpn;
        do {
            qpn = nextInt() & 0xFFFFFF;
        } while (qpn <= 1);
        return qpn;
    }

    /** A random 24-bit PSN. */
    public static int packetSequenceNumber() {
        return nextInt() & 0xFFFFFF;
    }

    /** A random 64-bit value (connection secrets, nonces). */
    public static long nonce() {
        byte[] b = bytes(8);
        long v = 0;
        for (byte x : b) {
            v = (v << 8) | (x & 0xFF);
        }
        return v;
    }

    /** Random bytes. */
    public static byte[] bytes(int n) {
        byte[] out = new byte[n];
        fill(out);
        return out;
    }

    private static int nextInt() {
        byte[] b = bytes(4);
        return (b[0] & 0xFF) << 24 | (b[1] & 0xFF) << 16 | (b[2] & 0xFF) << 8 | (b[3] & 0xFF);
    }

    private static synchronized void fill(byte[] out) {
        if (fallback != null) {
            fallback.nextBytes(out);
            return;
        }
        int done = 0;
        while (done < out.length) {
            if (next == POOL.length && !refill()) {
                SecureRandom random = new SecureRandom();
                fallback = random;
                byte[] rest = new byte[out.length - done];
                random.nextBytes(rest);
                System.arraycopy(rest, 0, out, done, rest.length);
                return;
            }
            int n = Math.min(out.length - done, POOL.length - next);
            System.arraycopy(POOL, next, out, done, n);
            // Used bytes are wiped so a later heap dump does not show values already handed out.
            Arrays.fill(POOL, next, next + n, (byte) 0);
            next += n;
            done += n;
        }
    }

    /** Refills the pool from /dev/urandom; false when it cannot be read (then SecureRandom takes over). */
    private static boolean refill() {
        try {
            if (source == null) {
                source = Files.newInputStream(URANDOM);
            }
            int off = 0;
            while (off < POOL.length) {
                int n = source.read(POOL, off, POOL.length - off);
                if (n < 0) {
                    throw new IOException("end of " + URANDOM);
                }
                off += n;
            }
            next = 0;
            return true;
        } catch (IOException | UnsupportedOperationException | SecurityException e) {
            return false;
        }
    }
}
