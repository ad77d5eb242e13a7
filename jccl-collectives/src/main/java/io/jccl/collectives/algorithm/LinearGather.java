package io.jccl.collectives.algorithm;

import io.jccl.collectives.core.Signature;
import io.jccl.collectives.message.Exchange;

import java.lang.foreign.MemorySegment;

/** Linear gather: every rank sends its block to the root, which receives all of them concurrently. */
public final class LinearGather {
    private LinearGather() {
    }

    /** Gathers every rank's {@code in} ({@code blockBytes}) into {@code root}'s {@code out} in rank order. */
    public static void run(Exchange x, Signature sig, MemorySegment in, MemorySegment out, long blockBytes, int root) {
        int n = x.groupSize();
        if (x.groupRank() == root) {
            MemorySegment.copy(in, 0, out, root * blockBytes, blockBytes);
            for (int j = 0; j < n; j++) {
                if (j != root) {
                    x.receive(x.peer(j), sig, out, j * blockBytes, blockBytes, null, null);
                }
            }
        } else {
            x.send(x.peer(root), sig, in, 0, blockBytes);
        }
        x.run();
    }
}
