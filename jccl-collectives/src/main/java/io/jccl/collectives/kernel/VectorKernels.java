package io.jccl.collectives.kernel;

import io.jccl.collectives.DataType;
import io.jccl.collectives.ReduceOp;
import jdk.incubator.vector.ByteVector;
import jdk.incubator.vector.DoubleVector;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.IntVector;
import jdk.incubator.vector.LongVector;
import jdk.incubator.vector.ShortVector;
import jdk.incubator.vector.VectorMask;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorShape;
import jdk.incubator.vector.VectorSpecies;

import java.lang.foreign.MemorySegment;
import java.nio.ByteOrder;

/**
 * Vector API reductions (preferred species, 256-bit on AVX2). Loaded reflectively by {@link Kernels} so that this
 * class is never linked when {@code jdk.incubator.vector} is absent. Tails shorter than a vector use the scalar
 * loops, so results match {@link ScalarKernels} bit for bit. bfloat16 uses the int-pair trick: each 32-bit lane
 * holds two bf16 values that are widened with a shift and a mask, combined in float32 and rounded back to
 * nearest even. float16 is loaded as shorts and zero-extended to one element per int lane, converted branch-free
 * (half → float by a shift and a multiplication by 2^112, float → half with round-to-nearest-even by the method of
 * F. Giesen's float_to_half_fast3_rtne); a vector whose result holds a NaN is redone by the scalar loop.
 */
final class VectorKernels implements ReduceKernels {
    private static final ByteOrder NO = ByteOrder.nativeOrder();
    private static final VectorSpecies<Byte> BS = ByteVector.SPECIES_PREFERRED;
    private static final VectorSpecies<Integer> IS = IntVector.SPECIES_PREFERRED;
    /** Shorts of half the preferred width: one float16 per int lane of {@link #IS}. */
    private static final VectorSpecies<Short> HS =
        VectorSpecies.of(short.class, VectorShape.forBitSize(IS.vectorBitSize() / 2));
    private static final VectorSpecies<Long> LS = LongVector.SPECIES_PREFERRED;
    private static final VectorSpecies<Float> FS = FloatVector.SPECIES_PREFERRED;
    private static final VectorSpecies<Double> DS = DoubleVector.SPECIES_PREFERRED;

    private final ThreadLocal<ScalarKernels.Pair> pairs = ThreadLocal.withInitial(ScalarKernels.Pair::new);

    @Override
    public String name() {
        return "vector-" + FS.vectorBitSize();
    }

    @Override
    public void reduce(DataType type, ReduceOp op, MemorySegment a, long aOffset, MemorySegment b, long bOffset,
                       MemorySegment dst, long dstOffset, long count, int divisor) {
        if (type == DataType.FLOAT32 && !(op == ReduceOp.AVG && divisor > 1)) {
            // Straight to the two-source loop: no array of sources, whose element stores the JIT guards by type
            // (jccl tests' 64 KiB rows trapped out of Engine.pairAllReduce on such a guard, array_check).
            ScalarKernels.check(2, count);
            long bound = count - count % FS.length();
            f32Pair(op, a, aOffset, b, bOffset, dst, dstOffset, bound);
            ScalarKernels.f32Pair(op, a, aOffset, b, bOffset, dst, dstOffset, bound, count);
            return;
        }
        ScalarKernels.Pair p = pairs.get();
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
        ScalarKernels.check(n, count);
        if (count == 0) {
            return;
        }
        switch (type) {
            case INT8 -> i8(op, s, o, n, d, dOff, count, divisor, false);
            case UINT8 -> i8(op, s, o, n, d, dOff, count, divisor, true);
            case INT32 -> i32(op, s, o, n, d, dOff, count, divisor);
            case INT64 -> i64(op, s, o, n, d, dOff, count, divisor);
            case FLOAT16 -> f16(op, s, o, n, d, dOff, count, divisor);
            case BFLOAT16 -> bf16(op, s, o, n, d, dOff, count, divisor);
            case FLOAT32 -> f32(op, s, o, n, d, dOff, count, divisor);
            case FLOAT64 -> f64(op, s, o, n, d, dOff, count, divisor);
        }
    }

    @Override
    public void divide(DataType type, MemorySegment seg, long off, long count, int divisor) {
        if (divisor <= 1 || count == 0) {
            return;
        }
        switch (type) {
            case FLOAT32 -> {
                int lanes = FS.length();
                long bound = count - count % lanes;
                for (long i = 0; i < bound; i += lanes) {
                    FloatVector.fromMemorySegment(FS, seg, off + i * 4, NO).div(divisor)
                        .intoMemorySegment(seg, off + i * 4, NO);
                }
                ScalarKernels.divideRange(type, seg, off, bound, count, divisor);
            }
            case FLOAT64 -> {
                int lanes = DS.length();
                long bound = count - count % lanes;
                for (long i = 0; i < bound; i += lanes) {
                    DoubleVector.fromMemorySegment(DS, seg, off + i * 8, NO).div(divisor)
                        .intoMemorySegment(seg, off + i * 8, NO);
                }
                ScalarKernels.divideRange(type, seg, off, bound, count, divisor);
            }
            default -> ScalarKernels.divideRange(type, seg, off, 0, count, divisor);
        }
    }

    // ------------------------------------------------------------------------------------------------ combine

    private static FloatVector combine(ReduceOp op, FloatVector a, FloatVector b) {
        return switch (op) {
            case SUM, AVG -> a.add(b);
            case PROD -> a.mul(b);
            case MIN -> a.min(b);
            case MAX -> a.max(b);
        };
    }

    private static DoubleVector combine(ReduceOp op, DoubleVector a, DoubleVector b) {
        return switch (op) {
            case SUM, AVG -> a.add(b);
            case PROD -> a.mul(b);
            case MIN -> a.min(b);
            case MAX -> a.max(b);
        };
    }

    private static IntVector combine(ReduceOp op, IntVector a, IntVector b) {
        return switch (op) {
            case SUM, AVG -> a.add(b);
            case PROD -> a.mul(b);
            case MIN -> a.min(b);
            case MAX -> a.max(b);
        };
    }

    private static LongVector combine(ReduceOp op, LongVector a, LongVector b) {
        return switch (op) {
            case SUM, AVG -> a.add(b);
            case PROD -> a.mul(b);
            case MIN -> a.min(b);
            case MAX -> a.max(b);
        };
    }

    private static ByteVector combine(ReduceOp op, ByteVector a, ByteVector b, boolean unsigned) {
        return switch (op) {
            case SUM, AVG -> a.add(b);
            case PROD -> a.mul(b);
            case MIN -> unsigned ? a.lanewise(VectorOperators.UMIN, b) : a.min(b);
            case MAX -> unsigned ? a.lanewise(VectorOperators.UMAX, b) : a.max(b);
        };
    }

    // ------------------------------------------------------------------------------------------------ loops

    private static void f32(ReduceOp op, MemorySegment[] s, long[] o, int n, MemorySegment d, long dOff, long count,
                            int divisor) {
        boolean avg = op == ReduceOp.AVG && divisor > 1;
        int lanes = FS.length();
        long bound = count - count % lanes;
        if (n == 2 && !avg) {
            f32Pair(op, s[0], o[0], s[1], o[1], d, dOff, bound);
            ScalarKernels.f32(op, s, o, n, d, dOff, bound, count, divisor);
            return;
        }
        for (long i = 0; i < bound; i += lanes) {
            long b = i * 4;
            FloatVector acc = FloatVector.fromMemorySegment(FS, s[0], o[0] + b, NO);
            for (int j = 1; j < n; j++) {
                acc = combine(op, acc, FloatVector.fromMemorySegment(FS, s[j], o[j] + b, NO));
            }
            if (avg) {
                acc = acc.div(divisor);
            }
            acc.intoMemorySegment(d, dOff + b, NO);
        }
        ScalarKernels.f32(op, s, o, n, d, dOff, bound, count, divisor);
    }

    /**
     * Two sources (every all-reduce step of a ring, and the two-rank direct all-reduce), one loop per operation:
     * without the inner loop over sources and the operation switch in the loop body, C2 keeps both loads and the
     * store in registers and runs 1.4x faster (1 MiB: 110 vs 78 GB/s read+written; 16 MiB: 64 vs 48 GB/s, one
     * core of this machine). Same order of operands as the general loop, so the results are identical.
     */
    private static void f32Pair(ReduceOp op, MemorySegment a, long ao, MemorySegment b, long bo, MemorySegment d,
                                long dOff, long bound) {
        long step = FS.length() * 4L;
        long end = bound * 4;
        switch (op) {
            case SUM, AVG -> {
                for (long x = 0; x < end; x += step) {
                    FloatVector.fromMemorySegment(FS, a, ao + x, NO).add(FloatVector.fromMemorySegment(FS, b, bo + x,
                        NO)).intoMemorySegment(d, dOff + x, NO);
                }
            }
            case PROD -> {
                for (long x = 0; x < end; x += step) {
                    FloatVector.fromMemorySegment(FS, a, ao + x, NO).mul(FloatVector.fromMemorySegment(FS, b, bo + x,
                        NO)).intoMemorySegment(d, dOff + x, NO);
                }
            }
            case MIN -> {
                for (long x = 0; x < end; x += step) {
                    FloatVector.fromMemorySegment(FS, a, ao + x, NO).min(FloatVector.fromMemorySegment(FS, b, bo + x,
                        NO)).intoMemorySegment(d, dOff + x, NO);
                }
            }
            case MAX -> {
                for (long x = 0; x < end; x += step) {
                    FloatVector.fromMemorySegment(FS, a, ao + x, NO).max(FloatVector.fromMemorySegment(FS, b, bo + x,
                        NO)).intoMemorySegment(d, dOff + x, NO);
                }
            }
        }
    }

    private static void f64(ReduceOp op, MemorySegment[] s, long[] o, int n, MemorySegment d, long dOff, long count,
                            int divisor) {
        boolean avg = op == ReduceOp.AVG && divisor > 1;
        int lanes = DS.length();
        long bound = count - count % lanes;
        for (long i = 0; i < bound; i += lanes) {
            long b = i * 8;
            DoubleVector acc = DoubleVector.fromMemorySegment(DS, s[0], o[0] + b, NO);
            for (int j = 1; j < n; j++) {
                acc = combine(op, acc, DoubleVector.fromMemorySegment(DS, s[j], o[j] + b, NO));
            }
            if (avg) {
                acc = acc.div(divisor);
            }
            acc.intoMemorySegment(d, dOff + b, NO);
        }
        ScalarKernels.f64(op, s, o, n, d, dOff, bound, count, divisor);
    }

    private static void i32(ReduceOp op, MemorySegment[] s, long[] o, int n, MemorySegment d, long dOff, long count,
                            int divisor) {
        int lanes = IS.length();
        long bound = count - count % lanes;
        for (long i = 0; i < bound; i += lanes) {
            long b = i * 4;
            IntVector acc = IntVector.fromMemorySegment(IS, s[0], o[0] + b, NO);
            for (int j = 1; j < n; j++) {
                acc = combine(op, acc, IntVector.fromMemorySegment(IS, s[j], o[j] + b, NO));
            }
            acc.intoMemorySegment(d, dOff + b, NO);
        }
        if (op == ReduceOp.AVG) {
            ScalarKernels.divideRange(DataType.INT32, d, dOff, 0, bound, divisor);
        }
        ScalarKernels.i32(op, s, o, n, d, dOff, bound, count, divisor);
    }

    private static void i64(ReduceOp op, MemorySegment[] s, long[] o, int n, MemorySegment d, long dOff, long count,
                            int divisor) {
        int lanes = LS.length();
        long bound = count - count % lanes;
        for (long i = 0; i < bound; i += lanes) {
            long b = i * 8;
            LongVector acc = LongVector.fromMemorySegment(LS, s[0], o[0] + b, NO);
            for (int j = 1; j < n; j++) {
                acc = combine(op, acc, LongVector.fromMemorySegment(LS, s[j], o[j] + b, NO));
            }
            acc.intoMemorySegment(d, dOff + b, NO);
        }
        if (op == ReduceOp.AVG) {
            ScalarKernels.divideRange(DataType.INT64, d, dOff, 0, bound, divisor);
        }
        ScalarKernels.i64(op, s, o, n, d, dOff, bound, count, divisor);
    }

    private static void i8(ReduceOp op, MemorySegment[] s, long[] o, int n, MemorySegment d, long dOff, long count,
                           int divisor, boolean unsigned) {
        int lanes = BS.length();
        long bound = count - count % lanes;
        for (long i = 0; i < bound; i += lanes) {
            ByteVector acc = ByteVector.fromMemorySegment(BS, s[0], o[0] + i, NO);
            for (int j = 1; j < n; j++) {
                acc = combine(op, acc, ByteVector.fromMemorySegment(BS, s[j], o[j] + i, NO), unsigned);
            }
            acc.intoMemorySegment(d, dOff + i, NO);
        }
        if (op == ReduceOp.AVG) {
            ScalarKernels.divideRange(unsigned ? DataType.UINT8 : DataType.INT8, d, dOff, 0, bound, divisor);
        }
        ScalarKernels.i8(op, s, o, n, d, dOff, bound, count, divisor, unsigned);
    }

    /**
     * float16: each 32-bit lane holds one element (loaded as shorts and zero-extended, stored back narrowed), converted
     * branch-free. Combining starts from the operator's identity (exact for every non-NaN x: -0 + x, 1 * x,
     * min(+inf, x), max(-inf, x)) so that each conversion appears once in the loop: the loop body must stay under
     * C2's node-count inlining cutoff, past which the conversions are not inlined and every vector is boxed (seen:
     * ~5 GB/s and constant GCs). A block whose result holds a NaN is redone by the scalar loop, so NaN lanes come out
     * exactly as with the scalar kernels.
     */
    private static void f16(ReduceOp op, MemorySegment[] s, long[] o, int n, MemorySegment d, long dOff, long count,
                            int divisor) {
        boolean avg = op == ReduceOp.AVG && divisor > 1;
        int lanes = IS.length();
        long bound = count - count % lanes;
        FloatVector identity = FloatVector.broadcast(FS, switch (op) {
            case SUM, AVG -> -0.0f;
            case PROD -> 1.0f;
            case MIN -> Float.POSITIVE_INFINITY;
            case MAX -> Float.NEGATIVE_INFINITY;
        });
        for (long i = 0; i < bound; i += lanes) {
            long b = i * 2;
            FloatVector acc = identity;
            for (int j = 0; j < n; j++) {
                IntVector h = (IntVector) ShortVector.fromMemorySegment(HS, s[j], o[j] + b, NO)
                    .convertShape(VectorOperators.ZERO_EXTEND_S2I, IS, 0);
                acc = combine(op, acc, halfToFloat(h.lanewise(VectorOperators.LSHL, 16)));
            }
            if (avg) {
                acc = acc.div(divisor);
            }
            if (acc.compare(VectorOperators.NE, acc).anyTrue()) {
                ScalarKernels.f16(op, s, o, n, d, dOff, i, i + lanes, divisor);
                continue;
            }
            floatToHalf(acc).convertShape(VectorOperators.I2S, HS, 0).intoMemorySegment(d, dOff + b, NO);
        }
        ScalarKernels.f16(op, s, o, n, d, dOff, bound, count, divisor);
    }

    private static final int F16_MAX = (127 + 16) << 23; // 65536.0f: at or above rounds to infinity
    private static final int F16_DENORM_MAGIC = ((127 - 15) + (23 - 10) + 1) << 23; // 0.5f
    private static final float F16_DENORM_MAGIC_F = Float.intBitsToFloat(F16_DENORM_MAGIC);

    /**
     * float16 bits in the upper 16 bits of each lane (lower 16 bits zero) → float32, exactly as
     * {@link Float#float16ToFloat} (NaN keeps sign and payload). The half's exponent and significand are moved to the
     * bottom of the float's and the result multiplied by 2^112 (exact, subnormals included); Inf/NaN get the
     * all-ones exponent.
     */
    static FloatVector halfToFloat(IntVector v) {
        FloatVector f = v.lanewise(VectorOperators.ASHR, 3).and(0x8FFFE000).reinterpretAsFloats().mul(0x1p112f);
        return f.reinterpretAsInts().blend(f.reinterpretAsInts().or(0x7F800000),
            v.and(0x7C000000).compare(VectorOperators.EQ, 0x7C000000)).reinterpretAsFloats();
    }

    /**
     * float32 → float16 bits in the low 16 bits of each lane (upper bits zero), as {@link Float#floatToFloat16}:
     * round to nearest even, overflow to infinity, subnormals rounded once (method of F. Giesen's
     * float_to_half_fast3_rtne). NaN lanes give an infinity: callers must not use them.
     */
    static IntVector floatToHalf(FloatVector v) {
        IntVector bits = v.reinterpretAsInts();
        IntVector f = bits.and(0x7FFFFFFF);
        // normal range: rebias, add 0xfff + the odd bit, shift (a carry into the exponent rounds up correctly)
        IntVector normal = f.add(((15 - 127) << 23) + 0xFFF).add(f.lanewise(VectorOperators.LSHR, 13).and(1))
            .lanewise(VectorOperators.LSHR, 13);
        // subnormal range: the float adder rounds at the half subnormal ulp (2^-24, the ulp of 0.5f)
        IntVector sub = v.abs().add(F16_DENORM_MAGIC_F).reinterpretAsInts().sub(F16_DENORM_MAGIC);
        IntVector r = normal.blend(sub, f.compare(VectorOperators.LT, 113 << 23))
            .blend(0x7C00, f.compare(VectorOperators.GE, F16_MAX));
        return r.or(bits.lanewise(VectorOperators.LSHR, 16).and(0x8000));
    }

    /** bfloat16 with the int-pair trick: 2 elements per 32-bit lane. */
    private static void bf16(ReduceOp op, MemorySegment[] s, long[] o, int n, MemorySegment d, long dOff, long count,
                             int divisor) {
        boolean avg = op == ReduceOp.AVG && divisor > 1;
        int perVector = IS.length() * 2;
        long bound = count - count % perVector;
        for (long i = 0; i < bound; i += perVector) {
            long b = i * 2;
            IntVector x = IntVector.fromMemorySegment(IS, s[0], o[0] + b, NO);
            FloatVector lo = x.lanewise(VectorOperators.LSHL, 16).reinterpretAsFloats();
            FloatVector hi = x.and(0xFFFF0000).reinterpretAsFloats();
            for (int j = 1; j < n; j++) {
                IntVector y = IntVector.fromMemorySegment(IS, s[j], o[j] + b, NO);
                lo = combine(op, lo, y.lanewise(VectorOperators.LSHL, 16).reinterpretAsFloats());
                hi = combine(op, hi, y.and(0xFFFF0000).reinterpretAsFloats());
            }
            if (avg) {
                lo = lo.div(divisor);
                hi = hi.div(divisor);
            }
            IntVector packed = round(lo).or(round(hi).lanewise(VectorOperators.LSHL, 16));
            packed.intoMemorySegment(d, dOff + b, NO);
        }
        ScalarKernels.bf16(op, s, o, n, d, dOff, bound, count, divisor);
    }

    /** float32 lanes → bf16 bits in the low 16 bits of each lane, nearest even, NaN kept quiet. */
    private static IntVector round(FloatVector v) {
        IntVector bits = v.reinterpretAsInts();
        IntVector high = bits.lanewise(VectorOperators.LSHR, 16);
        IntVector rounded = bits.add(0x7FFF).add(high.and(1)).lanewise(VectorOperators.LSHR, 16);
        VectorMask<Integer> nan = bits.and(0x7FFFFFFF).compare(VectorOperators.GT, 0x7F800000);
        return rounded.blend(high.or(0x0040), nan);
    }
}
