package io.jccl.collectives.direct;

import io.jccl.collectives.core.Signature;

import java.lang.foreign.MemorySegment;

/** Direct all-to-all: each rank stages a chunk of every block; rank r copies chunk r of every rank's staging. */
public final class DirectAllToAll {
    private DirectAllToAll() {
    }

    /** Block j of {@code in} goes to rank j; block j of {@code out} comes from rank j. */
    public static void run(DirectPath path, DirectBarrier barrier, Signature sig, MemorySegment in,
                           MemorySegment out, long blockBytes) {
        int rank = path.rank();
        int size = path.size();
        long per = Math.max(1, path.stagingBytes() / size);
        boolean first = true;
        for (long base = 0; base < blockBytes || first; base += per) {
            long n = Math.min(per, blockBytes - base);
            long half = path.half();
            MemorySegment mine = path.staging(rank);
            for (int b = 0; b < size; b++) {
                MemorySegment.copy(in, b * blockBytes + base, mine, half + b * n, n);
            }
            barrier.await(sig, first);
            first = false;
            for (int j = 0; j < size; j++) {
                MemorySegment.copy(path.staging(j), half + rank * n, out, j * blockBytes + base, n);
            }
            path.round++;
            if (blockBytes == 0) {
                break;
            }
        }
    }
}
