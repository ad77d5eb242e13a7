package io.jccl.collectives.core;

import java.lang.foreign.MemorySegment;

/**
 * How a vector of {@code count} elements splits into {@code n} blocks (the first {@code count % n} blocks one
 * element longer), and how two buffers relate: what ring, halving-doubling and direct algorithms all compute the
 * same way on every rank.
 */
public final class Blocks {
    private Blocks() {
    }

    /** First element of block {@code b}. */
    public static long start(long count, int n, int b) {
        return b * (count / n) + Math.min(b, count % n);
    }

    /** Elements of block {@code b}. */
    public static long count(long count, int n, int b) {
        return count / n + (b < count % n ? 1 : 0);
    }

    /**
     * Whether {@code bytes} at the start of {@code a} and of {@code b} share no byte (heap segments: whether they
     * are not views of the same array).
     */
    public static boolean disjoint(MemorySegment a, MemorySegment b, long bytes) {
        if (!a.isNative() || !b.isNative()) {
            return a.heapBase().isEmpty() || !a.heapBase().equals(b.heapBase());
        }
        return a.address() + bytes <= b.address() || b.address() + bytes <= a.address();
    }

    /** Whether {@code a} and {@code b} are the same buffer (an in-place call). */
    public static boolean same(MemorySegment a, MemorySegment b) {
        return a == b || a.equals(b) || (a.isNative() && b.isNative() && a.address() == b.address());
    }
}
