package io.jccl.tools.demo;

import io.jccl.examples.digits.DigitsDataset;
import io.jccl.examples.digits.MultilayerPerceptron;
import io.jccl.collectives.Communicator;
import io.jccl.collectives.DataType;
import io.jccl.collectives.ReduceOp;
import io.jccl.tools.JitSettle;
import io.jccl.tools.colltests.BusBandwidth;
import io.jccl.tools.colltests.TestsCommand;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Locale;
import java.util.zip.CRC32;

/**
 * One rank of {@code jccl demo}: rank 0 says which providers serve the peers (the communicator's one-line summary), trains the digits classifier data-parallel
 * (gradients summed with allreduce every step), checks that every rank ends with bit-identical weights and that
 * they match single-process training on the whole set, then prints a short nccl-tests-style allreduce table.
 * Exits with status 1 when a check fails.
 */
public final class DemoRank {
    /** Largest difference allowed between data-parallel and single-process weights (summation order differs). */
    static final double WEIGHT_TOLERANCE = 1e-4;
    private static final int HIDDEN = 32;
    private static final int BATCH = 64;
    private static final float LEARNING_RATE = 0.5f;
    private static final long MODEL_SEED = 42;
    private static final long SHUFFLE_SEED = 11;
    private static final int TEST_IMAGES = 297;

    private DemoRank() {
    }

    /** Entry point; args: [epochs]. */
    public static void main(String[] args) {
        int epochs = args.length > 0 ? Integer.parseInt(args[0]) : 30;
        boolean ok;
        try (Communicator communicator = Communicator.fromEnvironment()) {
            ok = run(communicator, epochs);
        }
        System.out.flush();
        System.exit(ok ? 0 : 1);
    }

    /** Runs the whole demo on one rank; returns whether every check passed (the same answer on every rank). */
    static boolean run(Communicator communicator, int epochs) {
        int rank = communicator.rank();
        int size = communicator.size();
        if (rank == 0) {
            // One line for the job (the library's own INFO summary), not one per rank and peer: N·(N−1) lines said
            // the same thing 56 times at 8 ranks.
            System.out.println(communicator.summary());
        }
        communicator.barrier();

        DigitsDataset data = DigitsDataset.load(TEST_IMAGES, 7);
        if (rank == 0) {
            System.out.printf(Locale.ROOT, "training a 64-%d-10 classifier on %d digit images (%d held out), "
                + "%d ranks, global batch %d, %d epochs%n", HIDDEN, data.trainLabels().length, TEST_IMAGES, size,
                BATCH, epochs);
        }
        MultilayerPerceptron model = new MultilayerPerceptron(DigitsDataset.FEATURES, HIDDEN,
            DigitsDataset.CLASSES, MODEL_SEED);
        int gradientLength = model.parameterCount() + 1;
        MemorySegment buffer = communicator.allocate((long) gradientLength * Float.BYTES);
        DataParallelTrainer.GradientSum sum = gradient -> {
            MemorySegment.copy(gradient, 0, buffer, ValueLayout.JAVA_FLOAT, 0, gradient.length);
            communicator.allReduce(buffer, gradient.length, DataType.FLOAT32, ReduceOp.SUM);
            MemorySegment.copy(buffer, ValueLayout.JAVA_FLOAT, 0, gradient, 0, gradient.length);
        };
        long start = System.nanoTime();
        new DataParallelTrainer(data, rank, size, BATCH, LEARNING_RATE, SHUFFLE_SEED).train(model, epochs, sum,
            report -> {
                if (rank == 0 && (report.epoch() == 1 || report.epoch() % 5 == 0 || report.epoch() == epochs)) {
                    System.out.printf(Locale.ROOT, "epoch %3d  loss %.4f  test accuracy %.1f%%%n", report.epoch(),
                        report.meanLoss(), 100 * report.testAccuracy());
                }
            });
        double trainSeconds = (System.nanoTime() - start) / 1e9;

        // Check 1: every rank holds bit-identical weights.
        long checksum = checksum(model.parameters());
        MemorySegment mine = communicator.allocate(Long.BYTES);
        MemorySegment all = communicator.allocate((long) size * Long.BYTES);
        mine.set(ValueLayout.JAVA_LONG, 0, checksum);
        communicator.allGather(mine, all, 1, DataType.INT64);
        boolean identical = true;
        for (int r = 0; r < size; r++) {
            identical &= all.getAtIndex(ValueLayout.JAVA_LONG, r) == checksum;
        }

        // Check 2 (rank 0): the same training in one process on the whole set.
        boolean matches = true;
        if (rank == 0) {
            MultilayerPerceptron reference = new MultilayerPerceptron(DigitsDataset.FEATURES, HIDDEN,
                DigitsDataset.CLASSES, MODEL_SEED);
            new DataParallelTrainer(data, 0, 1, BATCH, LEARNING_RATE, SHUFFLE_SEED).train(reference, epochs,
                gradient -> { }, report -> { });
            double maxDifference = 0;
            for (int i = 0; i < model.parameterCount(); i++) {
                maxDifference = Math.max(maxDifference, Math.abs(model.parameters()[i] - reference.parameters()[i]));
            }
            matches = maxDifference <= WEIGHT_TOLERANCE;
            System.out.printf(Locale.ROOT, "trained in %.2f s; weights on all %d ranks bit-identical: %s "
                + "(CRC32 %08x)%n", trainSeconds, size, identical ? "yes" : "NO", checksum);
            System.out.printf(Locale.ROOT, "single-process training on the whole set: test accuracy %.1f%%, "
                + "max |weight difference| %.2e (tolerance %.0e): %s%n",
                100 * reference.accuracy(data.testFeatures(), data.testLabels()), maxDifference, WEIGHT_TOLERANCE,
                matches ? "match" : "MISMATCH");
        }
        // Everyone learns the verdict: MIN over ranks of "all my checks passed".
        int[] verdict = {identical && matches ? 1 : 0};
        communicator.allReduce(verdict, ReduceOp.MIN);
        boolean ok = verdict[0] == 1;

        printAllReduceTable(communicator);
        if (rank == 0) {
            System.out.println(ok ? "demo: all checks passed" : "demo: CHECK FAILED");
        }
        return ok;
    }

    private static long checksum(float[] values) {
        java.nio.ByteBuffer bytes = java.nio.ByteBuffer.allocate(values.length * Float.BYTES);
        bytes.asFloatBuffer().put(values);
        CRC32 crc = new CRC32();
        crc.update(bytes);
        return crc.getValue();
    }

    /**
     * A small out-of-place allreduce sweep in nccl-tests' format (float32 sum, checked). Like {@code jccl tests},
     * it first runs every row unmeasured with more iterations and idles until the JIT is quiet: the training
     * compiled other paths, and a row timed while its code is still being compiled measures the compiler (4 ranks
     * on 2 cores: 0.3-3 ms per 8-byte all-reduce instead of a few microseconds).
     */
    private static void printAllReduceTable(Communicator communicator) {
        int rank = communicator.rank();
        long maxBytes = 4L << 20;
        MemorySegment send = communicator.allocate(maxBytes);
        MemorySegment recv = communicator.allocate(maxBytes);
        long warmStart = System.nanoTime();
        int sizes = 0;
        for (long bytes = 8; bytes <= maxBytes; bytes *= 8) {
            sizes++;
        }
        int done = 0;
        for (long bytes = 8; bytes <= maxBytes; bytes *= 8) {
            // as many runs as jccl tests' default --jit_warmup (C2 compiles a path after some 10 000 runs; with
            // fewer, the compilation lands inside the timed row)
            int runs = TestsCommand.jitRunsFor(bytes, 20000);
            row(communicator, send, recv, bytes, runs);
            done++;
            if (rank == 0) {
                // A line per size: the warm-up takes 10-20 s on a small machine and used to be silent.
                System.out.println(warmUpLine(done, sizes, bytes, runs, System.nanoTime() - warmStart));
            }
        }
        communicator.barrier();
        if (rank == 0) {
            System.out.println("# JIT warm-up: waiting until the JIT compiler is quiet");
        }
        long settledMs = JitSettle.await();
        communicator.barrier();
        if (rank == 0) {
            System.out.printf(Locale.ROOT, "# JIT warm-up: every size unmeasured, then %d ms idle (until the JIT was "
                + "quiet), in %.1f s%n", settledMs, (System.nanoTime() - warmStart) / 1e9);
            System.out.println("#");
            System.out.println("#                                                     out-of-place");
            System.out.println("#       size         count      type   redop    root     time   algbw   busbw #wrong");
            System.out.println("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)");
        }
        double busSum = 0;
        int rows = 0;
        long wrongTotal = 0;
        for (long bytes = 8; bytes <= maxBytes; bytes *= 8) {
            Row result = row(communicator, send, recv, bytes, bytes <= 65536 ? 2000 : 200);
            double seconds = result.seconds();
            long wrong = result.wrong();
            wrongTotal += wrong;
            double algbw = BusBandwidth.algorithmBandwidth(bytes, seconds);
            double busbw = BusBandwidth.of("all_reduce_perf").busBandwidth(bytes, seconds, communicator.size());
            busSum += busbw;
            rows++;
            if (rank == 0) {
                System.out.printf(Locale.ROOT, "%12d  %12d  %8s  %6s  %6d  %7.2f  %6.2f  %6.2f  %5d%n", bytes,
                    bytes / Float.BYTES, "float", "sum", -1, seconds * 1e6, algbw, busbw, wrong);
            }
        }
        if (rank == 0) {
            System.out.printf(Locale.ROOT, "# Out of bounds values : %d %s%n", wrongTotal, wrongTotal == 0 ? "OK"
                : "FAILED");
            System.out.printf(Locale.ROOT, "# Avg bus bandwidth    : %.4f%n#%n", busSum / rows);
        }
    }

    /**
     * The progress line after warming size {@code done} of {@code sizes}:
     * {@code # JIT warm-up 2/6: 64 B x 20000 all-reduces, 1.3 s}.
     */
    static String warmUpLine(int done, int sizes, long bytes, int runs, long elapsedNs) {
        return String.format(Locale.ROOT, "# JIT warm-up %d/%d: %s x %d all-reduces, %.1f s", done, sizes,
            bytes >= 1 << 20 ? (bytes >> 20) + " MiB" : bytes >= 1 << 10 ? (bytes >> 10) + " KiB" : bytes + " B", runs,
            elapsedNs / 1e9);
    }

    /** A row's result: seconds per all-reduce (MAX over ranks) and wrong elements (summed over ranks). */
    private record Row(double seconds, long wrong) {
    }

    /** One row of the table: 5 warm-up all-reduces, then {@code iterations} timed ones, then the check. */
    private static Row row(Communicator communicator, MemorySegment send, MemorySegment recv, long bytes,
                           int iterations) {
        int rank = communicator.rank();
        int size = communicator.size();
        long count = bytes / Float.BYTES;
        for (long i = 0; i < count; i++) {
            // Small integers: the sum is exact in float32 whatever the reduction order.
            send.setAtIndex(ValueLayout.JAVA_FLOAT, i, (float) ((rank + 1) * (1 + i % 7)));
        }
        for (int i = 0; i < 5; i++) {
            communicator.allReduce(send, recv, count, DataType.FLOAT32, ReduceOp.SUM);
        }
        communicator.barrier();
        long start = System.nanoTime();
        for (int i = 0; i < iterations; i++) {
            communicator.allReduce(send, recv, count, DataType.FLOAT32, ReduceOp.SUM);
        }
        double seconds = (System.nanoTime() - start) / 1e9 / iterations;
        long wrong = 0;
        float rankSum = size * (size + 1) / 2f;
        for (long i = 0; i < count; i++) {
            if (recv.getAtIndex(ValueLayout.JAVA_FLOAT, i) != rankSum * (1 + i % 7)) {
                wrong++;
            }
        }
        long[] wrongs = {wrong};
        communicator.allReduce(wrongs, ReduceOp.SUM);
        double[] time = {seconds};
        communicator.allReduce(time, ReduceOp.MAX);
        return new Row(time[0], wrongs[0]);
    }
}
