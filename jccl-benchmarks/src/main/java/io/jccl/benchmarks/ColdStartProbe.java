package io.jccl.benchmarks;

import io.jccl.collectives.Communicator;
import io.jccl.collectives.DataType;
import io.jccl.collectives.ReduceOp;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Locale;

/**
 * Cold start as an application meets it (issue 16, bug 8): in a fresh JVM, the time to create the communicator
 * ({@link Communicator#fromEnvironment()}) and the times of its 1st, 2nd and 10th 8 B float32 sum all-reduce, on
 * the application's own (off-heap) buffers, with no warm-up of its own. Each rank prints
 * {@code cold,<rank>,<create ms>,<1st us>,<2nd us>,<10th us>,<create + 10 all-reduces ms>}. Run it under {@code mpirun}, {@code ./jccl run} or
 * with JCCL_RANK/JCCL_WORLD_SIZE/JCCL_STORE_ADDR; docs/collectives.md ("Cold start") has the commands and numbers.
 */
public final class ColdStartProbe {
    private static final int OPS = 10;

    private ColdStartProbe() {
    }

    /** Entry point (no arguments). */
    public static void main(String[] args) {
        long t0 = System.nanoTime();
        int status = 0;
        try (Communicator comm = Communicator.fromEnvironment(); Arena arena = Arena.ofShared()) {
            long createdNs = System.nanoTime() - t0;
            MemorySegment send = arena.allocate(8, 64);
            MemorySegment recv = arena.allocate(8, 64);
            long[] opNs = new long[OPS];
            for (int i = 0; i < OPS; i++) {
                send.set(ValueLayout.JAVA_FLOAT, 0, comm.rank() + i);
                send.set(ValueLayout.JAVA_FLOAT, 4, 1f);
                long s = System.nanoTime();
                comm.allReduce(send, recv, 2, DataType.FLOAT32, ReduceOp.SUM);
                opNs[i] = System.nanoTime() - s;
                if (recv.get(ValueLayout.JAVA_FLOAT, 4) != comm.size()) {
                    throw new IllegalStateException("wrong all-reduce result " + recv.get(ValueLayout.JAVA_FLOAT, 4));
                }
            }
            long doneNs = System.nanoTime() - t0;
            System.out.printf(Locale.ROOT, "cold,%d,%.2f,%.1f,%.1f,%.1f,%.2f%n", comm.rank(), createdNs / 1e6,
                opNs[0] / 1e3, opNs[1] / 1e3, opNs[OPS - 1] / 1e3, doneNs / 1e6);
            System.out.flush();
        } catch (Exception e) {
            System.err.println("cold start probe failed: " + e);
            status = 1;
        }
        System.exit(status);
    }
}
