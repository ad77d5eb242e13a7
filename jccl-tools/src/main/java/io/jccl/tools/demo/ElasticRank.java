package io.jccl.tools.demo;

import io.jccl.collectives.CollectiveException;
import io.jccl.collectives.Communicator;
import io.jccl.collectives.DataType;
import io.jccl.collectives.ReduceOp;
import io.jccl.collectives.Window;
import io.jccl.examples.digits.DigitsDataset;
import io.jccl.examples.digits.MultilayerPerceptron;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Arrays;
import java.util.Locale;
import java.util.Random;
import java.util.zip.CRC32;

/**
 * One rank of {@code jccl demo --elastic} ({@link ElasticDemo} starts them): synchronous data-parallel SGD on the
 * digits, like {@link DemoRank}, that keeps going when a rank dies. On a failed all-reduce the survivors revoke,
 * shrink (through a standby store when the dead rank hosted the job's store), make their state consistent (the
 * rank that completed the fewest steps broadcasts its weights: a step is redone, never applied twice), then grow
 * by one: a replacement process ({@code JCCL_JOIN=1}) joins, READs the weights and the step one-sided from rank 0's
 * window ({@link Window#get}), and all train on. Each global batch is split over the ranks there are, so the
 * gradient average stays the average over the whole batch whatever the number of ranks (the rescaling).
 *
 * <p>At the end: every rank's weights must be bit-identical, the communicator must have its 4 ranks again (the
 * replacement in it), and rank 0 compares the test accuracy with an uninterrupted single-process run of the same
 * training (within one point). Exits 1 when a check fails. Lines the orchestrator reads: {@code KILL ME} (the
 * victim, which then waits for its kill -9), {@code JOIN ADDRESS host:port} (where the replacement finds the job).
 */
public final class ElasticRank {
    /** Largest accuracy difference allowed against the uninterrupted run: one point. */
    static final double ACCURACY_TOLERANCE = 0.01;
    private static final int HIDDEN = 32;
    private static final int BATCH = 64;
    private static final float LEARNING_RATE = 0.5f;
    private static final long MODEL_SEED = 42;
    private static final long SHUFFLE_SEED = 11;
    private static final int TEST_IMAGES = 297;

    private ElasticRank() {
    }

    /** Entry point; args: epochs, the victim's rank, the global step at which it stops (-1: none). */
    public static void main(String[] args) throws Exception {
        int epochs = Integer.parseInt(args[0]);
        int victim = Integer.parseInt(args[1]);
        long killStep = Long.parseLong(args[2]);
        boolean ok = run(epochs, victim, killStep, "1".equals(System.getenv("JCCL_JOIN")));
        System.out.flush();
        System.exit(ok ? 0 : 1);
    }

    private static boolean run(int epochs, int victim, long killStep, boolean joiner) throws Exception {
        DigitsDataset data = DigitsDataset.load(TEST_IMAGES, 7);
        MultilayerPerceptron model = new MultilayerPerceptron(DigitsDataset.FEATURES, HIDDEN, DigitsDataset.CLASSES,
            MODEL_SEED);
        float[] weights = model.parameters();
        int n = data.trainLabels().length;
        long stepsPerEpoch = (n + BATCH - 1) / BATCH;
        long totalSteps = epochs * stepsPerEpoch;
        Communicator comm = Communicator.fromEnvironment();
        int originalRank = joiner ? -1 : comm.rank();
        long step = 0;
        if (joiner) {
            step = pullState(comm, weights);
            System.out.printf(Locale.ROOT, "replacement joined as rank %d of %d; read %d weights and step %d from "
                + "rank 0 by RDMA READ (CRC32 %08x)%n", comm.rank(), comm.size(), weights.length, step,
                checksum(weights));
        }
        int[] order = new int[n];
        long orderEpoch = -1;
        float[] gradient = new float[weights.length];
        MemorySegment buffer = comm.allocate((long) gradient.length * Float.BYTES);
        while (step < totalSteps) {
            long epoch = step / stepsPerEpoch;
            if (epoch != orderEpoch) {
                orderFor(epoch, order);
                orderEpoch = epoch;
            }
            if (originalRank == victim && step == killStep) {
                System.out.println("KILL ME at step " + step + " (epoch " + (epoch + 1) + ")");
                System.out.flush();
                Thread.sleep(Long.MAX_VALUE); // the orchestrator sends kill -9
            }
            int start = (int) ((step % stepsPerEpoch) * BATCH);
            int size = Math.min(n, start + BATCH) - start;
            int from = start + DataParallelTrainer.shareStart(size, comm.rank(), comm.size());
            int to = start + DataParallelTrainer.shareStart(size, comm.rank() + 1, comm.size());
            Arrays.fill(gradient, 0f);
            for (int i = from; i < to; i++) {
                model.accumulateGradient(data.trainFeatures()[order[i]], data.trainLabels()[order[i]], gradient);
            }
            MemorySegment.copy(gradient, 0, buffer, ValueLayout.JAVA_FLOAT, 0, gradient.length);
            try {
                comm.allReduce(buffer, gradient.length, DataType.FLOAT32, ReduceOp.SUM);
            } catch (CollectiveException e) {
                long failedAt = step;
                long t0 = System.nanoTime();
                comm.revoke("step " + failedAt + ": " + e.getMessage());
                Communicator shrunk = comm.shrink();
                comm.close();
                comm = shrunk;
                step = resync(comm, weights, step);
                long shrinkMs = (System.nanoTime() - t0) / 1_000_000;
                if (comm.rank() == 0) {
                    System.out.printf(Locale.ROOT, "step %d: %s; shrank to %d ranks in %d ms, redoing step %d with "
                        + "the batch split %d ways%n", failedAt, e.getClass().getSimpleName(), comm.size(), shrinkMs,
                        step, comm.size());
                    System.out.println("JOIN ADDRESS " + comm.joinAddress());
                    System.out.flush();
                }
                Communicator grown = comm.grow(1);
                comm.close();
                comm = grown;
                pushState(comm, weights, step);
                if (comm.rank() == 0) {
                    System.out.printf(Locale.ROOT, "grew back to %d ranks %d ms after the failure; training on%n",
                        comm.size(), (System.nanoTime() - t0) / 1_000_000);
                }
                buffer = comm.allocate((long) gradient.length * Float.BYTES);
                continue;
            }
            MemorySegment.copy(buffer, ValueLayout.JAVA_FLOAT, 0, gradient, 0, gradient.length);
            model.step(gradient, LEARNING_RATE, size);
            step++;
            if (step % stepsPerEpoch == 0 && comm.rank() == 0) {
                System.out.printf(Locale.ROOT, "epoch %3d  ranks %d  test accuracy %.1f%%%n", step / stepsPerEpoch,
                    comm.size(), 100 * model.accuracy(data.testFeatures(), data.testLabels()));
            }
        }
        boolean ok = check(comm, model, data, epochs);
        comm.close();
        return ok;
    }

    /** The sample order of {@code epoch}: the shuffles of epochs 0..epoch from the seed (any rank, any time). */
    private static void orderFor(long epoch, int[] order) {
        for (int i = 0; i < order.length; i++) {
            order[i] = i;
        }
        Random shuffler = new Random(SHUFFLE_SEED);
        for (long e = 0; e <= epoch; e++) {
            DigitsDataset.shuffle(order, shuffler);
        }
    }

    /**
     * After a shrink: the survivor that completed the fewest steps (the lowest such rank) broadcasts its weights,
     * and everyone resumes at its step. A failed all-reduce may have completed on some ranks (ULFM semantics), so a
     * rank may be one step ahead; this way a step is redone, never applied twice or skipped.
     */
    private static long resync(Communicator comm, float[] weights, long step) {
        long[] key = {step * 65536 + comm.rank()};
        comm.allReduce(key, ReduceOp.MIN);
        int root = (int) (key[0] % 65536);
        comm.broadcast(weights, root);
        return key[0] / 65536;
    }

    /** Survivors of a grow: rank 0 exposes the step and the weights in a window; the joiner reads them. */
    private static void pushState(Communicator comm, float[] weights, long step) {
        try (Window w = comm.window(Long.BYTES + (long) weights.length * Float.BYTES)) {
            if (comm.rank() == 0) {
                w.segment().set(ValueLayout.JAVA_LONG, 0, step);
                MemorySegment.copy(weights, 0, w.segment(), ValueLayout.JAVA_FLOAT, Long.BYTES, weights.length);
            }
            comm.barrier(); // the state is in place
            comm.barrier(); // the joiner has read it
        }
    }

    /** The joiner's side of {@link #pushState}: one-sided READs from rank 0's window. */
    private static long pullState(Communicator comm, float[] weights) {
        long bytes = Long.BYTES + (long) weights.length * Float.BYTES;
        try (Window w = comm.window(bytes); Arena arena = Arena.ofConfined()) {
            comm.barrier();
            MemorySegment state = arena.allocate(bytes, Long.BYTES);
            w.get(0, 0, state, 0, bytes);
            comm.barrier();
            MemorySegment.copy(state, ValueLayout.JAVA_FLOAT, Long.BYTES, weights, 0, weights.length);
            return state.get(ValueLayout.JAVA_LONG, 0);
        }
    }

    /** The end-of-run checks; the verdict is the same on every rank. */
    private static boolean check(Communicator comm, MultilayerPerceptron model, DigitsDataset data, int epochs) {
        int size = comm.size();
        long crc = checksum(model.parameters());
        long[] all = new long[size];
        all[comm.rank()] = crc;
        comm.allReduce(all, ReduceOp.SUM); // an all-gather of one long per rank
        boolean identical = true;
        for (long c : all) {
            identical &= c == crc;
        }
        boolean sizeOk = size == 4;
        boolean accuracyOk = true;
        if (comm.rank() == 0) {
            double accuracy = model.accuracy(data.testFeatures(), data.testLabels());
            MultilayerPerceptron reference = new MultilayerPerceptron(DigitsDataset.FEATURES, HIDDEN,
                DigitsDataset.CLASSES, MODEL_SEED);
            new DataParallelTrainer(data, 0, 1, BATCH, LEARNING_RATE, SHUFFLE_SEED).train(reference, epochs,
                g -> { }, r -> { });
            double referenceAccuracy = reference.accuracy(data.testFeatures(), data.testLabels());
            accuracyOk = Math.abs(accuracy - referenceAccuracy) <= ACCURACY_TOLERANCE;
            System.out.printf(Locale.ROOT, "weights on all %d ranks (the replacement included) bit-identical: %s "
                + "(CRC32 %08x)%n", size, identical ? "yes" : "NO", crc);
            System.out.printf(Locale.ROOT, "test accuracy %.1f%%; uninterrupted single-process run %.1f%%; "
                + "difference %.1f points (at most %.0f): %s%n", 100 * accuracy, 100 * referenceAccuracy,
                100 * Math.abs(accuracy - referenceAccuracy), 100 * ACCURACY_TOLERANCE, accuracyOk ? "ok" : "TOO FAR");
            if (!sizeOk) {
                System.out.println("the job ended with " + size + " ranks, not 4: the replacement is missing");
            }
        }
        int[] verdict = {identical && sizeOk && accuracyOk ? 1 : 0};
        comm.allReduce(verdict, ReduceOp.MIN);
        return verdict[0] == 1;
    }

    private static long checksum(float[] values) {
        java.nio.ByteBuffer bytes = java.nio.ByteBuffer.allocate(values.length * Float.BYTES);
        bytes.asFloatBuffer().put(values);
        CRC32 crc = new CRC32();
        crc.update(bytes);
        return crc.getValue();
    }
}
