package io.jccl.collectives;

import java.lang.foreign.MemorySegment;

/** A small nccl-tests-style all-reduce benchmark (time per op, algbw, busbw) used by the multi-JVM test. */
final class Bench {
    private Bench() {
    }

    static void run(Communicator c, String[] args) {
        long[] sizes = {8, 1024, 65536, 1 << 20, 16 << 20};
        int n = c.size();
        if (c.rank() == 0) {
            System.out.printf("# allreduce float32 sum, %d ranks, algorithm auto%n", n);
            System.out.printf("# %10s %8s %12s %10s %10s%n", "size(B)", "algo", "time(us)", "algbw", "busbw");
        }
        for (long bytes : sizes) {
            long count = bytes / 4;
            MemorySegment buf = c.allocate(bytes);
            int warm = 5;
            int iters = bytes <= 65536 ? 2000 : bytes <= (1 << 20) ? 200 : 20;
            for (int i = 0; i < warm; i++) {
                c.allReduce(buf, count, DataType.FLOAT32, ReduceOp.SUM);
            }
            c.barrier();
            long t0 = System.nanoTime();
            for (int i = 0; i < iters; i++) {
                c.allReduce(buf, count, DataType.FLOAT32, ReduceOp.SUM);
            }
            long ns = System.nanoTime() - t0;
            double us = ns / 1e3 / iters;
            double algbw = bytes / (us * 1e3);
            double busbw = algbw * 2 * (n - 1) / n;
            if (c.rank() == 0) {
                System.out.printf("  %10d %8s %12.2f %10.3f %10.3f%n", bytes,
                    c.algorithmFor(Collective.ALL_REDUCE, bytes).shortName(), us, algbw, busbw);
            }
        }
    }
}
