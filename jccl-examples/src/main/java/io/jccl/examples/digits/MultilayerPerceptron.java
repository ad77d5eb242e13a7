package io.jccl.examples.digits;

import java.util.Random;

/**
 * A one-hidden-layer classifier (64 → hidden tanh → 10 softmax) whose parameters live in one flat float array, so
 * a whole gradient is one buffer for one allreduce. Forward and backward passes are plain loops: the model is tiny
 * and the point of the demo is the communication.
 */
public final class MultilayerPerceptron {
    private final int inputs;
    private final int hidden;
    private final int outputs;
    private final float[] parameters;
    private final int w1;
    private final int b1;
    private final int w2;
    private final int b2;
    private final float[] activation;
    private final float[] logits;
    private final float[] hiddenDelta;

    /** A model with weights drawn from {@code seed} (same seed, same model on every rank). */
    public MultilayerPerceptron(int inputs, int hidden, int outputs, long seed) {
        this.inputs = inputs;
        this.hidden = hidden;
        this.outputs = outputs;
        w1 = 0;
        b1 = w1 + hidden * inputs;
        w2 = b1 + hidden;
        b2 = w2 + outputs * hidden;
        parameters = new float[b2 + outputs];
        Random random = new Random(seed);
        for (int i = 0; i < hidden * inputs; i++) {
            parameters[w1 + i] = (float) (random.nextGaussian() / Math.sqrt(inputs));
        }
        for (int i = 0; i < outputs * hidden; i++) {
            parameters[w2 + i] = (float) (random.nextGaussian() / Math.sqrt(hidden));
        }
        activation = new float[hidden];
        logits = new float[outputs];
        hiddenDelta = new float[hidden];
    }

    /** Number of parameters (the length of a gradient). */
    public int parameterCount() {
        return parameters.length;
    }

    /** The parameters (live array). */
    public float[] parameters() {
        return parameters;
    }

    /**
     * Adds the cross-entropy gradient of one example to {@code gradient} and returns its loss.
     */
    public double accumulateGradient(float[] x, int label, float[] gradient) {
        forward(x);
        double max = Double.NEGATIVE_INFINITY;
        for (int k = 0; k < outputs; k++) {
            max = Math.max(max, logits[k]);
        }
        double sum = 0;
        for (int k = 0; k < outputs; k++) {
            sum += Math.exp(logits[k] - max);
        }
        double loss = -(logits[label] - max - Math.log(sum));
        java.util.Arrays.fill(hiddenDelta, 0f);
        for (int k = 0; k < outputs; k++) {
            float delta = (float) (Math.exp(logits[k] - max) / sum) - (k == label ? 1f : 0f);
            gradient[b2 + k] += delta;
            int row = w2 + k * hidden;
            for (int j = 0; j < hidden; j++) {
                gradient[row + j] += delta * activation[j];
                hiddenDelta[j] += delta * parameters[row + j];
            }
        }
        for (int j = 0; j < hidden; j++) {
            float delta = hiddenDelta[j] * (1 - activation[j] * activation[j]);
            gradient[b1 + j] += delta;
            int row = w1 + j * inputs;
            for (int i = 0; i < inputs; i++) {
                gradient[row + i] += delta * x[i];
            }
        }
        return loss;
    }

    /** parameters -= learningRate × gradient / batchSize. */
    public void step(float[] gradient, float learningRate, int batchSize) {
        float scale = learningRate / batchSize;
        for (int i = 0; i < parameters.length; i++) {
            parameters[i] -= scale * gradient[i];
        }
    }

    /** The predicted digit. */
    public int predict(float[] x) {
        forward(x);
        int best = 0;
        for (int k = 1; k < outputs; k++) {
            if (logits[k] > logits[best]) {
                best = k;
            }
        }
        return best;
    }

    /** Fraction of {@code features} classified correctly. */
    public double accuracy(float[][] features, int[] labels) {
        int correct = 0;
        for (int i = 0; i < features.length; i++) {
            if (predict(features[i]) == labels[i]) {
                correct++;
            }
        }
        return (double) correct / features.length;
    }

    private void forward(float[] x) {
        for (int j = 0; j < hidden; j++) {
            float sum = parameters[b1 + j];
            int row = w1 + j * inputs;
            for (int i = 0; i < inputs; i++) {
                sum += parameters[row + i] * x[i];
            }
            activation[j] = (float) Math.tanh(sum);
        }
        for (int k = 0; k < outputs; k++) {
            float sum = parameters[b2 + k];
            int row = w2 + k * hidden;
            for (int j = 0; j < hidden; j++) {
                sum += parameters[row + j] * activation[j];
            }
            logits[k] = sum;
        }
    }
}
