package io.jccl.collectives.direct;

import io.jccl.collectives.core.Signature;
import io.jccl.collectives.memory.Allocations;

import java.lang.foreign.MemorySegment;

/**
 * Direct broadcast. When the root's input lies in allocated memory and the message is at least
 * {@link DirectAllReduce#SMALL_BYTES}, the root publishes a descriptor and every other rank copies the whole message
 * straight from the root's buffer (zero copy: one copy instead of two, and the readers read lines the root did not
 * just write); a closing barrier keeps the root from returning while a peer still reads. Otherwise the root stages
 * the message in rounds of the staging size and everyone copies each round. Every rank agrees on the closing
 * barrier from the size alone.
 */
public final class DirectBroadcast {
    private final DirectPath path;
    private final DirectBarrier barrier;
    private final Allocations allocations;
    private final Allocations.Slice input = new Allocations.Slice();

    /** The direct broadcast of {@code path}, meeting at {@code barrier}, reading {@code allocations} in place. */
    public DirectBroadcast(DirectPath path, DirectBarrier barrier, Allocations allocations) {
        this.path = path;
        this.barrier = barrier;
        this.allocations = allocations;
    }

    /** Broadcasts {@code bytes} of {@code root}'s {@code in} into every rank's {@code out} (null: none). */
    public void run(Signature sig, MemorySegment in, MemorySegment out, long bytes, int root) {
        int rank = path.rank();
        long per = path.stagingBytes();
        boolean large = bytes >= DirectAllReduce.SMALL_BYTES;
        boolean first = true;
        for (long base = 0; base < bytes || first; base += per) {
            long n = Math.min(per, bytes - base);
            long half = path.half();
            int parity = path.nextParity();
            if (rank == root) {
                boolean zeroCopy = first && large && allocations.locate(in, input);
                path.publishInput(zeroCopy ? input : null, 0, in, base, n);
            }
            barrier.await(sig, first);
            if (first && large && path.control(root).inputIsAllocation(parity)) {
                if (rank == root) {
                    if (out != null && !in.equals(out)) {
                        MemorySegment.copy(in, 0, out, 0, bytes);
                    }
                } else if (out != null) {
                    MemorySegment src = path.peerInput(root, parity);
                    MemorySegment.copy(src, path.peerInputOffset(root, parity), out, 0, bytes);
                }
                path.round++;
                break;
            }
            first = false;
            if (out != null && !(rank == root && in == out)) {
                MemorySegment.copy(path.staging(root), half, out, base, n);
            }
            path.round++;
            if (bytes == 0) {
                break;
            }
        }
        if (large) {
            barrier.await(sig, false);
        }
    }
}
