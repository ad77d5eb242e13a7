package io.jccl.collectives;

/**
 * Reduction operators (NCCL's {@code ncclRedOp_t}).
 *
 * <p>{@link #MIN} and {@link #MAX} on floating-point types propagate NaN (any NaN input gives NaN, like
 * {@link Math#min(float, float)}) and order -0.0 below +0.0. {@link #AVG} is a sum divided by the number of ranks at
 * the end: floating-point types divide in float32 (float64 for {@link DataType#FLOAT64}); integer types divide with
 * truncation toward zero (unsigned for {@link DataType#UINT8}) after a wrapping sum.
 */
public enum ReduceOp {
    /** Sum. */
    SUM("sum"),
    /** Product. */
    PROD("prod"),
    /** Minimum. */
    MIN("min"),
    /** Maximum. */
    MAX("max"),
    /** Average: sum divided by the communicator size. */
    AVG("avg");

    private final String shortName;

    ReduceOp(String shortName) {
        this.shortName = shortName;
    }

    /** Name as in logs and signatures. */
    public String shortName() {
        return shortName;
    }

    /** The operator applied pairwise while combining ({@link #AVG} combines with {@link #SUM}). */
    public ReduceOp combiner() {
        return this == AVG ? SUM : this;
    }

    @Override
    public String toString() {
        return shortName;
    }
}
