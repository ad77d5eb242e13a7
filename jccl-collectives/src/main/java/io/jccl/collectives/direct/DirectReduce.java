package io.jccl.collectives.direct;

import io.jccl.collectives.DataType;
import io.jccl.collectives.ReduceOp;
import io.jccl.collectives.core.Signature;
import io.jccl.collectives.kernel.ReduceKernels;

import java.lang.foreign.MemorySegment;
import java.util.Arrays;

/** Direct reduce: every rank stages its input, the root reduces from all stagings, in rounds of the staging size. */
public final class DirectReduce {
    private DirectReduce() {
    }

    /** Reduces every rank's {@code in} into {@code root}'s {@code out}. */
    public static void run(DirectPath path, DirectBarrier barrier, ReduceKernels kernels, Signature sig,
                           MemorySegment in, MemorySegment out, long count, DataType type, ReduceOp op, int root) {
        int rank = path.rank();
        int size = path.size();
        int es = type.sizeBytes();
        long perRound = Math.max(1, path.stagingBytes() / es);
        MemorySegment[] sources = path.sources;
        long[] offsets = path.sourceOffsets;
        boolean first = true;
        for (long base = 0; base < count || first; base += perRound) {
            long n = Math.min(perRound, count - base);
            long half = path.half();
            MemorySegment.copy(in, base * es, path.staging(rank), half, n * es);
            barrier.await(sig, first);
            first = false;
            if (rank == root && n > 0) {
                for (int j = 0; j < size; j++) {
                    sources[j] = path.staging(j);
                    offsets[j] = half;
                }
                kernels.reduce(type, op, sources, offsets, size, out, base * es, n, size);
            }
            path.round++;
            if (count == 0) {
                break;
            }
        }
        Arrays.fill(sources, null);
    }
}
