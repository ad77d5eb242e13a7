package io.jccl.spark.example;

import io.jccl.collectives.Communicator;
import io.jccl.collectives.DataType;
import io.jccl.collectives.ReduceOp;
import io.jccl.examples.digits.DigitsDataset;
import io.jccl.examples.digits.MultilayerPerceptron;
import io.jccl.spark.BarrierJob;
import org.apache.spark.SparkConf;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.broadcast.Broadcast;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Locale;

/**
 * Trains the digits classifier (the model and data of {@code jccl demo}) with full-batch gradient descent in Spark,
 * twice, on the same partitions, for the same iterations, from the same initial weights:
 * <ol>
 * <li><b>JCCL</b>: one barrier stage; each task computes its partition's gradient sum, {@code allReduce} sums them
 * (JCCL, shm or tcp), and every task applies the same step — one Spark job for the whole training;</li>
 * <li><b>Spark ML's way</b>: per iteration the driver broadcasts the weights and {@code treeAggregate}s the
 * partitions' gradient sums (what Spark ML's optimizers do), then steps — one Spark job per iteration.</li>
 * </ol>
 * The math is the same (the sum of the same per-partition sums, in another order), so the accuracies agree; the
 * time per iteration is what each way costs. Prints both and their ratio, and exits non-zero when the accuracies
 * differ by more than one point.
 *
 * <pre>
 * SparkDigitsTraining [--master local[4]] [--partitions 4] [--iterations 100] [--learning-rate 1.0]
 * </pre>
 */
public final class SparkDigitsTraining {
    static final int HIDDEN = 32;
    static final long MODEL_SEED = 42;
    static final int TEST_IMAGES = 297;
    static final long SPLIT_SEED = 7;

    private SparkDigitsTraining() {
    }

    /** What one way of training gave. */
    public record Outcome(String how, int iterations, double secondsPerIteration, double testAccuracy,
                          float[] weights) {
    }

    /** Entry point. */
    public static void main(String[] args) {
        String master = "local[4]";
        int partitions = 4;
        int iterations = 100;
        float learningRate = 1.0f;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--master" -> master = args[++i];
                case "--partitions" -> partitions = Integer.parseInt(args[++i]);
                case "--iterations" -> iterations = Integer.parseInt(args[++i]);
                case "--learning-rate" -> learningRate = Float.parseFloat(args[++i]);
                default -> throw new IllegalArgumentException("unknown argument " + args[i]
                    + " (--master, --partitions, --iterations, --learning-rate)");
            }
        }
        SparkConf conf = new SparkConf().setMaster(master).setAppName("jccl-spark-digits")
            .set("spark.ui.enabled", "false");
        try (JavaSparkContext spark = new JavaSparkContext(conf)) {
            spark.setLogLevel("WARN");
            List<Outcome> outcomes = compare(spark, partitions, iterations, learningRate);
            System.exit(report(outcomes, partitions) ? 0 : 1);
        }
    }

    /** Runs both ways (each once briefly first, so neither pays the JVM's warm-up alone) and returns them. */
    public static List<Outcome> compare(JavaSparkContext spark, int partitions, int iterations, float learningRate) {
        JavaRDD<Integer> rows = rows(spark, partitions);
        withJccl(rows, Math.min(5, iterations), learningRate);
        withTreeAggregate(spark, rows, Math.min(5, iterations), learningRate);
        List<Outcome> outcomes = new ArrayList<>();
        outcomes.add(withJccl(rows, iterations, learningRate));
        outcomes.add(withTreeAggregate(spark, rows, iterations, learningRate));
        return outcomes;
    }

    /** Prints the side-by-side table; true when the accuracies agree within one point. */
    public static boolean report(List<Outcome> outcomes, int partitions) {
        Outcome jccl = outcomes.get(0);
        Outcome tree = outcomes.get(1);
        System.out.printf(Locale.ROOT, "digits 64-%d-10, full-batch gradient descent, %d partitions, %d iterations%n",
            HIDDEN, partitions, jccl.iterations());
        System.out.printf(Locale.ROOT, "%-34s %14s %14s%n", "way", "ms/iteration", "test accuracy");
        for (Outcome o : outcomes) {
            System.out.printf(Locale.ROOT, "%-34s %14.3f %13.1f%%%n", o.how(), 1e3 * o.secondsPerIteration(),
                100 * o.testAccuracy());
        }
        double speedup = tree.secondsPerIteration() / jccl.secondsPerIteration();
        System.out.printf(Locale.ROOT, "max |weight difference| between the two ways: %.2e (the same sums added in "
            + "another order)%n", maxDifference(jccl.weights(), tree.weights()));
        boolean equal = Math.abs(jccl.testAccuracy() - tree.testAccuracy()) <= 0.01;
        System.out.printf(Locale.ROOT, "JCCL in barrier tasks: %.1fx faster per iteration; accuracies %s%n", speedup,
            equal ? "equal within one point" : "DIFFER by more than one point");
        return equal;
    }

    private static JavaRDD<Integer> rows(JavaSparkContext spark, int partitions) {
        int n = Data.get().trainLabels().length;
        List<Integer> indices = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            indices.add(i);
        }
        return spark.parallelize(indices, partitions).cache();
    }

    /** JCCL: one barrier stage, an all-reduce per iteration. */
    static Outcome withJccl(JavaRDD<Integer> rows, int iterations, float learningRate) {
        List<Object[]> results = BarrierJob.run(rows, (Communicator comm, Iterator<Integer> mine) -> {
            DigitsDataset data = Data.get();
            List<Integer> indices = new ArrayList<>();
            mine.forEachRemaining(indices::add);
            MultilayerPerceptron model = newModel();
            int p = model.parameterCount();
            float[] gradient = new float[p + 1];
            MemorySegment buffer = comm.allocate((long) (p + 1) * Float.BYTES);
            comm.barrier();
            long start = System.nanoTime();
            for (int it = 0; it < iterations; it++) {
                partitionGradient(model, data, indices, gradient);
                MemorySegment.copy(gradient, 0, buffer, ValueLayout.JAVA_FLOAT, 0, p + 1);
                comm.allReduce(buffer, p + 1, DataType.FLOAT32, ReduceOp.SUM);
                MemorySegment.copy(buffer, ValueLayout.JAVA_FLOAT, 0, gradient, 0, p + 1);
                model.step(gradient, learningRate, (int) gradient[p]);
            }
            double seconds = (System.nanoTime() - start) / 1e9;
            return new Object[] {seconds, model.parameters().clone()};
        });
        Object[] rank0 = results.get(0);
        float[] weights = (float[]) rank0[1];
        for (Object[] r : results) {
            if (!java.util.Arrays.equals(weights, (float[]) r[1])) {
                throw new IllegalStateException("ranks ended with different weights: the all-reduce is broken");
            }
        }
        return new Outcome("JCCL all-reduce in barrier tasks", iterations, (double) rank0[0] / iterations,
            accuracy(weights), weights);
    }

    /** Spark ML's way: per iteration, broadcast the weights and treeAggregate the partitions' gradient sums. */
    static Outcome withTreeAggregate(JavaSparkContext spark, JavaRDD<Integer> rows, int iterations,
                                     float learningRate) {
        MultilayerPerceptron model = newModel();
        int p = model.parameterCount();
        long start = System.nanoTime();
        for (int it = 0; it < iterations; it++) {
            Broadcast<float[]> weights = spark.broadcast(model.parameters().clone());
            float[] sum = rows.mapPartitions((Iterator<Integer> mine) -> {
                List<Integer> indices = new ArrayList<>();
                mine.forEachRemaining(indices::add);
                MultilayerPerceptron local = newModel();
                System.arraycopy(weights.value(), 0, local.parameters(), 0, p);
                float[] gradient = new float[p + 1];
                partitionGradient(local, Data.get(), indices, gradient);
                return List.of(gradient).iterator();
            }).treeAggregate(new float[p + 1], SparkDigitsTraining::add, SparkDigitsTraining::add, 2);
            model.step(sum, learningRate, (int) sum[p]);
            weights.destroy();
        }
        double seconds = (System.nanoTime() - start) / 1e9;
        float[] weights = model.parameters().clone();
        return new Outcome("Spark treeAggregate per iteration", iterations, seconds / iterations, accuracy(weights),
            weights);
    }

    /** Largest absolute difference between two weight vectors. */
    public static double maxDifference(float[] a, float[] b) {
        double max = 0;
        for (int i = 0; i < a.length; i++) {
            max = Math.max(max, Math.abs(a[i] - b[i]));
        }
        return max;
    }

    private static float[] add(float[] a, float[] b) {
        for (int i = 0; i < a.length; i++) {
            a[i] += b[i];
        }
        return a;
    }

    /** gradient = [sum of the partition's gradients..., number of rows] (the count travels in the last slot). */
    static void partitionGradient(MultilayerPerceptron model, DigitsDataset data, List<Integer> indices,
                                  float[] gradient) {
        java.util.Arrays.fill(gradient, 0f);
        for (int i : indices) {
            model.accumulateGradient(data.trainFeatures()[i], data.trainLabels()[i], gradient);
        }
        gradient[gradient.length - 1] = indices.size();
    }

    static MultilayerPerceptron newModel() {
        return new MultilayerPerceptron(DigitsDataset.FEATURES, HIDDEN, DigitsDataset.CLASSES, MODEL_SEED);
    }

    static double accuracy(float[] weights) {
        MultilayerPerceptron model = newModel();
        System.arraycopy(weights, 0, model.parameters(), 0, weights.length);
        DigitsDataset data = Data.get();
        return model.accuracy(data.testFeatures(), data.testLabels());
    }

    /** The data set, loaded once per JVM (driver and executors load the same split from the class path). */
    static final class Data {
        private static volatile DigitsDataset data;

        static DigitsDataset get() {
            DigitsDataset d = data;
            if (d == null) {
                synchronized (Data.class) {
                    d = data;
                    if (d == null) {
                        d = DigitsDataset.load(TEST_IMAGES, SPLIT_SEED);
                        data = d;
                    }
                }
            }
            return d;
        }
    }
}
