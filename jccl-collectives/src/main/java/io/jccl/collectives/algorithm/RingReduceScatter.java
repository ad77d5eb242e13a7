package io.jccl.collectives.algorithm;

import io.jccl.collectives.DataType;
import io.jccl.collectives.ReduceOp;
import io.jccl.collectives.core.Signature;
import io.jccl.collectives.message.Exchange;
import io.jccl.collectives.message.Peer;
import io.jccl.collectives.message.Transfer;

import java.lang.foreign.MemorySegment;

/** Ring reduce-scatter: n-1 pipelined steps; each rank ends with its own block reduced over all ranks. */
public final class RingReduceScatter {
    private RingReduceScatter() {
    }

    /** Reduce-scatters {@code work} (native, n blocks of {@code blockCount}); block {@code groupRank} ends reduced. */
    public static void run(Exchange x, Signature sig, MemorySegment work, long blockCount, DataType type,
                           ReduceOp op) {
        long bb = blockCount * type.sizeBytes();
        int n = x.groupSize();
        int me = x.groupRank();
        Peer right = x.peer(me + 1);
        Peer left = x.peer(me - 1);
        Transfer previous = null;
        for (int s = 0; s < n - 1; s++) {
            int sb = Math.floorMod(me - s - 1, n);
            int rb = Math.floorMod(me - s - 2, n);
            x.send(right, sig, work, sb * bb, bb).after(previous);
            previous = x.receive(left, sig, work, rb * bb, bb, type, op);
        }
        x.run();
        if (op == ReduceOp.AVG) {
            x.kernels().divide(type, work, me * bb, blockCount, n);
        }
    }
}
