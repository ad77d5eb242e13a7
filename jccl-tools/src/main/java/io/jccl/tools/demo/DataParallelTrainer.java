package io.jccl.tools.demo;

import io.jccl.examples.digits.DigitsDataset;
import io.jccl.examples.digits.MultilayerPerceptron;
import java.util.Random;
import java.util.function.Consumer;

/**
 * Synchronous data-parallel SGD: every step takes the same global mini-batch on every rank (same seeded shuffle),
 * each rank computes the gradient sum of its contiguous share of that batch, an allreduce sums the shares, and
 * every rank applies the same update — so all ranks hold bit-identical weights, and the result equals training
 * the whole batch in one process up to floating-point summation order.
 */
public final class DataParallelTrainer {
    /** Sums a gradient across ranks in place (an allreduce SUM over float32). */
    @FunctionalInterface
    public interface GradientSum {
        /** Replaces {@code gradient} by the element-wise sum of every rank's {@code gradient}. */
        void sumInPlace(float[] gradient);
    }

    /** Per-epoch progress. */
    public record EpochReport(int epoch, double meanLoss, double testAccuracy) {
    }

    private final DigitsDataset data;
    private final int rank;
    private final int worldSize;
    private final int batchSize;
    private final float learningRate;
    private final long seed;

    /** A trainer for one rank of {@code worldSize}. */
    public DataParallelTrainer(DigitsDataset data, int rank, int worldSize, int batchSize, float learningRate,
                               long seed) {
        this.data = data;
        this.rank = rank;
        this.worldSize = worldSize;
        this.batchSize = batchSize;
        this.learningRate = learningRate;
        this.seed = seed;
    }

    /** Where rank {@code rank}'s contiguous share of a batch of {@code size} starts (rank = worldSize: the end). */
    static int shareStart(int size, int rank, int worldSize) {
        return (int) ((long) size * rank / worldSize);
    }

    /** Trains for {@code epochs} and returns the model; the loss reported is the global mean (it is reduced too). */
    public MultilayerPerceptron train(MultilayerPerceptron model, int epochs, GradientSum sum,
                                      Consumer<EpochReport> progress) {
        int n = data.trainLabels().length;
        int[] order = new int[n];
        for (int i = 0; i < n; i++) {
            order[i] = i;
        }
        Random shuffler = new Random(seed);
        // One extra slot carries the loss sum through the same allreduce as the gradient.
        float[] gradient = new float[model.parameterCount() + 1];
        for (int epoch = 1; epoch <= epochs; epoch++) {
            DigitsDataset.shuffle(order, shuffler);
            double lossSum = 0;
            for (int start = 0; start < n; start += batchSize) {
                int end = Math.min(n, start + batchSize);
                int size = end - start;
                int from = start + shareStart(size, rank, worldSize);
                int to = start + shareStart(size, rank + 1, worldSize);
                java.util.Arrays.fill(gradient, 0f);
                double localLoss = 0;
                for (int i = from; i < to; i++) {
                    localLoss += model.accumulateGradient(data.trainFeatures()[order[i]], data.trainLabels()[order[i]],
                        gradient);
                }
                gradient[gradient.length - 1] = (float) localLoss;
                sum.sumInPlace(gradient);
                lossSum += gradient[gradient.length - 1];
                model.step(gradient, learningRate, size);
            }
            progress.accept(new EpochReport(epoch, lossSum / n, model.accuracy(data.testFeatures(),
                data.testLabels())));
        }
        return model;
    }
}
