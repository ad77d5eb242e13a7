package io.jccl.collectives.direct;

import io.jccl.collectives.DataType;
import io.jccl.collectives.ReduceOp;
import io.jccl.collectives.core.Blocks;
import io.jccl.collectives.core.Signature;
import io.jccl.collectives.kernel.ReduceKernels;
import io.jccl.collectives.memory.Allocations;

import java.lang.foreign.MemorySegment;
import java.util.Arrays;

/**
 * The direct all-reduces, by size: inline in the arrival records (up to {@link #INLINE_BYTES}), whole-vector from
 * every input (up to {@link #SMALL_BYTES}), and above that one of three the ranks agree on after a first barrier:
 * split (every input and output shared), pair (two ranks, separate outputs) or staged. Every rank reduces in rank
 * order, so all ranks hold bit-identical results. docs/collectives.md, "Algorithms" (Direct), has the measurements
 * behind the thresholds.
 */
public final class DirectAllReduce {
    /** Largest all-reduce (bytes) that travels inline in the arrival records. */
    public static final long INLINE_BYTES = ControlBlockFlyweight.INLINE_BYTES;
    /** Up to this size every rank reduces the whole vector itself ({@link #small}). */
    public static final long SMALL_BYTES = 32 * 1024;
    /** From this size a small all-reduce reads {@code allocate()} inputs where they are (a closing barrier pays). */
    public static final long SMALL_ZERO_COPY_BYTES = 4 * 1024;
    /**
     * Block of the split all-reduce: reduced into this rank's output, then copied into the other outputs while
     * still in this core's cache (64 KiB fits L2 with room).
     */
    static final long SPLIT_BLOCK_BYTES = 64 * 1024;

    private final DirectPath path;
    private final DirectBarrier barrier;
    private final Allocations allocations;
    private final ReduceKernels kernels;
    private final int rank;
    private final int size;
    private final Allocations.Slice input = new Allocations.Slice();
    private final Allocations.Slice output = new Allocations.Slice();
    /** Small all-reduces that read at least one input where it is, and all-reduces that took the split path. */
    private long zeroCopySmall;
    private long split;

    /** The direct all-reduce of {@code path}, meeting at {@code barrier}, reading {@code allocations} in place. */
    public DirectAllReduce(DirectPath path, DirectBarrier barrier, Allocations allocations, ReduceKernels kernels) {
        this.path = path;
        this.barrier = barrier;
        this.allocations = allocations;
        this.kernels = kernels;
        this.rank = path.rank();
        this.size = path.size();
    }

    /** Small all-reduces that read at least one input where it is (tests check which path ran). */
    public long zeroCopySmallAllReduces() {
        return zeroCopySmall;
    }

    /** All-reduces that took the split path (tests check which path ran). */
    public long splitAllReduces() {
        return split;
    }

    /** All-reduces {@code in} into {@code out} (any segments). */
    public void run(Signature sig, MemorySegment in, MemorySegment out, long count, DataType type, ReduceOp op) {
        int es = type.sizeBytes();
        if (count * es <= INLINE_BYTES) {
            inline(sig, in, out, count, type, op);
            return;
        }
        if (count * es <= Math.min(SMALL_BYTES, path.stagingBytes())) {
            small(sig, in, out, count, type, op);
            return;
        }
        Allocations.Slice zeroCopy = allocations.locate(in, input) ? input : null;
        long perRound = Math.max(1, path.stagingBytes() / es);
        int firstParity = choose(sig, in, out, count, type, op, perRound, zeroCopy);
        if (firstParity < 0) {
            return;
        }
        staged(sig, in, out, count, type, op, perRound, zeroCopy, firstParity);
    }

    /**
     * Inline (up to {@link #INLINE_BYTES}): every rank copies its input into its arrival record, meets the others in
     * one barrier and reduces all n records in rank order into {@code out}. No staging, no descriptor: flag,
     * signature and data share cache lines (one line up to 24 bytes).
     */
    private void inline(Signature sig, MemorySegment in, MemorySegment out, long count, DataType type, ReduceOp op) {
        long bytes = count * type.sizeBytes();
        long payload = ControlBlockFlyweight.payloadOffset(path.nextParity(), bytes);
        MemorySegment.copy(in, 0, path.self().segment(), payload, bytes);
        barrier.await(sig, true);
        MemorySegment[] src = path.sources;
        long[] offs = path.sourceOffsets;
        for (int j = 0; j < size; j++) {
            src[j] = path.control(j).segment();
            offs[j] = payload;
        }
        kernels.reduce(type, op, src, offs, size, out, 0, count, size);
    }

    /**
     * Up to {@link #SMALL_BYTES}: every rank reduces the whole vector from all inputs after one barrier. A rank whose
     * input is at least {@link #SMALL_ZERO_COPY_BYTES} of allocated memory that its output does not overlap
     * publishes it where it is; any other input is copied into the staging half first. Reading an input in place
     * saves that copy but costs a closing barrier (its owner must not reuse it while a peer still reads it); every
     * rank sees every descriptor after the first barrier, so all agree on that barrier.
     */
    private void small(Signature sig, MemorySegment in, MemorySegment out, long count, DataType type, ReduceOp op) {
        long bytes = count * type.sizeBytes();
        long half = path.half();
        boolean mineInPlace = bytes >= SMALL_ZERO_COPY_BYTES && Blocks.disjoint(in, out, bytes)
            && allocations.locate(in, input);
        int parity = path.publishInput(mineInPlace ? input : null, 0, in, 0, bytes);
        barrier.await(sig, true);
        boolean anyInPlace = mineInPlace;
        MemorySegment[] sources = path.sources;
        long[] offsets = path.sourceOffsets;
        for (int j = 0; j < size; j++) {
            if (j == rank) {
                sources[j] = mineInPlace ? in : path.staging(rank);
                offsets[j] = mineInPlace ? 0 : half;
            } else {
                sources[j] = path.peerInput(j, parity);
                offsets[j] = path.peerInputOffset(j, parity);
                anyInPlace |= path.control(j).inputIsAllocation(parity);
            }
        }
        kernels.reduce(type, op, sources, offsets, size, out, 0, count, size);
        path.round++;
        Arrays.fill(sources, null);
        if (anyInPlace) {
            zeroCopySmall++;
            barrier.await(sig, false);
        }
    }

    /**
     * The ranks choose among three algorithms, and must choose the same one although each knows only its own
     * buffers (in place or not is each rank's own choice, as in NCCL). The first round publishes, beside the input
     * descriptor, where this rank's output is and how it relates to its input; after the first barrier every rank
     * decides from the same facts:
     * <ul>
     * <li>every input and every output in allocated memory, each output either separate from its input or the input
     * itself: each rank reduces its slice from all inputs and writes it into all outputs ({@link #splitReduce}), the
     * least an all-reduce over shared memory can move, every element computed once;</li>
     * <li>two ranks whose outputs are both separate from their inputs: each rank reduces the whole vector from both
     * inputs into its own output ({@link #pair}): it never writes the peer's memory nor reads lines the peer has
     * just written;</li>
     * <li>otherwise the staged path ({@link #staged}), which continues from the first round.</li>
     * </ul>
     *
     * @return -1 when the all-reduce is done, else the first round's descriptor parity for the staged path
     */
    private int choose(Signature sig, MemorySegment in, MemorySegment out, long count, DataType type, ReduceOp op,
                       long perRound, Allocations.Slice zeroCopy) {
        int es = type.sizeBytes();
        long bytes = count * es;
        boolean inPlace = in.isNative() && out.isNative() && in.address() == out.address();
        boolean separate = Blocks.disjoint(in, out, bytes);
        int outId;
        long outOffset;
        if (separate) {
            boolean found = allocations.locate(out, output);
            outId = found ? output.id() : -1;
            outOffset = found ? output.offset() : 0;
        } else {
            outId = inPlace && zeroCopy != null ? zeroCopy.id() : -1;
            outOffset = zeroCopy != null ? zeroCopy.offset() : 0;
        }
        int parity = path.publishInput(zeroCopy, 0, in, 0, Math.min(perRound, count) * es);
        path.self().output(parity, outId, outOffset, (separate ? ControlBlockFlyweight.OUT_SEPARATE : 0)
            | (inPlace ? ControlBlockFlyweight.OUT_IN_PLACE : 0));
        barrier.await(sig, true);
        boolean allShared = zeroCopy != null && outId >= 0 && path.allPeersZeroCopy(parity);
        boolean allSeparate = separate;
        for (int j = 0; j < size; j++) {
            if (j == rank) {
                continue;
            }
            ControlBlockFlyweight c = path.control(j);
            long flags = c.outputFlags(parity);
            allShared &= c.outputIsAllocation(parity)
                && (flags & (ControlBlockFlyweight.OUT_SEPARATE | ControlBlockFlyweight.OUT_IN_PLACE)) != 0;
            allSeparate &= (flags & ControlBlockFlyweight.OUT_SEPARATE) != 0;
        }
        if (allShared) {
            MemorySegment[] sources = path.sources;
            MemorySegment[] outputs = path.outputs;
            for (int j = 0; j < size; j++) {
                if (j == rank) {
                    sources[j] = in;
                    path.sourceOffsets[j] = 0;
                    outputs[j] = out;
                    path.outputOffsets[j] = 0;
                    continue;
                }
                ControlBlockFlyweight c = path.control(j);
                sources[j] = path.peerInput(j, parity);
                path.sourceOffsets[j] = path.peerInputOffset(j, parity);
                outputs[j] = path.mappedAllocation(j, c.outputAllocationId(parity), true);
                path.outputOffsets[j] = c.outputOffset(parity);
            }
            splitReduce(count, type, op);
            Arrays.fill(sources, null);
            Arrays.fill(outputs, null);
            path.round++;
            // no rank returns while another still reads its input or writes its output
            barrier.await(sig, false);
            return -1;
        }
        if (size == 2 && allSeparate) {
            pair(sig, in, out, count, type, op, perRound, parity, zeroCopy);
            return -1;
        }
        return parity;
    }

    /**
     * Two ranks, whole vector: in rounds of the staging size whether or not this rank's input is zero copy (the
     * peer's may not be, and both ranks must meet in the same barriers); the first round was published and met at
     * {@code firstParity}. A closing barrier keeps either input from being reused while the other still reads it.
     */
    private void pair(Signature sig, MemorySegment in, MemorySegment out, long count, DataType type, ReduceOp op,
                      long perRound, int firstParity, Allocations.Slice zeroCopy) {
        int es = type.sizeBytes();
        int peer = 1 - rank;
        for (long base = 0; base < count; base += perRound) {
            long n = Math.min(perRound, count - base);
            int parity = firstParity;
            if (base > 0) {
                parity = path.publishInput(zeroCopy, base * es, in, base * es, n * es);
                barrier.await(sig, false);
            }
            // rank order, so that both ranks compute bit-identical results; the two-source kernel call
            MemorySegment theirs = path.peerInput(peer, parity);
            long theirOffset = path.peerInputOffset(peer, parity);
            if (rank == 0) {
                kernels.reduce(type, op, in, base * es, theirs, theirOffset, out, base * es, n, 2);
            } else {
                kernels.reduce(type, op, theirs, theirOffset, in, base * es, out, base * es, n, 2);
            }
            path.round++;
        }
        // the peer may still read this rank's input (or staging half) until it too has reduced
        barrier.await(sig, false);
    }

    /**
     * This rank's slice of an all-reduce over shared buffers: {@code outputs[rank] = sum of sources} (rank order)
     * over its block of the vector, a block at a time, each block then copied, still cached, into every other
     * rank's output.
     */
    private void splitReduce(long count, DataType type, ReduceOp op) {
        int es = type.sizeBytes();
        long lo = Blocks.start(count, size, rank);
        long end = lo + Blocks.count(count, size, rank);
        long step = Math.max(1, SPLIT_BLOCK_BYTES / es);
        MemorySegment[] sources = path.sources;
        long[] offsets = path.sourceOffsets;
        MemorySegment mine = path.outputs[rank];
        split++;
        for (long i = lo; i < end; i += step) {
            long n = Math.min(step, end - i);
            if (size == 2) {
                // the two-source kernel call (no array of sources to read through)
                kernels.reduce(type, op, sources[0], offsets[0] + i * es, sources[1], offsets[1] + i * es, mine,
                    i * es, n, 2);
            } else {
                for (int j = 0; j < size; j++) {
                    path.blockOffsets[j] = offsets[j] + i * es;
                }
                kernels.reduce(type, op, sources, path.blockOffsets, size, mine, i * es, n, size);
            }
            for (int j = 0; j < size; j++) {
                if (j != rank) {
                    MemorySegment.copy(mine, i * es, path.outputs[j], path.outputOffsets[j] + i * es, n * es);
                }
            }
        }
    }

    /**
     * The staged path, in rounds of the staging size: each rank reduces its block from every rank's staged (or
     * in-place) input into its own staging half, then after a barrier every rank copies every block out. The
     * first round was published and met by {@link #choose} at {@code firstParity}.
     */
    private void staged(Signature sig, MemorySegment in, MemorySegment out, long count, DataType type, ReduceOp op,
                        long perRound, Allocations.Slice zeroCopy, int firstParity) {
        int es = type.sizeBytes();
        MemorySegment[] sources = path.sources;
        long[] offsets = path.sourceOffsets;
        boolean first = true;
        for (long base = 0; base < count || first; base += perRound) {
            long n = Math.min(perRound, count - base);
            long half = path.half();
            MemorySegment mine = path.staging(rank);
            int parity = firstParity;
            if (!first) {
                parity = path.publishInput(zeroCopy, base * es, in, base * es, n * es);
                barrier.await(sig, false);
            }
            first = false;
            long lo = Blocks.start(n, size, rank);
            long cnt = Blocks.count(n, size, rank);
            for (int j = 0; j < size; j++) {
                if (j == rank) {
                    sources[j] = zeroCopy != null ? in : mine;
                    offsets[j] = zeroCopy != null ? (base + lo) * es : half + lo * es;
                    continue;
                }
                sources[j] = path.peerInput(j, parity);
                offsets[j] = path.peerInputOffset(j, parity) + lo * es;
            }
            if (cnt > 0) {
                kernels.reduce(type, op, sources, offsets, size, mine, half + lo * es, cnt, size);
            }
            barrier.await(sig, false);
            for (int j = 0; j < size; j++) {
                long jl = Blocks.start(n, size, j);
                long jc = Blocks.count(n, size, j);
                if (jc > 0) {
                    MemorySegment.copy(path.staging(j), half + jl * es, out, (base + jl) * es, jc * es);
                }
            }
            path.round++;
            if (count == 0) {
                break;
            }
        }
        Arrays.fill(sources, null);
    }
}
