package io.jccl.collectives.kernel;

import io.jccl.collectives.DataType;
import io.jccl.collectives.ReduceOp;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

public class KernelsTest {
    private static final int[] COUNTS = {0, 1, 2, 3, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 129, 1000, 4099};
    private static final int[] SOURCES = {1, 2, 3, 5, 8};

    @Test
    void vectorKernelsLoadWithTheModule() {
        assertNotNull(Kernels.vector(), "tests run with --add-modules jdk.incubator.vector");
        assertEquals(Kernels.vector(), Kernels.selected());
    }

    /** What get() hands out (chosen lazily) reduces exactly as the selected kernels do. */
    @Test
    void deferredKernelsForwardToTheSelection() {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment a = arena.allocate(4 * 100L, 64);
            MemorySegment b = arena.allocate(4 * 100L, 64);
            for (int i = 0; i < 100; i++) {
                a.setAtIndex(ValueLayout.JAVA_FLOAT, i, i);
                b.setAtIndex(ValueLayout.JAVA_FLOAT, i, 2 * i);
            }
            Kernels.get().reduce(DataType.FLOAT32, ReduceOp.SUM, a, 0, b, 0, b, 0, 100, 1);
            assertTrue(Kernels.isSelected());
            for (int i = 0; i < 100; i++) {
                assertEquals(3f * i, b.getAtIndex(ValueLayout.JAVA_FLOAT, i));
            }
            assertEquals(Kernels.selected().name(), Kernels.get().name());
        }
    }

    /** Vector kernels match the scalar reference bit for bit, for every type, op, count and source count. */
    @Test
    void vectorMatchesScalarExactly() {
        ReduceKernels vector = Kernels.vector();
        ReduceKernels scalar = Kernels.scalar();
        Random random = new Random(42);
        try (Arena arena = Arena.ofConfined()) {
            for (DataType type : DataType.values()) {
                for (ReduceOp op : ReduceOp.values()) {
                    for (int n : SOURCES) {
                        for (int count : COUNTS) {
                            long bytes = (long) count * type.sizeBytes();
                            MemorySegment[] src = new MemorySegment[n];
                            long[] off = new long[n];
                            for (int j = 0; j < n; j++) {
                                // odd offsets too: kernels must not assume alignment
                                off[j] = j % 2 == 0 ? 0 : 3;
                                src[j] = arena.allocate(bytes + off[j] + 8);
                                fillRandom(type, src[j], off[j], count, random, op == ReduceOp.PROD);
                            }
                            MemorySegment a = arena.allocate(bytes + 1);
                            MemorySegment b = arena.allocate(bytes + 1);
                            scalar.reduce(type, op, src, off, n, a, 1, count, n);
                            vector.reduce(type, op, src, off, n, b, 1, count, n);
                            long mismatch = a.mismatch(b);
                            if (mismatch >= 0) {
                                fail(type + " " + op + " n=" + n + " count=" + count + ": vector differs from scalar at"
                                    + " byte " + mismatch);
                            }
                        }
                    }
                }
            }
        }
    }

    /** Scalar kernels against a reference computed in double (floats) or with explicit wraparound (ints). */
    @Test
    void scalarMatchesHighPrecisionReference() {
        Random random = new Random(7);
        for (ReduceKernels kernels : new ReduceKernels[] {Kernels.scalar(), Kernels.vector()}) {
            try (Arena arena = Arena.ofConfined()) {
                for (DataType type : DataType.values()) {
                    for (ReduceOp op : ReduceOp.values()) {
                        int n = 4;
                        int count = 301;
                        MemorySegment[] src = new MemorySegment[n];
                        long[] off = new long[n];
                        for (int j = 0; j < n; j++) {
                            src[j] = arena.allocate((long) count * type.sizeBytes());
                            fillSmallIntegers(type, src[j], count, random);
                        }
                        MemorySegment dst = arena.allocate((long) count * type.sizeBytes());
                        kernels.reduce(type, op, src, off, n, dst, 0, count, n);
                        for (int i = 0; i < count; i++) {
                            double[] values = new double[n];
                            for (int j = 0; j < n; j++) {
                                values[j] = get(type, src[j], i);
                            }
                            double expected = reference(type, op, values, n);
                            double actual = get(type, dst, i);
                            if (Double.compare(expected, actual) != 0) {
                                fail(kernels.name() + " " + type + " " + op + " element " + i + ": expected " + expected
                                    + " got " + actual);
                            }
                        }
                    }
                }
            }
        }
    }

    @Test
    void integerWraparound() {
        try (Arena arena = Arena.ofConfined()) {
            for (ReduceKernels k : new ReduceKernels[] {Kernels.scalar(), Kernels.vector()}) {
                int count = 70;
                MemorySegment a = arena.allocate(count * 8L);
                MemorySegment b = arena.allocate(count * 8L);
                MemorySegment d = arena.allocate(count * 8L);
                for (int i = 0; i < count; i++) {
                    a.set(ValueLayout.JAVA_BYTE, i, (byte) 127);
                    b.set(ValueLayout.JAVA_BYTE, i, (byte) 1);
                }
                k.reduce(DataType.INT8, ReduceOp.SUM, a, 0, b, 0, d, 0, count, 1);
                assertEquals((byte) -128, d.get(ValueLayout.JAVA_BYTE, count - 1), k.name());
                k.reduce(DataType.UINT8, ReduceOp.MAX, a, 0, d, 0, d, 0, count, 1);
                assertEquals((byte) 0x80, d.get(ValueLayout.JAVA_BYTE, 0), k.name() + " uint8 max(127, 128)");
                for (int i = 0; i < count; i++) {
                    a.setAtIndex(ValueLayout.JAVA_INT, i, Integer.MAX_VALUE);
                    b.setAtIndex(ValueLayout.JAVA_INT, i, 2);
                }
                k.reduce(DataType.INT32, ReduceOp.SUM, a, 0, b, 0, d, 0, count / 2, 1);
                assertEquals(Integer.MIN_VALUE + 1, d.getAtIndex(ValueLayout.JAVA_INT, count / 2 - 1), k.name());
                k.reduce(DataType.INT32, ReduceOp.PROD, a, 0, b, 0, d, 0, count / 2, 1);
                assertEquals(-2, d.getAtIndex(ValueLayout.JAVA_INT, 0), k.name());
                for (int i = 0; i < count / 2; i++) {
                    a.setAtIndex(ValueLayout.JAVA_LONG, i, Long.MAX_VALUE);
                    b.setAtIndex(ValueLayout.JAVA_LONG, i, 1);
                }
                k.reduce(DataType.INT64, ReduceOp.SUM, a, 0, b, 0, d, 0, count / 4, 1);
                assertEquals(Long.MIN_VALUE, d.getAtIndex(ValueLayout.JAVA_LONG, count / 4 - 1), k.name());
            }
        }
    }

    /** NaN propagates through min/max/sum; -0.0 &lt; +0.0; infinities order correctly; bf16/fp16 keep NaN. */
    @Test
    void nanAndInfinityForMinMax() {
        float[] specials = {Float.NaN, Float.POSITIVE_INFINITY, Float.NEGATIVE_INFINITY, -0.0f, 0.0f, 1.5f, -2.25f};
        try (Arena arena = Arena.ofConfined()) {
            for (ReduceKernels k : new ReduceKernels[] {Kernels.scalar(), Kernels.vector()}) {
                for (DataType type : new DataType[] {DataType.FLOAT32, DataType.FLOAT64, DataType.BFLOAT16,
                    DataType.FLOAT16}) {
                    int count = specials.length * specials.length * 3; // long enough for the vector body
                    MemorySegment a = arena.allocate((long) count * type.sizeBytes());
                    MemorySegment b = arena.allocate((long) count * type.sizeBytes());
                    MemorySegment d = arena.allocate((long) count * type.sizeBytes());
                    for (int i = 0; i < count; i++) {
                        int pair = i % (specials.length * specials.length);
                        set(type, a, i, specials[pair / specials.length]);
                        set(type, b, i, specials[pair % specials.length]);
                    }
                    for (ReduceOp op : new ReduceOp[] {ReduceOp.MIN, ReduceOp.MAX, ReduceOp.SUM}) {
                        k.reduce(type, op, a, 0, b, 0, d, 0, count, 1);
                        for (int i = 0; i < count; i++) {
                            double x = get(type, a, i);
                            double y = get(type, b, i);
                            double expected = switch (op) {
                                case MIN -> Math.min(x, y);
                                case MAX -> Math.max(x, y);
                                default -> x + y;
                            };
                            double actual = get(type, d, i);
                            if (Double.compare(expected, actual) != 0) {
                                fail(k.name() + " " + type + " " + op + "(" + x + ", " + y + ") = " + actual
                                    + ", expected " + expected);
                            }
                        }
                    }
                }
            }
        }
    }

    @Test
    void bf16RoundsToNearestEven() {
        assertEquals((short) 0x3F80, ScalarKernels.toBf16(1.0f));
        // 1 + 2^-8 is exactly halfway between 1 and the next bf16: ties go to even (1.0)
        assertEquals((short) 0x3F80, ScalarKernels.toBf16(Float.intBitsToFloat(0x3F808000)));
        // 1 + 3*2^-8 is halfway with an odd lower neighbour: rounds up
        assertEquals((short) 0x3F82, ScalarKernels.toBf16(Float.intBitsToFloat(0x3F818000)));
        assertEquals((short) 0x3F81, ScalarKernels.toBf16(Float.intBitsToFloat(0x3F808001)));
        assertEquals((short) 0x7F80, ScalarKernels.toBf16(Float.POSITIVE_INFINITY));
        assertEquals((short) 0x7F80, ScalarKernels.toBf16(Float.MAX_VALUE), "overflow rounds to infinity");
        short nan = ScalarKernels.toBf16(Float.intBitsToFloat(0x7F800001));
        assertEquals(true, Float.isNaN(ScalarKernels.fromBf16(nan)), "signalling NaN with a low payload stays NaN");
    }

    /** bf16 sums of 8 sources are rounded once (accumulated in float32), not after every addition. */
    @Test
    void halfPrecisionAccumulatesInFloat32() {
        try (Arena arena = Arena.ofConfined()) {
            for (ReduceKernels k : new ReduceKernels[] {Kernels.scalar(), Kernels.vector()}) {
                int n = 8;
                int count = 64;
                MemorySegment[] src = new MemorySegment[n];
                long[] off = new long[n];
                for (int j = 0; j < n; j++) {
                    src[j] = arena.allocate(count * 2L);
                    for (int i = 0; i < count; i++) {
                        // 256 + 1 + 1 + ... : each single addition of 1 to 256 rounds away in bf16 (8 bits mantissa)
                        set(DataType.BFLOAT16, src[j], i, j == 0 ? 256f : 1f);
                    }
                }
                MemorySegment d = arena.allocate(count * 2L);
                k.reduce(DataType.BFLOAT16, ReduceOp.SUM, src, off, n, d, 0, count, 1);
                assertEquals(264.0, get(DataType.BFLOAT16, d, 0), k.name());
                assertEquals(264.0, get(DataType.BFLOAT16, d, count - 1), k.name());
            }
        }
    }

    @Test
    void inPlaceAndDivide() {
        try (Arena arena = Arena.ofConfined()) {
            for (ReduceKernels k : new ReduceKernels[] {Kernels.scalar(), Kernels.vector()}) {
                int count = 37;
                MemorySegment a = arena.allocate(count * 4L);
                MemorySegment b = arena.allocate(count * 4L);
                for (int i = 0; i < count; i++) {
                    a.setAtIndex(ValueLayout.JAVA_FLOAT, i, i);
                    b.setAtIndex(ValueLayout.JAVA_FLOAT, i, 3 * i);
                }
                k.reduce(DataType.FLOAT32, ReduceOp.SUM, a, 0, b, 0, a, 0, count, 1);
                k.divide(DataType.FLOAT32, a, 0, count, 4);
                for (int i = 0; i < count; i++) {
                    assertEquals((float) i, a.getAtIndex(ValueLayout.JAVA_FLOAT, i), k.name());
                }
            }
        }
    }

    // ------------------------------------------------------------------------------------------------ helpers

    static double reference(DataType type, ReduceOp op, double[] v, int n) {
        double acc = v[0];
        for (int j = 1; j < n; j++) {
            acc = switch (op) {
                case SUM, AVG -> acc + v[j];
                case PROD -> acc * v[j];
                case MIN -> Math.min(acc, v[j]);
                case MAX -> Math.max(acc, v[j]);
            };
            acc = wrap(type, acc);
        }
        if (op == ReduceOp.AVG) {
            acc = type.isFloatingPoint() ? acc / n : (long) acc / n;
        }
        if (!type.isFloatingPoint()) {
            acc = (long) acc; // no -0.0 for integers
        }
        return roundTo(type, acc);
    }

    private static double wrap(DataType type, double v) {
        return switch (type) {
            case INT8 -> (byte) (long) v;
            case UINT8 -> ((long) v) & 0xFF;
            case INT32 -> (int) (long) v;
            case INT64 -> (long) v;
            default -> v;
        };
    }

    private static double roundTo(DataType type, double v) {
        return switch (type) {
            case FLOAT16 -> Float.float16ToFloat(Float.floatToFloat16((float) v));
            case BFLOAT16 -> ScalarKernels.fromBf16(ScalarKernels.toBf16((float) v));
            case FLOAT32 -> (float) v;
            default -> v;
        };
    }

    static void fillSmallIntegers(DataType type, MemorySegment seg, int count, Random random) {
        for (int i = 0; i < count; i++) {
            int v = random.nextInt(9) - 4; // products of 4 such values stay exact in every type
            if (type == DataType.UINT8) {
                v = random.nextInt(4);
            }
            set(type, seg, i, v);
        }
    }

    static void fillRandom(DataType type, MemorySegment seg, long off, int count, Random random, boolean small) {
        MemorySegment s = seg.asSlice(off);
        for (int i = 0; i < count; i++) {
            switch (type) {
                case INT8, UINT8 -> s.set(ValueLayout.JAVA_BYTE, i, (byte) random.nextInt());
                case INT32 -> s.set(ValueLayout.JAVA_INT_UNALIGNED, i * 4L, random.nextInt());
                case INT64 -> s.set(ValueLayout.JAVA_LONG_UNALIGNED, i * 8L, random.nextLong());
                case FLOAT16 -> s.set(ValueLayout.JAVA_SHORT_UNALIGNED, i * 2L,
                    Float.floatToFloat16((float) random.nextGaussian() * (small ? 1 : 100)));
                case BFLOAT16 -> s.set(ValueLayout.JAVA_SHORT_UNALIGNED, i * 2L,
                    ScalarKernels.toBf16((float) random.nextGaussian() * (small ? 1 : 1000)));
                case FLOAT32 -> s.set(ValueLayout.JAVA_FLOAT_UNALIGNED, i * 4L,
                    i % 97 == 5 ? Float.NaN : (float) random.nextGaussian() * 1000);
                case FLOAT64 -> s.set(ValueLayout.JAVA_DOUBLE_UNALIGNED, i * 8L, random.nextGaussian() * 1e6);
            }
        }
    }

    /** Element {@code i} as a double. */
    public static double get(DataType type, MemorySegment s, long i) {
        return switch (type) {
            case INT8 -> s.get(ValueLayout.JAVA_BYTE, i);
            case UINT8 -> s.get(ValueLayout.JAVA_BYTE, i) & 0xFF;
            case INT32 -> s.get(ValueLayout.JAVA_INT_UNALIGNED, i * 4);
            case INT64 -> s.get(ValueLayout.JAVA_LONG_UNALIGNED, i * 8);
            case FLOAT16 -> Float.float16ToFloat(s.get(ValueLayout.JAVA_SHORT_UNALIGNED, i * 2));
            case BFLOAT16 -> ScalarKernels.fromBf16(s.get(ValueLayout.JAVA_SHORT_UNALIGNED, i * 2));
            case FLOAT32 -> s.get(ValueLayout.JAVA_FLOAT_UNALIGNED, i * 4);
            case FLOAT64 -> s.get(ValueLayout.JAVA_DOUBLE_UNALIGNED, i * 8);
        };
    }

    /** Sets element {@code i} (converted from a double). */
    public static void set(DataType type, MemorySegment s, long i, double v) {
        switch (type) {
            case INT8, UINT8 -> s.set(ValueLayout.JAVA_BYTE, i, (byte) (long) v);
            case INT32 -> s.set(ValueLayout.JAVA_INT_UNALIGNED, i * 4, (int) (long) v);
            case INT64 -> s.set(ValueLayout.JAVA_LONG_UNALIGNED, i * 8, (long) v);
            case FLOAT16 -> s.set(ValueLayout.JAVA_SHORT_UNALIGNED, i * 2, Float.floatToFloat16((float) v));
            case BFLOAT16 -> s.set(ValueLayout.JAVA_SHORT_UNALIGNED, i * 2, ScalarKernels.toBf16((float) v));
            case FLOAT32 -> s.set(ValueLayout.JAVA_FLOAT_UNALIGNED, i * 4, (float) v);
            case FLOAT64 -> s.set(ValueLayout.JAVA_DOUBLE_UNALIGNED, i * 8, v);
        }
    }
}
