package io.jccl.collectives.algorithm;

import io.jccl.collectives.core.Signature;
import io.jccl.collectives.message.Exchange;

import java.lang.foreign.MemorySegment;

/** Pairwise all-to-all: in step k every rank sends to rank+k and receives from rank-k (n-1 steps). */
public final class PairwiseAllToAll {
    private PairwiseAllToAll() {
    }

    /** Block j of {@code in} goes to group rank j; block j of {@code out} comes from group rank j. */
    public static void run(Exchange x, Signature sig, MemorySegment in, MemorySegment out, long blockBytes) {
        int n = x.groupSize();
        int me = x.groupRank();
        MemorySegment.copy(in, me * blockBytes, out, me * blockBytes, blockBytes);
        for (int k = 1; k < n; k++) {
            int to = Math.floorMod(me + k, n);
            int from = Math.floorMod(me - k, n);
            x.send(x.peer(to), sig, in, to * blockBytes, blockBytes);
            x.receive(x.peer(from), sig, out, from * blockBytes, blockBytes, null, null);
            x.run();
        }
    }
}
