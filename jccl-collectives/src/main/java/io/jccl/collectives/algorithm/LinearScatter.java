package io.jccl.collectives.algorithm;

import io.jccl.collectives.core.Signature;
import io.jccl.collectives.message.Exchange;

import java.lang.foreign.MemorySegment;

/** Linear scatter: the root sends block j to rank j, all concurrently. */
public final class LinearScatter {
    private LinearScatter() {
    }

    /** Scatters block j of {@code root}'s {@code in} into rank j's {@code out}. */
    public static void run(Exchange x, Signature sig, MemorySegment in, MemorySegment out, long blockBytes, int root) {
        int n = x.groupSize();
        if (x.groupRank() == root) {
            MemorySegment.copy(in, root * blockBytes, out, 0, blockBytes);
            for (int j = 0; j < n; j++) {
                if (j != root) {
                    x.send(x.peer(j), sig, in, j * blockBytes, blockBytes);
                }
            }
        } else {
            x.receive(x.peer(root), sig, out, 0, blockBytes, null, null);
        }
        x.run();
    }
}
