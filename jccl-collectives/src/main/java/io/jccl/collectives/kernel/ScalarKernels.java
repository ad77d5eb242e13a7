package io.jccl.collectives.kernel;

import io.jccl.collectives.DataType;
import io.jccl.collectives.ReduceOp;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * Plain-loop reductions; the reference the vector kernels must match bit for bit, and the fallback when the
 * Vector API module is absent. The static range methods are also used for the vector kernels' tails.
 */
public final class ScalarKernels implements ReduceKernels {
    static final ValueLayout.OfByte I8 = ValueLayout.JAVA_BYTE;
    static final ValueLayout.OfShort I16 = ValueLayout.JAVA_SHORT_UNALIGNED;
    static final ValueLayout.OfInt I32 = ValueLayout.JAVA_INT_UNALIGNED;
    static final ValueLayout.OfLong I64 = ValueLayout.JAVA_LONG_UNALIGNED;
    static final ValueLayout.OfFloat F32 = ValueLayout.JAVA_FLOAT_UNALIGNED;
    static final ValueLayout.OfDouble F64 = ValueLayout.JAVA_DOUBLE_UNALIGNED;

    private final ThreadLocal<Pair> pairs = ThreadLocal.withInitial(Pair::new);

    /** Scratch arrays for the two-source form, one per thread. */
    static final class Pair {
        final MemorySegment[] segments = new MemorySegment[2];
        final long[] offsets = new long[2];
    }

    @Override
    public String name() {
        return "scalar";
    }

    @Override
    public void reduce(DataType type, ReduceOp op, MemorySegment a, long aOffset, MemorySegment b, long bOffset,
                       MemorySegment dst, long dstOffset, long count, int divisor) {
        Pair p = pairs.get();
        p.segments[0] = a;
        p.segments[1] = b;
        p.offsets[0] = aOffset;
        p.offsets[1] = bOffset;
        try {
            reduce(type, op, p.segments, p.offsets, 2, dst, dstOffset, count, divisor);
        } finally {
            p.segments[0] = null;
            p.segments[1] = null;
        }
    }

    @Override
    public void reduce(DataType type, ReduceOp op, MemorySegment[] s, long[] o, int n, MemorySegment d, long dOff,
                       long count, int divisor) {
        check(n, count);
        range(type, op, s, o, n, d, dOff, 0, count, divisor);
    }

    static void check(int n, long count) {
        if (n < 1) {
            throw new IllegalArgumentException("a reduction needs at least one source");
        }
        if (count < 0) {
            throw new IllegalArgumentException("negative element count " + count);
        }
    }

    /** Reduces elements [from, to). */
    static void range(DataType type, ReduceOp op, MemorySegment[] s, long[] o, int n, MemorySegment d, long dOff,
                      long from, long to, int divisor) {
        if (from >= to) {
            return;
        }
        switch (type) {
            case INT8 -> i8(op, s, o, n, d, dOff, from, to, divisor, false);
            case UINT8 -> i8(op, s, o, n, d, dOff, from, to, divisor, true);
            case INT32 -> i32(op, s, o, n, d, dOff, from, to, divisor);
            case INT64 -> i64(op, s, o, n, d, dOff, from, to, divisor);
            case FLOAT16 -> f16(op, s, o, n, d, dOff, from, to, divisor);
            case BFLOAT16 -> bf16(op, s, o, n, d, dOff, from, to, divisor);
            case FLOAT32 -> f32(op, s, o, n, d, dOff, from, to, divisor);
            case FLOAT64 -> f64(op, s, o, n, d, dOff, from, to, divisor);
        }
    }

    @Override
    public void divide(DataType type, MemorySegment seg, long off, long count, int divisor) {
        divideRange(type, seg, off, 0, count, divisor);
    }

    static void divideRange(DataType type, MemorySegment seg, long off, long from, long to, int divisor) {
        if (divisor <= 1) {
            return;
        }
        for (long i = from; i < to; i++) {
            switch (type) {
                case INT8 -> seg.set(I8, off + i, (byte) (seg.get(I8, off + i) / divisor));
                case UINT8 -> seg.set(I8, off + i, (byte) ((seg.get(I8, off + i) & 0xFF) / divisor));
                case INT32 -> seg.set(I32, off + i * 4, seg.get(I32, off + i * 4) / divisor);
                case INT64 -> seg.set(I64, off + i * 8, seg.get(I64, off + i * 8) / divisor);
                case FLOAT16 -> seg.set(I16, off + i * 2,
                    Float.floatToFloat16(Float.float16ToFloat(seg.get(I16, off + i * 2)) / divisor));
                case BFLOAT16 -> seg.set(I16, off + i * 2, toBf16(fromBf16(seg.get(I16, off + i * 2)) / divisor));
                case FLOAT32 -> seg.set(F32, off + i * 4, seg.get(F32, off + i * 4) / divisor);
                case FLOAT64 -> seg.set(F64, off + i * 8, seg.get(F64, off + i * 8) / divisor);
            }
        }
    }

    // ------------------------------------------------------------------------------------------------ bf16

    /** bfloat16 bits → float. */
    public static float fromBf16(short bits) {
        return Float.intBitsToFloat((bits & 0xFFFF) << 16);
    }

    /** float → bfloat16 bits, rounding to nearest even; NaN stays NaN (quiet). */
    public static short toBf16(float value) {
        int b = Float.floatToRawIntBits(value);
        if ((b & 0x7FFFFFFF) > 0x7F800000) {
            return (short) ((b >>> 16) | 0x0040);
        }
        return (short) ((b + 0x7FFF + ((b >>> 16) & 1)) >>> 16);
    }

    // ------------------------------------------------------------------------------------------------ combine

    static float combine(ReduceOp op, float a, float b) {
        return switch (op) {
            case SUM, AVG -> a + b;
            case PROD -> a * b;
            case MIN -> Math.min(a, b);
            case MAX -> Math.max(a, b);
        };
    }

    static double combine(ReduceOp op, double a, double b) {
        return switch (op) {
            case SUM, AVG -> a + b;
            case PROD -> a * b;
            case MIN -> Math.min(a, b);
            case MAX -> Math.max(a, b);
        };
    }

    static int combine(ReduceOp op, int a, int b) {
        return switch (op) {
            case SUM, AVG -> a + b;
            case PROD -> a * b;
            case MIN -> Math.min(a, b);
            case MAX -> Math.max(a, b);
        };
    }

    static long combine(ReduceOp op, long a, long b) {
        return switch (op) {
            case SUM, AVG -> a + b;
            case PROD -> a * b;
            case MIN -> Math.min(a, b);
            case MAX -> Math.max(a, b);
        };
    }

    // ------------------------------------------------------------------------------------------------ loops

    static void i8(ReduceOp op, MemorySegment[] s, long[] o, int n, MemorySegment d, long dOff, long from, long to,
                   int divisor, boolean unsigned) {
        boolean avg = op == ReduceOp.AVG && divisor > 1;
        for (long i = from; i < to; i++) {
            int acc = unsigned ? s[0].get(I8, o[0] + i) & 0xFF : s[0].get(I8, o[0] + i);
            for (int j = 1; j < n; j++) {
                int v = unsigned ? s[j].get(I8, o[j] + i) & 0xFF : s[j].get(I8, o[j] + i);
                acc = combine(op, acc, v);
                acc = unsigned ? acc & 0xFF : (byte) acc;
            }
            if (avg) {
                acc = acc / divisor;
            }
            d.set(I8, dOff + i, (byte) acc);
        }
    }

    static void i32(ReduceOp op, MemorySegment[] s, long[] o, int n, MemorySegment d, long dOff, long from, long to,
                    int divisor) {
        boolean avg = op == ReduceOp.AVG && divisor > 1;
        for (long i = from; i < to; i++) {
            long b = i * 4;
            int acc = s[0].get(I32, o[0] + b);
            for (int j = 1; j < n; j++) {
                acc = combine(op, acc, s[j].get(I32, o[j] + b));
            }
            d.set(I32, dOff + b, avg ? acc / divisor : acc);
        }
    }

    static void i64(ReduceOp op, MemorySegment[] s, long[] o, int n, MemorySegment d, long dOff, long from, long to,
                    int divisor) {
        boolean avg = op == ReduceOp.AVG && divisor > 1;
        for (long i = from; i < to; i++) {
            long b = i * 8;
            long acc = s[0].get(I64, o[0] + b);
            for (int j = 1; j < n; j++) {
                acc = combine(op, acc, s[j].get(I64, o[j] + b));
            }
            d.set(I64, dOff + b, avg ? acc / divisor : acc);
        }
    }

    static void f16(ReduceOp op, MemorySegment[] s, long[] o, int n, MemorySegment d, long dOff, long from, long to,
                    int divisor) {
        boolean avg = op == ReduceOp.AVG && divisor > 1;
        for (long i = from; i < to; i++) {
            long b = i * 2;
            float acc = Float.float16ToFloat(s[0].get(I16, o[0] + b));
            for (int j = 1; j < n; j++) {
                acc = combine(op, acc, Float.float16ToFloat(s[j].get(I16, o[j] + b)));
            }
            if (avg) {
                acc = acc / divisor;
            }
            d.set(I16, dOff + b, Float.floatToFloat16(acc));
        }
    }

    static void bf16(ReduceOp op, MemorySegment[] s, long[] o, int n, MemorySegment d, long dOff, long from, long to,
                     int divisor) {
        boolean avg = op == ReduceOp.AVG && divisor > 1;
        for (long i = from; i < to; i++) {
            long b = i * 2;
            float acc = fromBf16(s[0].get(I16, o[0] + b));
            for (int j = 1; j < n; j++) {
                acc = combine(op, acc, fromBf16(s[j].get(I16, o[j] + b)));
            }
            if (avg) {
                acc = acc / divisor;
            }
            d.set(I16, dOff + b, toBf16(acc));
        }
    }

    static void f32(ReduceOp op, MemorySegment[] s, long[] o, int n, MemorySegment d, long dOff, long from, long to,
                    int divisor) {
        boolean avg = op == ReduceOp.AVG && divisor > 1;
        for (long i = from; i < to; i++) {
            long b = i * 4;
            float acc = s[0].get(F32, o[0] + b);
            for (int j = 1; j < n; j++) {
                acc = combine(op, acc, s[j].get(F32, o[j] + b));
            }
            d.set(F32, dOff + b, avg ? acc / divisor : acc);
        }
    }

    /** Two sources, elements {@code from} until {@code to}: {@code d = a op b} (no array of sources). */
    static void f32Pair(ReduceOp op, MemorySegment a, long aOff, MemorySegment b, long bOff, MemorySegment d,
                        long dOff, long from, long to) {
        for (long i = from; i < to; i++) {
            long x = i * 4;
            d.set(F32, dOff + x, combine(op, a.get(F32, aOff + x), b.get(F32, bOff + x)));
        }
    }

    static void f64(ReduceOp op, MemorySegment[] s, long[] o, int n, MemorySegment d, long dOff, long from, long to,
                    int divisor) {
        boolean avg = op == ReduceOp.AVG && divisor > 1;
        for (long i = from; i < to; i++) {
            long b = i * 8;
            double acc = s[0].get(F64, o[0] + b);
            for (int j = 1; j < n; j++) {
                acc = combine(op, acc, s[j].get(F64, o[j] + b));
            }
            d.set(F64, dOff + b, avg ? acc / divisor : acc);
        }
    }
}
