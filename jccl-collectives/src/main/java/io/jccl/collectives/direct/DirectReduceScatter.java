package io.jccl.collectives.direct;

import io.jccl.collectives.DataType;
import io.jccl.collectives.ReduceOp;
import io.jccl.collectives.core.Signature;
import io.jccl.collectives.kernel.ReduceKernels;

import java.lang.foreign.MemorySegment;
import java.util.Arrays;

/** Direct reduce-scatter: each rank stages a chunk of every block, then reduces its own block from all stagings. */
public final class DirectReduceScatter {
    private DirectReduceScatter() {
    }

    /** {@code in} holds size blocks of {@code blockCount}; rank r's {@code out} receives block r reduced. */
    public static void run(DirectPath path, DirectBarrier barrier, ReduceKernels kernels, Signature sig,
                           MemorySegment in, MemorySegment out, long blockCount, DataType type, ReduceOp op) {
        int rank = path.rank();
        int size = path.size();
        int es = type.sizeBytes();
        long perRound = Math.max(1, path.stagingBytes() / ((long) es * size));
        MemorySegment[] sources = path.sources;
        long[] offsets = path.sourceOffsets;
        boolean first = true;
        for (long base = 0; base < blockCount || first; base += perRound) {
            long n = Math.min(perRound, blockCount - base);
            long half = path.half();
            MemorySegment mine = path.staging(rank);
            for (int b = 0; b < size; b++) {
                MemorySegment.copy(in, (b * blockCount + base) * es, mine, half + b * n * es, n * es);
            }
            barrier.await(sig, first);
            first = false;
            if (n > 0) {
                for (int j = 0; j < size; j++) {
                    sources[j] = path.staging(j);
                    offsets[j] = half + rank * n * es;
                }
                kernels.reduce(type, op, sources, offsets, size, out, base * es, n, size);
            }
            path.round++;
            if (blockCount == 0) {
                break;
            }
        }
        Arrays.fill(sources, null);
    }
}
