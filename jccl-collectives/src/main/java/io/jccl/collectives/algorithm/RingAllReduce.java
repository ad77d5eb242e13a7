package io.jccl.collectives.algorithm;

import io.jccl.collectives.DataType;
import io.jccl.collectives.ReduceOp;
import io.jccl.collectives.core.Blocks;
import io.jccl.collectives.core.Signature;
import io.jccl.collectives.message.Exchange;
import io.jccl.collectives.message.Peer;
import io.jccl.collectives.message.Transfer;

import java.lang.foreign.MemorySegment;

/**
 * Ring all-reduce: a reduce-scatter then an all-gather around the ring, n-1 steps each, every rank sending to the
 * next and receiving from the previous. All steps of a phase form one exchange: step s forwards the block received
 * (and reduced) in step s-1 chunk by chunk as it completes, so consecutive steps overlap (pipelined ring).
 * Bandwidth-optimal: each rank sends and receives 2(n-1)/n of the vector.
 */
public final class RingAllReduce {
    private RingAllReduce() {
    }

    /**
     * All-reduces {@code in} into {@code buf} (both native; the same segment, or disjoint). Out of place nothing is
     * copied up front: the first reduce-scatter step sends its block from {@code in}, each received block is
     * reduced with {@code in}'s block into {@code buf}, and every block of {@code buf} is written by the last
     * reduce-scatter step or the all-gather (one 16 MiB copy less per 16 MiB all-reduce).
     */
    public static void run(Exchange x, Signature sig, MemorySegment in, MemorySegment buf, long count, DataType type,
                           ReduceOp op) {
        int es = type.sizeBytes();
        int n = x.groupSize();
        int me = x.groupRank();
        Peer right = x.peer(me + 1);
        Peer left = x.peer(me - 1);
        Transfer previous = null;
        for (int s = 0; s < n - 1; s++) {
            int sb = Math.floorMod(me - s, n);
            int rb = Math.floorMod(me - s - 1, n);
            x.send(right, sig, s == 0 ? in : buf, Blocks.start(count, n, sb) * es, Blocks.count(count, n, sb) * es)
                .after(previous);
            previous = x.receive(left, sig, buf, Blocks.start(count, n, rb) * es, Blocks.count(count, n, rb) * es,
                type, op);
            if (in != buf) {
                previous.reduceWith(in);
            }
        }
        x.run();
        int mine = Math.floorMod(me + 1, n);
        if (op == ReduceOp.AVG) {
            x.kernels().divide(type, buf, Blocks.start(count, n, mine) * es, Blocks.count(count, n, mine), n);
        }
        previous = null;
        for (int s = 0; s < n - 1; s++) {
            int sb = Math.floorMod(me + 1 - s, n);
            int rb = Math.floorMod(me - s, n);
            x.send(right, sig, buf, Blocks.start(count, n, sb) * es, Blocks.count(count, n, sb) * es).placed()
                .after(previous);
            previous = x.receive(left, sig, buf, Blocks.start(count, n, rb) * es, Blocks.count(count, n, rb) * es,
                null, null).placed();
        }
        x.run();
    }
}
