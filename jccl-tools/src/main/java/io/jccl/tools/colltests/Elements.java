package io.jccl.tools.colltests;

import io.jccl.collectives.DataType;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/** Reads and writes element {@code i} of a buffer of any {@link DataType} as a double (for small exact values). */
final class Elements {
    private Elements() {
    }

    static void set(MemorySegment s, DataType type, long i, double v) {
        switch (type) {
            case INT8, UINT8 -> s.set(ValueLayout.JAVA_BYTE, i, (byte) v);
            case INT32 -> s.setAtIndex(ValueLayout.JAVA_INT_UNALIGNED, i, (int) v);
            case INT64 -> s.setAtIndex(ValueLayout.JAVA_LONG_UNALIGNED, i, (long) v);
            case FLOAT16 -> s.setAtIndex(ValueLayout.JAVA_SHORT_UNALIGNED, i, Float.floatToFloat16((float) v));
            case BFLOAT16 -> s.setAtIndex(ValueLayout.JAVA_SHORT_UNALIGNED, i,
                (short) (Float.floatToRawIntBits((float) v) >>> 16));
            case FLOAT32 -> s.setAtIndex(ValueLayout.JAVA_FLOAT_UNALIGNED, i, (float) v);
            case FLOAT64 -> s.setAtIndex(ValueLayout.JAVA_DOUBLE_UNALIGNED, i, v);
        }
    }

    static double get(MemorySegment s, DataType type, long i) {
        return switch (type) {
            case INT8 -> s.get(ValueLayout.JAVA_BYTE, i);
            case UINT8 -> s.get(ValueLayout.JAVA_BYTE, i) & 0xFF;
            case INT32 -> s.getAtIndex(ValueLayout.JAVA_INT_UNALIGNED, i);
            case INT64 -> s.getAtIndex(ValueLayout.JAVA_LONG_UNALIGNED, i);
            case FLOAT16 -> Float.float16ToFloat(s.getAtIndex(ValueLayout.JAVA_SHORT_UNALIGNED, i));
            case BFLOAT16 -> Float.intBitsToFloat(s.getAtIndex(ValueLayout.JAVA_SHORT_UNALIGNED, i) << 16);
            case FLOAT32 -> s.getAtIndex(ValueLayout.JAVA_FLOAT_UNALIGNED, i);
            case FLOAT64 -> s.getAtIndex(ValueLayout.JAVA_DOUBLE_UNALIGNED, i);
        };
    }
}
