package io.jccl.benchmarks;

import io.jccl.collectives.Collective;
import io.jccl.collectives.Communicator;
import io.jccl.collectives.DataType;
import io.jccl.collectives.ReduceOp;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * The JCCL {@link Communicator} as a {@link BenchBackend}: {@link Communicator#fromEnvironment()} (the variables
 * {@code ./jccl run} sets; JCCL_TRANSPORT, JCCL_DIRECT_DISABLE … pick the path), buffers from
 * {@link Communicator#allocate}, float32 SUM.
 */
final class JcclBackend implements BenchBackend {
    private final Communicator comm;
    /** Buffers of {@link #maxOverRanks}, allocated at its first call (not inside StartupProbe's timed creation). */
    private MemorySegment scalarSend;
    private MemorySegment scalarRecv;

    private JcclBackend(Communicator comm) {
        this.comm = comm;
    }

    static BenchBackend fromEnvironment() {
        return new JcclBackend(Communicator.fromEnvironment());
    }

    @Override
    public int rank() {
        return comm.rank();
    }

    @Override
    public int size() {
        return comm.size();
    }

    @Override
    public String describe() {
        StringBuilder sb = new StringBuilder("JCCL ");
        String v = Communicator.class.getPackage().getImplementationVersion();
        sb.append(v == null ? "0.2.0" : v).append(", Java ").append(Runtime.version());
        if (comm.size() > 1) {
            sb.append("; rank 0 -> 1 via ").append(comm.transportOf(1));
        }
        sb.append("; direct ").append(comm.directAvailable() ? "on" : "off");
        return sb.toString();
    }

    /** The algorithm the communicator picks for a collective and nccl-tests size (for '#' comment lines). */
    @Override
    public String algorithm(String op, long bytes) {
        Collective c = switch (op) {
            case "allreduce", CollectiveBench.ALLREDUCE_IN_PLACE -> Collective.ALL_REDUCE;
            case "allgather" -> Collective.ALL_GATHER;
            default -> Collective.BROADCAST;
        };
        try {
            return comm.algorithmFor(c, bytes).shortName();
        } catch (RuntimeException e) {
            return "?";
        }
    }

    @Override
    public MemorySegment allocate(long bytes) {
        return comm.allocate(bytes);
    }

    @Override
    public void free(MemorySegment segment) {
        // Communicator memory lives until close.
    }

    @Override
    public void barrier() {
        comm.barrier();
    }

    @Override
    public void allReduceSum(MemorySegment send, MemorySegment recv, long count) {
        comm.allReduce(send, recv, count, DataType.FLOAT32, ReduceOp.SUM);
    }

    @Override
    public void broadcast(MemorySegment buffer, long count, int root) {
        comm.broadcast(buffer, count, DataType.FLOAT32, root);
    }

    @Override
    public void allGather(MemorySegment send, MemorySegment recv, long count) {
        comm.allGather(send, recv, count, DataType.FLOAT32);
    }

    @Override
    public double maxOverRanks(double value) {
        if (scalarSend == null) {
            scalarSend = comm.allocate(8);
            scalarRecv = comm.allocate(8);
        }
        scalarSend.set(ValueLayout.JAVA_DOUBLE, 0, value);
        comm.allReduce(scalarSend, scalarRecv, 1, DataType.FLOAT64, ReduceOp.MAX);
        return scalarRecv.get(ValueLayout.JAVA_DOUBLE, 0);
    }

    @Override
    public void close() {
        comm.close();
    }
}
