package io.jccl.collectives.algorithm;

import io.jccl.collectives.DataType;
import io.jccl.collectives.ReduceOp;
import io.jccl.collectives.core.Signature;
import io.jccl.collectives.message.Exchange;

import java.lang.foreign.MemorySegment;

/** Binomial-tree reduce: log2(n) steps; at step k, ranks with bit k set send their partial result down the tree. */
public final class TreeReduce {
    private TreeReduce() {
    }

    /** Reduces every rank's {@code buf} (native, modified) into {@code root}'s. */
    public static void run(Exchange x, Signature sig, MemorySegment buf, long count, DataType type, ReduceOp op,
                           int root) {
        long bytes = count * type.sizeBytes();
        int n = x.groupSize();
        int vr = Math.floorMod(x.groupRank() - root, n);
        for (int mask = 1; mask < n; mask <<= 1) {
            if ((vr & mask) != 0) {
                x.send(x.peer(vr - mask + root), sig, buf, 0, bytes);
                x.run();
                return;
            }
            if (vr + mask < n) {
                x.receive(x.peer(vr + mask + root), sig, buf, 0, bytes, type, op);
                x.run();
            }
        }
        if (op == ReduceOp.AVG) {
            x.kernels().divide(type, buf, 0, count, n);
        }
    }
}
