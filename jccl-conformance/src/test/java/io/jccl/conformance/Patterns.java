package io.jccl.conformance;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;

/**
 * Deterministic, position-dependent byte patterns, so large transfers can be checked without moving the data
 * between processes: byte {@code i} of a pattern is byte {@code i % 8} (little-endian) of
 * {@code splitmix64(seed + i / 8)}.
 */
public final class Patterns {
    private static final ValueLayout.OfLong LONG_LE =
        ValueLayout.JAVA_LONG_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    private Patterns() {
    }

    /** The SplitMix64 finalizer: a cheap, well-mixed function of its input. */
    static long mix(long z) {
        z = (z ^ (z >>> 30)) * 0xbf58476d1ce4e5b9L;
        z = (z ^ (z >>> 27)) * 0x94d049bb133111ebL;
        return z ^ (z >>> 31);
    }

    /** Byte {@code index} of pattern {@code seed}. */
    public static byte byteAt(long seed, long index) {
        return (byte) (mix(seed + (index >>> 3)) >>> ((index & 7) * 8));
    }

    /** Writes pattern {@code seed} into {@code length} bytes of {@code segment} at {@code offset}. */
    public static void fill(MemorySegment segment, long offset, long length, long seed) {
        long words = length >>> 3;
        for (long k = 0; k < words; k++) {
            segment.set(LONG_LE, offset + 8 * k, mix(seed + k));
        }
        for (long i = words * 8; i < length; i++) {
            segment.set(ValueLayout.JAVA_BYTE, offset + i, byteAt(seed, i));
        }
    }

    /** The first byte index where {@code segment} differs from pattern {@code seed}, or -1 when none does. */
    public static long firstMismatch(MemorySegment segment, long offset, long length, long seed) {
        long words = length >>> 3;
        for (long k = 0; k < words; k++) {
            if (segment.get(LONG_LE, offset + 8 * k) != mix(seed + k)) {
                for (long i = 8 * k; ; i++) {
                    if (segment.get(ValueLayout.JAVA_BYTE, offset + i) != byteAt(seed, i)) {
                        return i;
                    }
                }
            }
        }
        for (long i = words * 8; i < length; i++) {
            if (segment.get(ValueLayout.JAVA_BYTE, offset + i) != byteAt(seed, i)) {
                return i;
            }
        }
        return -1;
    }

    /** {@code length} bytes of pattern {@code seed} as an array. */
    public static byte[] bytes(long seed, int length) {
        byte[] out = new byte[length];
        for (int i = 0; i < length; i++) {
            out[i] = byteAt(seed, i);
        }
        return out;
    }
}
