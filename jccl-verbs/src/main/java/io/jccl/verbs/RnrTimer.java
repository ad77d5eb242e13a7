package io.jccl.verbs;

/** The RNR NAK timer table of the InfiniBand specification (as rxe's {@code rnrnak_usec}). */
public final class RnrTimer {
    private static final long[] NANOS = {
        655_360_000L, 10_000L, 20_000L, 30_000L, 40_000L, 60_000L, 80_000L, 120_000L,
        160_000L, 240_000L, 320_000L, 480_000L, 640_000L, 960_000L, 1_280_000L, 1_920_000L,
        2_560_000L, 3_840_000L, 5_120_000L, 7_680_000L, 10_240_000L, 15_360_000L, 20_480_000L, 30_720_000L,
        40_960_000L, 61_440_000L, 81_920_000L, 122_880_000L, 163_840_000L, 245_760_000L, 327_680_000L,
        491_520_000L
    };

    private RnrTimer() {
    }

    /** The delay, in nanoseconds, that RNR timer code {@code code} (0..31) stands for. */
    public static long delayNs(int code) {
        return NANOS[code & 31];
    }

    /** The local ACK timeout, in nanoseconds, for timeout code {@code code}: 4.096 µs × 2^code; 0 means none. */
    public static long ackTimeoutNs(int code) {
        return code == 0 ? 0 : 4096L << Math.min(code, 31);
    }
}
