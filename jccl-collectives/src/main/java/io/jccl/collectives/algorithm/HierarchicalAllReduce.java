package io.jccl.collectives.algorithm;

import io.jccl.collectives.DataType;
import io.jccl.collectives.ReduceOp;
import io.jccl.collectives.core.Signature;
import io.jccl.collectives.message.Exchange;

import java.lang.foreign.MemorySegment;

/**
 * Hierarchical all-reduce for ranks spread over several hosts with several ranks on some: binomial reduce to the
 * first rank of each host, all-reduce among those leaders (ring for large vectors, tree below 64 KiB), binomial
 * broadcast inside each host. Only leaders cross the network.
 */
public final class HierarchicalAllReduce {
    /** From this size the leaders use the ring, below it reduce + broadcast trees. */
    static final long LEADER_RING_BYTES = 64 * 1024;

    private HierarchicalAllReduce() {
    }

    /**
     * All-reduces {@code buf} (native) over {@code size} ranks: {@code local} are this host's ranks (its first is the
     * leader), {@code leaders} the first rank of every host. AVG sums throughout and the leaders divide once by the
     * communicator size.
     */
    public static void run(Exchange x, Signature sig, MemorySegment buf, long count, DataType type, ReduceOp op,
                           int[] local, int[] leaders, int rank, int size) {
        ReduceOp combine = op.combiner();
        long bytes = count * type.sizeBytes();
        boolean leader = local[0] == rank;
        try {
            x.useGroup(local);
            TreeReduce.run(x, sig, buf, count, type, combine, 0);
            if (leader) {
                if (leaders.length > 1) {
                    x.useGroup(leaders);
                    if (bytes >= LEADER_RING_BYTES) {
                        RingAllReduce.run(x, sig, buf, buf, count, type, combine);
                    } else {
                        TreeReduce.run(x, sig, buf, count, type, combine, 0);
                        TreeBroadcast.run(x, sig, buf, bytes, 0);
                    }
                }
                if (op == ReduceOp.AVG) {
                    x.kernels().divide(type, buf, 0, count, size);
                }
            }
            x.useGroup(local);
            TreeBroadcast.run(x, sig, buf, bytes, 0);
        } finally {
            x.useWorld();
        }
    }
}
