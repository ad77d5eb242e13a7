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
     * @throws IllegalArgumentException for a bad root, a negative or overflowing count, a null type, or a buffer too
     *     small (or null)
     */
    static long checkedBytes(Collective collective, int rank, int size, MemorySegment send, MemorySegment recv,
                             long count, DataType type, int root) {
        if (collective == Collective.BARRIER) {
            return 0;
        }
        if (count < 0) {
            throw new IllegalArgumentException("count " + count + " is negative");
        }
        if (type == null) {
            throw new IllegalArgumentException("data type is null");
        }
        // Checked before anything is sent (NCCL's ncclInvalidArgument): an overflowing size would otherwise pass
        // the buffer checks and fail deep inside, on some ranks only.
        long element = bytes(count, type.sizeBytes(), "count " + count + " of " + type);
        long all = collective == Collective.ALL_GATHER || collective == Collective.REDUCE_SCATTER
            || collective == Collective.ALL_TO_ALL || collective == Collective.GATHER || collective == Collective.SCATTER
            ? bytes(element, size, "count " + count + " of " + type + " for each of " + size + " ranks") : element;
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
                checkSize(recv, all, "recv");
                return all;
            }
            case REDUCE_SCATTER -> {
                checkSize(send, all, "send");
                checkSize(recv, element, "recv");
                return all;
            }
            case ALL_TO_ALL -> {
                checkSize(send, all, "send");
                checkSize(recv, all, "recv");
                return all;
            }
            case GATHER -> {
                checkRoot(root, size);
                checkSize(send, element, "send");
                if (isRoot) {
                    checkSize(recv, all, "recv");
                }
                return all;
            }
            case SCATTER -> {
                checkRoot(root, size);
                if (isRoot) {
                    checkSize(send, all, "send");
                }
                checkSize(recv, element, "recv");
                return all;
            }
            default -> throw new IllegalArgumentException(collective + " is not checked here");
        }
    }

    /** {@code a × b} bytes, or an error naming {@code what} when that does not fit a {@code long}. */
    static long bytes(long a, long b, String what) {
        try {
            return Math.multiplyExact(a, b);
        } catch (ArithmeticException e) {
            throw new IllegalArgumentException(what + " overflows: more than " + Long.MAX_VALUE + " bytes");
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
