package io.jccl.collectives;

import io.jccl.collectives.algorithm.DisseminationBarrier;
import io.jccl.collectives.algorithm.HierarchicalAllReduce;
import io.jccl.collectives.algorithm.LinearGather;
import io.jccl.collectives.algorithm.LinearScatter;
import io.jccl.collectives.algorithm.PairwiseAllToAll;
import io.jccl.collectives.algorithm.RabenseifnerAllReduce;
import io.jccl.collectives.algorithm.RecursiveDoublingAllReduce;
import io.jccl.collectives.algorithm.RingAllGather;
import io.jccl.collectives.algorithm.RingAllReduce;
import io.jccl.collectives.algorithm.RingBroadcast;
import io.jccl.collectives.algorithm.RingReduceScatter;
import io.jccl.collectives.algorithm.TreeBroadcast;
import io.jccl.collectives.algorithm.TreeReduce;
import io.jccl.collectives.core.Blocks;
import io.jccl.collectives.core.Signature;
import io.jccl.collectives.direct.DirectAllGather;
import io.jccl.collectives.direct.DirectAllReduce;
import io.jccl.collectives.direct.DirectAllToAll;
import io.jccl.collectives.direct.DirectBarrier;
import io.jccl.collectives.direct.DirectBroadcast;
import io.jccl.collectives.direct.DirectPath;
import io.jccl.collectives.direct.DirectReduce;
import io.jccl.collectives.direct.DirectReduceScatter;
import io.jccl.collectives.kernel.ReduceKernels;
import io.jccl.collectives.memory.Allocations;
import io.jccl.collectives.memory.BounceBuffers;
import io.jccl.collectives.message.Exchange;
import io.jccl.collectives.tuning.Algorithm;

import java.lang.foreign.MemorySegment;

/**
 * Runs one collective call with the algorithm chosen for it: the one-rank and empty cases, the direct path, or the
 * message path with native working buffers (heap arguments are copied through {@link BounceBuffers}). The
 * algorithms themselves live in {@code algorithm} (message path) and {@code direct}.
 */
final class Dispatch {
    private final int rank;
    private final int size;
    private final Exchange exchange;
    private final BounceBuffers bounce;
    private final int[] localGroup;
    private final int[] leaderGroup;
    /** The direct path's pieces, or null when it is off. */
    private final DirectPath directPath;
    private final DirectBarrier barrier;
    private final DirectAllReduce directAllReduce;
    private final DirectBroadcast directBroadcast;
    private final DirectAllGather directAllGather;
    private final ReduceKernels kernels;

    Dispatch(int rank, int size, Exchange exchange, DirectPath directPath, DirectBarrier barrier,
             Allocations allocations, BounceBuffers bounce, ReduceKernels kernels, int[] localGroup,
             int[] leaderGroup) {
        this.rank = rank;
        this.size = size;
        this.exchange = exchange;
        this.bounce = bounce;
        this.kernels = kernels;
        this.localGroup = localGroup;
        this.leaderGroup = leaderGroup;
        this.directPath = directPath;
        this.barrier = barrier;
        boolean direct = directPath != null && directPath.enabled();
        this.directAllReduce = direct ? new DirectAllReduce(directPath, barrier, allocations, kernels) : null;
        this.directBroadcast = direct ? new DirectBroadcast(directPath, barrier, allocations) : null;
        this.directAllGather = direct ? new DirectAllGather(directPath, barrier, allocations) : null;
    }

    /** The direct all-reduce (tests read its path counters), or null. */
    DirectAllReduce directAllReduce() {
        return directAllReduce;
    }

    /** Runs {@code call} with {@code a} (the operation holds the turn; {@code sig} is its signature). */
    void run(Algorithm a, Signature sig, CollectiveCall call) {
        MemorySegment send = call.send;
        MemorySegment recv = call.recv;
        switch (call.collective) {
            case ALL_REDUCE -> allReduce(a, sig, send, recv, call.count, call.type, call.op);
            case BROADCAST -> broadcast(a, sig, send, recv, call.count * call.type.sizeBytes(), call.root);
            case REDUCE -> reduce(a, sig, send, recv, call.count, call.type, call.op, call.root);
            case ALL_GATHER -> allGather(a, sig, send, recv, call.count * call.type.sizeBytes());
            case REDUCE_SCATTER -> reduceScatter(a, sig, send, recv, call.count, call.type, call.op);
            case ALL_TO_ALL -> allToAll(a, sig, send, recv, call.count * call.type.sizeBytes());
            case GATHER -> gather(sig, send, recv, call.count * call.type.sizeBytes(), call.root);
            case SCATTER -> scatter(sig, send, recv, call.count * call.type.sizeBytes(), call.root);
            case BARRIER -> barrier(a, sig);
            case SEND_RECV, WINDOW -> call.action.run();
        }
    }

    private void allReduce(Algorithm a, Signature sig, MemorySegment send, MemorySegment recv, long count,
                           DataType type, ReduceOp op) {
        long bytes = count * type.sizeBytes();
        if (size == 1 || count == 0) {
            if (!Blocks.same(send, recv)) {
                MemorySegment.copy(send, 0, recv, 0, bytes);
            }
            return;
        }
        if (a == Algorithm.DIRECT) {
            directAllReduce.run(sig, send, recv, count, type, op);
            return;
        }
        MemorySegment work = recv.isNative() ? recv : bounce.get(0, bytes);
        // The ring reads a native input where it is (RingAllReduce): no copy into the output first.
        boolean ringFrom = a == Algorithm.RING && send.isNative() && Blocks.disjoint(send, work, bytes);
        if (!Blocks.same(send, work) && !ringFrom) {
            MemorySegment.copy(send, 0, work, 0, bytes);
        }
        switch (a) {
            case TREE -> {
                TreeReduce.run(exchange, sig, work, count, type, op, 0);
                TreeBroadcast.run(exchange, sig, work, bytes, 0);
            }
            case HIER -> HierarchicalAllReduce.run(exchange, sig, work, count, type, op, localGroup, leaderGroup, rank,
                size);
            case RHD -> RabenseifnerAllReduce.run(exchange, sig, work, count, type, op);
            case RD -> RecursiveDoublingAllReduce.run(exchange, sig, work, count, type, op, bounce.get(2, bytes));
            default -> RingAllReduce.run(exchange, sig, ringFrom ? send : work, work, count, type, op);
        }
        if (work != recv) {
            MemorySegment.copy(work, 0, recv, 0, bytes);
        }
    }

    private void broadcast(Algorithm a, Signature sig, MemorySegment send, MemorySegment recv, long bytes, int root) {
        if (size == 1 || bytes == 0) {
            if (!Blocks.same(send, recv) && bytes > 0) {
                MemorySegment.copy(send, 0, recv, 0, bytes);
            }
            return;
        }
        if (a == Algorithm.DIRECT) {
            directBroadcast.run(sig, send, recv, bytes, root);
            return;
        }
        MemorySegment work = recv.isNative() ? recv : bounce.get(0, bytes);
        agreeOnSignature(sig);
        if (rank == root && !Blocks.same(send, work)) {
            MemorySegment.copy(send, 0, work, 0, bytes);
        }
        if (a == Algorithm.RING) {
            RingBroadcast.run(exchange, sig, work, bytes, root);
        } else {
            TreeBroadcast.run(exchange, sig, work, bytes, root);
        }
        if (work != recv) {
            MemorySegment.copy(work, 0, recv, 0, bytes);
        }
    }

    private void reduce(Algorithm a, Signature sig, MemorySegment send, MemorySegment recv, long count,
                        DataType type, ReduceOp op, int root) {
        long bytes = count * type.sizeBytes();
        if (size == 1 || count == 0) {
            if (rank == root && !Blocks.same(send, recv) && bytes > 0) {
                MemorySegment.copy(send, 0, recv, 0, bytes);
            }
            return;
        }
        if (a == Algorithm.DIRECT) {
            DirectReduce.run(directPath, barrier, kernels, sig, send, recv, count, type, op, root);
            return;
        }
        MemorySegment work = rank == root && recv.isNative() ? recv : bounce.get(0, bytes);
        agreeOnSignature(sig);
        if (!Blocks.same(send, work)) {
            MemorySegment.copy(send, 0, work, 0, bytes);
        }
        TreeReduce.run(exchange, sig, work, count, type, op, root);
        if (rank == root && work != recv) {
            MemorySegment.copy(work, 0, recv, 0, bytes);
        }
    }

    private void allGather(Algorithm a, Signature sig, MemorySegment send, MemorySegment recv, long block) {
        if (block == 0) {
            return;
        }
        if (size == 1) {
            copyUnlessInPlace(send, recv, block);
            return;
        }
        if (a == Algorithm.DIRECT) {
            directAllGather.run(sig, send, recv, block);
            return;
        }
        MemorySegment work = recv.isNative() ? recv : bounce.get(0, block * size);
        if (!(send.isNative() && work.isNative() && send.address() == work.address() + rank * block)) {
            MemorySegment.copy(send, 0, work, rank * block, block);
        }
        RingAllGather.run(exchange, sig, work, block);
        if (work != recv) {
            MemorySegment.copy(work, 0, recv, 0, block * size);
        }
    }

    private void reduceScatter(Algorithm a, Signature sig, MemorySegment send, MemorySegment recv, long recvCount,
                               DataType type, ReduceOp op) {
        long block = recvCount * type.sizeBytes();
        if (recvCount == 0) {
            return;
        }
        if (size == 1) {
            copyUnlessInPlace(send, recv, block);
            return;
        }
        if (a == Algorithm.DIRECT) {
            DirectReduceScatter.run(directPath, barrier, kernels, sig, send, recv, recvCount, type, op);
            return;
        }
        MemorySegment work = bounce.get(1, block * size);
        MemorySegment.copy(send, 0, work, 0, block * size);
        RingReduceScatter.run(exchange, sig, work, recvCount, type, op);
        MemorySegment.copy(work, rank * block, recv, 0, block);
    }

    private void allToAll(Algorithm a, Signature sig, MemorySegment send, MemorySegment recv, long block) {
        if (block == 0) {
            return;
        }
        if (size == 1) {
            copyUnlessInPlace(send, recv, block);
            return;
        }
        if (a == Algorithm.DIRECT) {
            DirectAllToAll.run(directPath, barrier, sig, send, recv, block);
            return;
        }
        MemorySegment in = Blocks.same(send, recv) || !send.isNative() ? bounce.get(1, block * size) : send;
        if (in != send) {
            MemorySegment.copy(send, 0, in, 0, block * size);
        }
        PairwiseAllToAll.run(exchange, sig, in, recv, block);
    }

    private void gather(Signature sig, MemorySegment send, MemorySegment recv, long block, int root) {
        if (block == 0) {
            return;
        }
        if (size == 1) {
            MemorySegment.copy(send, 0, recv, 0, block);
            return;
        }
        MemorySegment in = bounce.nativeOf(send, block, 1, true);
        if (rank == root && Blocks.same(in, recv.asSlice(root * block, Math.min(block, recv.byteSize() - root * block)))) {
            in = bounce.get(1, block);
            MemorySegment.copy(send, 0, in, 0, block);
        }
        agreeOnSignature(sig);
        LinearGather.run(exchange, sig, in, recv, block, root);
    }

    private void scatter(Signature sig, MemorySegment send, MemorySegment recv, long block, int root) {
        if (block == 0) {
            return;
        }
        if (size == 1) {
            MemorySegment.copy(send, 0, recv, 0, block);
            return;
        }
        MemorySegment in = rank == root ? bounce.nativeOf(send, block * size, 1, true) : MemorySegment.NULL;
        agreeOnSignature(sig);
        LinearScatter.run(exchange, sig, in, recv, block, root);
    }

    /**
     * The signature round of a rooted collective on the message path (broadcast, reduce, gather, scatter): a
     * dissemination barrier whose zero-byte messages carry the operation's signature. In those algorithms some
     * ranks only send (the root of a broadcast, the leaves of a reduce) and so never check a peer's signature: ranks
     * that disagree on the root, count or type could return with divergent data and no error. After this round every
     * rank has heard, directly or through a rank that checked, from every other: a disagreement fails the operation
     * on every rank before any data moves. Cost: ceil(log2 n) small-message latencies (the direct path compares
     * every rank's signature in its first flag barrier already).
     */
    private void agreeOnSignature(Signature sig) {
        DisseminationBarrier.run(exchange, sig);
    }

    /** A barrier: over the direct path when it is on (what most collectives then use), else dissemination. */
    void barrier(Algorithm a, Signature sig) {
        if (size == 1) {
            return;
        }
        if (a == Algorithm.DIRECT) {
            barrier.await(sig, true);
        } else {
            DisseminationBarrier.run(exchange, sig);
        }
    }

    /** A one-rank collective's result is its input: copy it over unless the call is in place. */
    private static void copyUnlessInPlace(MemorySegment send, MemorySegment recv, long bytes) {
        if (!Blocks.same(send, recv)) {
            MemorySegment.copy(send, 0, recv, 0, bytes);
        }
    }
}
