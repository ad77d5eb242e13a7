package io.jccl.collectives;

import java.lang.foreign.MemorySegment;

/**
 * A small nccl-tests-style all-reduce benchmark (time per op, algbw, busbw = algbw × 2(n-1)/n), float32 sum,
 * in place on {@link Communicator#allocate} memory. Each size warms up, then runs blocks of ~0.2 s; the reported
 * time is the best block's mean (the machine is shared and noisy), agreed on by all ranks (max over ranks).
 */
final class Bench {
    private Bench() {
    }

    static void run(Communicator c, String[] args) {
        long[] sizes = {8, 1024, 32768, 65536, 1 << 20, 16 << 20};
        int n = c.size();
        if (c.rank() == 0) {
            System.out.printf("# allreduce float32 sum in place, %d ranks, JCCL_ALGO=%s%n", n,
                c.options().algorithms().isEmpty() ? "auto" : c.options().algorithms());
            System.out.printf("# %10s %8s %12s %10s %10s%n", "size(B)", "algo", "time(us)", "algbw", "busbw");
        }
        double[] timing = new double[1];
        MemorySegment t = MemorySegment.ofArray(timing);
        for (long bytes : sizes) {
            long count = bytes / 4;
            MemorySegment buf = c.allocate(bytes);
            // warm up, then agree (max over ranks) on iterations that make a block ~0.2 s: every rank must run the
            // same number of operations (a rank-local count would be a collective mismatch)
            int warm = bytes <= 65536 ? 200 : 5;
            long w0 = System.nanoTime();
            for (int i = 0; i < warm; i++) {
                c.allReduce(buf, count, DataType.FLOAT32, ReduceOp.SUM);
            }
            timing[0] = (System.nanoTime() - w0) / 1e3 / warm;
            c.allReduce(t, 1, DataType.FLOAT64, ReduceOp.MAX);
            int iters = (int) Math.max(3, Math.min(50_000, 200_000 / timing[0]));
            double best = Double.MAX_VALUE;
            for (int block = 0; block < 5; block++) {
                c.barrier();
                long t0 = System.nanoTime();
                for (int i = 0; i < iters; i++) {
                    c.allReduce(buf, count, DataType.FLOAT32, ReduceOp.SUM);
                }
                timing[0] = (System.nanoTime() - t0) / 1e3 / iters;
                c.allReduce(t, 1, DataType.FLOAT64, ReduceOp.MAX);
                best = Math.min(best, timing[0]);
            }
            double algbw = bytes / (best * 1e3);
            double busbw = algbw * 2 * (n - 1) / n;
            if (c.rank() == 0) {
                System.out.printf("  %10d %8s %12.2f %10.3f %10.3f%n", bytes,
                    c.algorithmFor(Collective.ALL_REDUCE, bytes).shortName(), best, algbw, busbw);
            }
        }
    }
}
