package io.jccl.collectives.kernel;

import io.jccl.collectives.DataType;
import io.jccl.collectives.ReduceOp;

import java.lang.foreign.MemorySegment;

/**
 * Element-wise reductions over memory segments. Implementations: {@link Kernels#scalar()} (plain loops) and the
 * Vector API kernels that {@link Kernels#get()} returns when {@code jdk.incubator.vector} is available.
 * Both give bit-identical results: sources are combined in index order (source 0 first), float16 and bfloat16 are
 * widened to float32, combined there and rounded to nearest even once at the end, and {@link ReduceOp#AVG}
 * divides once, before that rounding.
 *
 * <p>The destination may be one of the sources at exactly the same offset (in-place); other overlaps are not
 * allowed. Methods allocate nothing.
 */
public interface ReduceKernels {
    /** Short name for logs ({@code vector-256} or {@code scalar}). */
    String name();

    /**
     * {@code dst[i] = src[0][i] op src[1][i] op ... op src[n-1][i]} for i in [0, count).
     *
     * @param type element type
     * @param op operator; {@link ReduceOp#AVG} sums, then divides by {@code divisor} when it is above 1
     * @param sources source segments (at least {@code sourceCount})
     * @param sourceOffsets byte offsets into the sources
     * @param sourceCount number of sources, at least 1
     * @param dst destination segment
     * @param dstOffset byte offset into dst
     * @param count elements
     * @param divisor what AVG divides by (ignored for other operators)
     */
    void reduce(DataType type, ReduceOp op, MemorySegment[] sources, long[] sourceOffsets, int sourceCount,
                MemorySegment dst, long dstOffset, long count, int divisor);

    /**
     * Two-source form: {@code dst = a op b} ({@code dst} may be {@code a} or {@code b}). AVG with a divisor above 1
     * divides the sum.
     */
    void reduce(DataType type, ReduceOp op, MemorySegment a, long aOffset, MemorySegment b, long bOffset,
                MemorySegment dst, long dstOffset, long count, int divisor);

    /** Divides {@code count} elements in place by {@code divisor} (the final step of AVG over several calls). */
    void divide(DataType type, MemorySegment segment, long offset, long count, int divisor);
}
