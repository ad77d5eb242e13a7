package io.jccl.tools.colltests;

import io.jccl.collectives.Communicator;
import io.jccl.collectives.DataType;
import io.jccl.collectives.ReduceOp;

import java.lang.foreign.MemorySegment;

/**
 * One nccl-tests program as a descriptor ({@code struct testColl}): how a size maps to element counts, how ranks'
 * inputs are laid out out-of-place and in-place, how to run it, and what every rank must find afterwards.
 *
 * <p>Inputs are small integers ({@link #value}), so every reduction is exact in every data type whatever order the
 * algorithm reduces in, and a check can demand equality (AVG allows rounding).
 */
final class CollectiveTest {
    private final BusBandwidth kind;
    private final int ranks;
    private final int rank;
    private final DataType type;
    private final ReduceOp op;
    private final int root;

    CollectiveTest(BusBandwidth kind, int ranks, int rank, DataType type, ReduceOp op, int root) {
        this.kind = kind;
        this.ranks = ranks;
        this.rank = rank;
        this.type = type;
        this.op = op;
        this.root = root;
    }

    /** Whether the collective reduces (prints its redop; else "none"). */
    boolean reduces() {
        return kind == BusBandwidth.ALL_REDUCE || kind == BusBandwidth.REDUCE || kind == BusBandwidth.REDUCE_SCATTER;
    }

    /** Whether it has a root (prints it; else -1). */
    boolean rooted() {
        return kind == BusBandwidth.BROADCAST || kind == BusBandwidth.REDUCE || kind == BusBandwidth.GATHER
            || kind == BusBandwidth.SCATTER;
    }

    /** Elements per rank block for a requested size, as nccl-tests' GetCollByteCount (0 when too small). */
    long blockCount(long sizeBytes) {
        long elements = sizeBytes / type.sizeBytes();
        return switch (kind) {
            case ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, GATHER, SCATTER -> elements / ranks;
            default -> elements;
        };
    }

    /** The size column (bytes) for a block count: S of the nccl-tests table. */
    long sizeBytes(long block) {
        return switch (kind) {
            case ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, GATHER, SCATTER -> block * ranks * type.sizeBytes();
            default -> block * type.sizeBytes();
        };
    }

    /** Elements of the send buffer. */
    long sendElements(long block) {
        return switch (kind) {
            case REDUCE_SCATTER, ALL_TO_ALL, SCATTER -> block * ranks;
            default -> block;
        };
    }

    /** Elements of the receive buffer. */
    long recvElements(long block) {
        return switch (kind) {
            case ALL_GATHER, ALL_TO_ALL, GATHER -> block * ranks;
            default -> block;
        };
    }

    /** The send segment: its own buffer out-of-place, a part of the receive buffer in-place (nccl-tests' offsets). */
    MemorySegment send(MemorySegment sendBuffer, MemorySegment recvBuffer, long block, boolean inPlace) {
        long bytes = sendElements(block) * type.sizeBytes();
        if (!inPlace) {
            return sendBuffer.asSlice(0, bytes);
        }
        return switch (kind) {
            case ALL_GATHER, GATHER -> recvBuffer.asSlice(rank * bytes, bytes);
            default -> recvBuffer.asSlice(0, bytes);
        };
    }

    /** The receive segment. */
    MemorySegment recv(MemorySegment recvBuffer, long block, boolean inPlace) {
        long bytes = recvElements(block) * type.sizeBytes();
        if (inPlace && (kind == BusBandwidth.REDUCE_SCATTER || kind == BusBandwidth.SCATTER)) {
            return recvBuffer.asSlice(rank * bytes, bytes);
        }
        return recvBuffer.asSlice(0, bytes);
    }

    /** Bytes each of the two buffers needs for {@code block}. */
    long bufferBytes(long block) {
        return Math.max(sendElements(block), recvElements(block)) * type.sizeBytes();
    }

    /** Runs the collective once. */
    void run(Communicator comm, MemorySegment send, MemorySegment recv, long block) {
        switch (kind) {
            case ALL_REDUCE -> comm.allReduce(send, recv, block, type, op);
            case REDUCE -> comm.reduce(send, recv, block, type, op, root);
            case BROADCAST -> comm.broadcast(send, recv, block, type, root);
            case ALL_GATHER -> comm.allGather(send, recv, block, type);
            case REDUCE_SCATTER -> comm.reduceScatter(send, recv, block, type, op);
            case ALL_TO_ALL -> comm.allToAll(send, recv, block, type);
            case GATHER -> comm.gather(send, recv, block, type, root);
            case SCATTER -> comm.scatter(send, recv, block, type, root);
            case SEND_RECV -> {
                comm.groupStart();
                comm.send(send, block, type, (rank + 1) % ranks);
                comm.recv(recv, block, type, (rank - 1 + ranks) % ranks);
                comm.groupEnd();
            }
        }
    }

    /** Input element {@code i} of rank {@code r}: 1..3 (1..2 for PROD, so products stay exact). */
    double value(int r, long i) {
        return op == ReduceOp.PROD && reduces() ? 1 + (r + i) % 2 : 1 + (r + i) % 3;
    }

    /** Fills this rank's send data. In-place layouts fill the part of the receive buffer that is the input. */
    void initialize(MemorySegment send, long block) {
        long n = sendElements(block);
        for (long i = 0; i < n; i++) {
            Elements.set(send, type, i, value(rank, i));
        }
    }

    /** Counts the elements of {@code recv} that differ from the expected result on this rank. */
    long check(MemorySegment recv, long block) {
        if ((kind == BusBandwidth.REDUCE || kind == BusBandwidth.GATHER) && rank != root) {
            return 0;
        }
        long n = recvElements(block);
        long wrong = 0;
        for (long i = 0; i < n; i++) {
            double expected = expected(i, block);
            double actual = Elements.get(recv, type, i);
            if (!matches(actual, expected)) {
                wrong++;
            }
        }
        return wrong;
    }

    private boolean matches(double actual, double expected) {
        if (actual == expected) {
            return true;
        }
        if (op == ReduceOp.AVG && reduces()) {
            double tolerance = switch (type) {
                case BFLOAT16 -> 1e-2;
                case FLOAT16 -> 2e-3;
                case INT8, UINT8, INT32, INT64 -> 1.0;
                default -> 1e-6;
            };
            return Math.abs(actual - expected) <= tolerance * Math.max(1, Math.abs(expected));
        }
        return false;
    }

    private double expected(long i, long block) {
        return switch (kind) {
            case ALL_REDUCE, REDUCE -> reduce(i);
            case BROADCAST -> value(root, i);
            case ALL_GATHER, GATHER -> value((int) (i / block), i % block);
            case REDUCE_SCATTER -> reduce(rank * block + i);
            case ALL_TO_ALL -> value((int) (i / block), rank * block + i % block);
            case SCATTER -> value(root, rank * block + i);
            case SEND_RECV -> value((rank - 1 + ranks) % ranks, i);
        };
    }

    private double reduce(long i) {
        double acc = value(0, i);
        for (int r = 1; r < ranks; r++) {
            double v = value(r, i);
            acc = switch (op) {
                case SUM, AVG -> acc + v;
                case PROD -> acc * v;
                case MIN -> Math.min(acc, v);
                case MAX -> Math.max(acc, v);
            };
        }
        if (op == ReduceOp.AVG) {
            acc = type.isFloatingPoint() ? acc / ranks : Math.floor(acc / ranks);
        }
        return acc;
    }
}
