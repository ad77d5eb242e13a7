package io.jccl.transport.roce.wire;

/**
 * Packet sequence numbers: 24 bits that wrap from {@code 0xFFFFFF} to 0. Comparisons are modulo 2^24 the way rxe's
 * {@code psn_compare} does them: {@code a} is before {@code b} when {@code (a - b)} shifted into the top 24 bits of
 * an int is negative, so the window either side of a PSN is 2^23 packets.
 */
public final class Psn {
    /** Mask of the 24 PSN bits. */
    public static final int MASK = 0xFF_FFFF;

    private Psn() {
    }

    /** {@code psn + count} modulo 2^24 ({@code count} may be negative). */
    public static int add(int psn, int count) {
        return (psn + count) & MASK;
    }

    /** The PSN after {@code psn}. */
    public static int next(int psn) {
        return (psn + 1) & MASK;
    }

    /** Negative when {@code a} is before {@code b}, 0 when equal, positive when after (modulo 2^24). */
    public static int compare(int a, int b) {
        return (a - b) << 8;
    }

    /** How many PSNs from {@code from} forward to {@code to} (0 .. 2^24 - 1). */
    public static int distance(int from, int to) {
        return (to - from) & MASK;
    }

    /** Checks that {@code psn} fits 24 bits. */
    public static int checked(int psn) {
        if ((psn & ~MASK) != 0) {
            throw new IllegalArgumentException("PSN " + psn + " outside 0..0xFFFFFF");
        }
        return psn;
    }
}
