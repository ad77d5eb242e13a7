package io.jccl.collectives.direct;

import io.jccl.collectives.core.Signature;
import io.jccl.collectives.memory.Allocations;

import java.lang.foreign.MemorySegment;

/**
 * Direct all-gather. Per round (staging size) each rank either stages its block or, when its input lies in
 * allocated memory and blocks are at least {@link DirectAllReduce#SMALL_BYTES}, publishes a descriptor so that
 * peers copy straight from its input (zero copy: one copy of each block instead of two); then one barrier and every
 * rank copies all blocks. Blocks of that size end with one more barrier, so no peer still reads an input when its
 * owner returns (every rank agrees on it: it depends on the size only).
 */
public final class DirectAllGather {
    private final DirectPath path;
    private final DirectBarrier barrier;
    private final Allocations allocations;
    private final Allocations.Slice input = new Allocations.Slice();

    /** The direct all-gather of {@code path}, meeting at {@code barrier}, reading {@code allocations} in place. */
    public DirectAllGather(DirectPath path, DirectBarrier barrier, Allocations allocations) {
        this.path = path;
        this.barrier = barrier;
        this.allocations = allocations;
    }

    /** Gathers every rank's {@code in} ({@code blockBytes}) into every rank's {@code out}, in rank order. */
    public void run(Signature sig, MemorySegment in, MemorySegment out, long blockBytes) {
        int rank = path.rank();
        int size = path.size();
        long per = path.stagingBytes();
        boolean large = blockBytes >= DirectAllReduce.SMALL_BYTES;
        Allocations.Slice zeroCopy = large && allocations.locate(in, input) ? input : null;
        boolean inPlace = in.isNative() && out.isNative() && in.address() == out.address() + rank * blockBytes;
        boolean first = true;
        for (long base = 0; base < blockBytes || first; base += per) {
            long n = Math.min(per, blockBytes - base);
            int parity = path.publishInput(zeroCopy, base, in, base, n);
            barrier.await(sig, first);
            if (first && zeroCopy != null && path.allPeersZeroCopy(parity)) {
                // Every rank's input is mapped memory (each sees the same descriptors, so all take this branch):
                // copy every block whole in this one round instead of a round per staging size.
                n = blockBytes;
            }
            first = false;
            for (int j = 0; j < size; j++) {
                if (j == rank) {
                    if (!inPlace) {
                        MemorySegment.copy(in, base, out, j * blockBytes + base, n);
                    }
                    continue;
                }
                MemorySegment src = path.peerInput(j, parity);
                MemorySegment.copy(src, path.peerInputOffset(j, parity), out, j * blockBytes + base, n);
            }
            path.round++;
            if (blockBytes == 0 || base + n >= blockBytes) {
                break;
            }
        }
        if (large) {
            barrier.await(sig, false);
        }
    }
}
