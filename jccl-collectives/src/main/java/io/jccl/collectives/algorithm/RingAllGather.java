package io.jccl.collectives.algorithm;

import io.jccl.collectives.core.Signature;
import io.jccl.collectives.message.Exchange;
import io.jccl.collectives.message.Peer;
import io.jccl.collectives.message.Transfer;

import java.lang.foreign.MemorySegment;

/** Ring all-gather: n-1 pipelined steps, each rank forwarding the block it received in the step before. */
public final class RingAllGather {
    private RingAllGather() {
    }

    /** {@code out} (native) holds n blocks of {@code blockBytes}; this rank's block (its group rank) is filled. */
    public static void run(Exchange x, Signature sig, MemorySegment out, long blockBytes) {
        int n = x.groupSize();
        int me = x.groupRank();
        Peer right = x.peer(me + 1);
        Peer left = x.peer(me - 1);
        Transfer previous = null;
        for (int s = 0; s < n - 1; s++) {
            int sb = Math.floorMod(me - s, n);
            int rb = Math.floorMod(me - s - 1, n);
            x.send(right, sig, out, sb * blockBytes, blockBytes).placed().after(previous);
            previous = x.receive(left, sig, out, rb * blockBytes, blockBytes, null, null).placed();
        }
        x.run();
    }
}
