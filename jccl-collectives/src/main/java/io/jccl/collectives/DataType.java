package io.jccl.collectives;

/**
 * Element types of collective buffers (NCCL's {@code ncclDataType_t}). Elements are stored in native byte order.
 * {@link #FLOAT16} (IEEE binary16) and {@link #BFLOAT16} are reduced by widening to float32, reducing there and
 * rounding back to nearest even once per kernel call.
 */
public enum DataType {
    /** Signed 8-bit integer (two's complement; sums and products wrap around). */
    INT8(1, "int8"),
    /** Unsigned 8-bit integer (sums and products wrap around modulo 256). */
    UINT8(1, "uint8"),
    /** Signed 32-bit integer (wraps around). */
    INT32(4, "int32"),
    /** Signed 64-bit integer (wraps around). */
    INT64(8, "int64"),
    /** IEEE 754 binary16. */
    FLOAT16(2, "float16"),
    /** bfloat16: the upper half of a float32. */
    BFLOAT16(2, "bfloat16"),
    /** IEEE 754 binary32. */
    FLOAT32(4, "float32"),
    /** IEEE 754 binary64. */
    FLOAT64(8, "float64");

    private final int sizeBytes;
    private final String shortName;

    DataType(int sizeBytes, String shortName) {
        this.sizeBytes = sizeBytes;
        this.shortName = shortName;
    }

    /** Bytes per element. */
    public int sizeBytes() {
        return sizeBytes;
    }

    /** Name as in logs and signatures, for example {@code bfloat16}. */
    public String shortName() {
        return shortName;
    }

    /** Whether the type is a floating-point type. */
    public boolean isFloatingPoint() {
        return this == FLOAT16 || this == BFLOAT16 || this == FLOAT32 || this == FLOAT64;
    }

    /** Parses a short name ({@code float32}, {@code bf16}, {@code fp16}, {@code int8} ...), case-insensitively. */
    public static DataType parse(String name) {
        String n = name.trim().toLowerCase(java.util.Locale.ROOT);
        return switch (n) {
            case "int8", "i8", "char" -> INT8;
            case "uint8", "u8" -> UINT8;
            case "int32", "i32", "int" -> INT32;
            case "int64", "i64", "long" -> INT64;
            case "float16", "fp16", "f16", "half" -> FLOAT16;
            case "bfloat16", "bf16" -> BFLOAT16;
            case "float32", "fp32", "f32", "float" -> FLOAT32;
            case "float64", "fp64", "f64", "double" -> FLOAT64;
            default -> throw new IllegalArgumentException("unknown data type '" + name + "'; known: int8, uint8, "
                + "int32, int64, float16, bfloat16, float32, float64");
        };
    }

    @Override
    public String toString() {
        return shortName;
    }
}
