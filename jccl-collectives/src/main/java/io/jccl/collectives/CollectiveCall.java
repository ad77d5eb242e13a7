package io.jccl.collectives;

import java.lang.foreign.MemorySegment;

/**
 * One collective call as every rank issues it (NCCL's {@code ncclInfo}): the operation, this rank's buffers, count,
 * type, operator and root, and the size that prices it (nccl-tests' size). Blocking and asynchronous calls are
 * checked by the same {@link #checkedBytes} before they take their turn, and run from the same descriptor: a
 * blocking call fills the communicator's one reusable descriptor once it holds the turn (nothing allocated per
 * call), an asynchronous call its own.
 */
final class CollectiveCall {
    Collective collective;
    MemorySegment send;
    MemorySegment recv;
    long count;
    DataType type;
    ReduceOp op;
    /** The root, the peer of a point-to-point call, or -1. */
    int root;
    /** The size the cost model prices and the flight recorder shows. */
    long bytes;
    /** What a point-to-point group or a window operation runs (null for the collectives). */
    Runnable action;

    CollectiveCall set(Collective collective, MemorySegment send, MemorySegment recv, long count, DataType type,
                       ReduceOp op, int root, long bytes) {
        this.collective = collective;
        this.send = send;
        this.recv = recv;
        this.count = count;
        this.type = type;
        this.op = op;
        this.root = root;
        this.bytes = bytes;
        this.action = null;
        return this;
    }

    /** A point-to-point group or window operation running {@code action}. */
    CollectiveCall action(Collective collective, long count, DataType type, int peer, long bytes, Runnable action) {
        set(collective, null, null, count, type, null, peer, bytes);
        this.action = action;
        return this;
    }

    /**
     * Checks a call of {@code collective} by {@code rank} of {@code size} and returns its size (nccl-tests': the
     * vector for reductions and broadcasts, all blocks for the gather family). Root-only buffers are checked on the
     * root only (others may pass null).
     *
     * @throws IllegalArgumentException for a bad root, a negative count, or a buffer too small (or null)
     */
    static long checkedBytes(Collective collective, int rank, int size, MemorySegment send, MemorySegment recv,
                             long count, DataType type, int root) {
        if (collective == Collective.BARRIER) {
            return 0;
        }
        if (count < 0) {
            throw new IllegalArgumentException("count " + count + " is negative");
        }
        long element = count * type.sizeBytes();
        boolean isRoot = rank == root;
        switch (collective) {
            case ALL_REDUCE -> {
                checkSize(send, element, "send");
                checkSize(recv, element, "recv");
                return element;
            }
            case BROADCAST -> {
                checkRoot(root, size);
                if (isRoot) {
                    checkSize(send, element, "send");
                }
                checkSize(recv, element, "recv");
                return element;
            }
            case REDUCE -> {
                checkRoot(root, size);
                checkSize(send, element, "send");
                if (isRoot) {
                    checkSize(recv, element, "recv");
                }
                return element;
            }
            case ALL_GATHER -> {
                checkSize(send, element, "send");
                checkSize(recv, element * size, "recv");
                return element * size;
            }
            case REDUCE_SCATTER -> {
                checkSize(send, element * size, "send");
                checkSize(recv, element, "recv");
                return element * size;
            }
            case ALL_TO_ALL -> {
                checkSize(send, element * size, "send");
                checkSize(recv, element * size, "recv");
                return element * size;
            }
            case GATHER -> {
                checkRoot(root, size);
                checkSize(send, element, "send");
                if (isRoot) {
                    checkSize(recv, element * size, "recv");
                }
                return element * size;
            }
            case SCATTER -> {
                checkRoot(root, size);
                if (isRoot) {
                    checkSize(send, element * size, "send");
                }
                checkSize(recv, element, "recv");
                return element * size;
            }
            default -> throw new IllegalArgumentException(collective + " is not checked here");
        }
    }

    static void checkRoot(int root, int size) {
        if (root < 0 || root >= size) {
            throw new IllegalArgumentException("root " + root + " outside 0.." + (size - 1));
        }
    }

    static void checkSize(MemorySegment seg, long bytes, String what) {
        if (seg == null) {
            throw new IllegalArgumentException(what + " buffer is null");
        }
        if (seg.byteSize() < bytes) {
            throw new IllegalArgumentException(what + " buffer holds " + seg.byteSize() + " bytes, the operation needs "
                + bytes);
        }
    }
}
