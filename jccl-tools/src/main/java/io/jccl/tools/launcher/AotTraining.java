package io.jccl.tools.launcher;

import io.jccl.collectives.Communicator;
import io.jccl.collectives.DataType;
import io.jccl.collectives.ReduceOp;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * The training workload of the AOT caches {@code ./jccl} builds once per build ({@code jccl run -np 2 --java
 * io.jccl.tools.launcher.AotTraining}): what a typical rank does first, so the classes and method profiles of
 * exactly that path are in the cache. Joins the communicator from the launcher's environment, then a barrier and
 * a few small collectives (fp32 allreduce at 8 B and 4 KiB, broadcast, allgather, a double allreduce), and
 * checks the results so a broken build fails the training instead of caching garbage.
 */
public final class AotTraining {
    private AotTraining() {
    }

    /** Entry point (no arguments). */
    public static void main(String[] args) {
        try (Communicator comm = Communicator.fromEnvironment()) {
            comm.barrier();
            int n = comm.size();
            for (long count : new long[] {2, 1024}) {
                MemorySegment send = comm.allocate(4 * count);
                MemorySegment recv = comm.allocate(4 * count);
                for (long i = 0; i < count; i++) {
                    send.setAtIndex(ValueLayout.JAVA_FLOAT, i, comm.rank() + 1);
                }
                comm.allReduce(send, recv, count, DataType.FLOAT32, ReduceOp.SUM);
                check(recv.getAtIndex(ValueLayout.JAVA_FLOAT, count - 1) == n * (n + 1) / 2f, "allreduce");
                comm.broadcast(send, recv, count, DataType.FLOAT32, 0);
                check(recv.getAtIndex(ValueLayout.JAVA_FLOAT, 0) == 1f, "broadcast");
                MemorySegment all = comm.allocate(4 * count * n);
                comm.allGather(send, all, count, DataType.FLOAT32);
                check(all.getAtIndex(ValueLayout.JAVA_FLOAT, count * n - 1) == n, "allgather");
            }
            double[] d = {comm.rank()};
            comm.allReduce(d, ReduceOp.MAX);
            check(d[0] == n - 1, "allreduce double max");
            comm.barrier();
        }
    }

    private static void check(boolean ok, String what) {
        if (!ok) {
            throw new IllegalStateException("AOT training: wrong " + what + " result");
        }
    }
}
