package io.jccl.collectives;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;

/**
 * One rank of {@link PartitionSystemTest} (run by {@link MultiProcessMain} as mode {@code partition}): all-reduces
 * until the test cuts a host off, then revokes and shrinks. A rank that shrinks prints {@code SHRUNK rank R size S sum
 * X} (X: the all-reduce of the members' old rank + 1, checked by the test), waits for a line on stdin (the test heals
 * the cut meanwhile and lets the cut-off side try again), checks a second all-reduce ({@code CHECKED}) and exits.
 * A rank whose shrink fails prints {@code SHRINK FAILED rank R after MS ms: message}, waits for a line on stdin (the
 * heal), shrinks again and prints {@code EXCLUDED rank R: message} when that fails too, or {@code REJOINED} if not.
 */
final class PartitionMain {
    private PartitionMain() {
    }

    static void run(Communicator c) throws Exception {
        int original = c.rank();
        BufferedReader stdin = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        float[] v = new float[16];
        long iterations = 0;
        try {
            while (true) {
                c.allReduce(v, ReduceOp.SUM);
                if (++iterations == 20) {
                    System.out.println("RUNNING rank " + original);
                    System.out.flush();
                }
            }
        } catch (CollectiveException e) {
            System.out.println("FAILED rank " + original + " after " + iterations + ": " + e.getClass().getSimpleName());
            System.out.flush();
        }
        c.revoke("partition test");
        long t0 = System.nanoTime();
        Communicator s;
        try {
            s = c.shrink();
        } catch (CollectiveException e) {
            System.out.println("SHRINK FAILED rank " + original + " after " + (System.nanoTime() - t0) / 1_000_000
                + " ms: " + e.getClass().getSimpleName() + ": " + e.getMessage());
            System.out.flush();
            stdin.readLine(); // healed
            try (Communicator again = c.shrink()) {
                System.out.println("REJOINED rank " + original + " size " + again.size());
            } catch (CollectiveException e2) {
                System.out.println("EXCLUDED rank " + original + ": " + e2.getClass().getSimpleName() + ": "
                    + e2.getMessage());
            }
            System.out.flush();
            return;
        }
        try (s) {
            long ms = (System.nanoTime() - t0) / 1_000_000;
            System.out.println("SHRUNK rank " + original + " size " + s.size() + " sum " + (int) sum(s, original)
                + " in " + ms + " ms");
            System.out.flush();
            stdin.readLine(); // the cut-off side has tried again after the heal
            System.out.println("CHECKED rank " + original + " size " + s.size() + " sum " + (int) sum(s, original));
            System.out.flush();
            s.barrier(); // rank 0 serves the store: nobody closes before all have printed
        }
    }

    private static float sum(Communicator s, int original) {
        float[] v = new float[16];
        java.util.Arrays.fill(v, original + 1);
        s.allReduce(v, ReduceOp.SUM);
        for (float x : v) {
            if (x != v[0]) {
                throw new IllegalStateException("all-reduce elements differ: " + java.util.Arrays.toString(v));
            }
        }
        return v[0];
    }
}
