package io.jccl.services.ps;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * An optimizer's state over a range of parameters and its update, element by element (so a shard updated on its
 * server computes exactly what the whole vector updated in one place computes). The rules are torch.optim's
 * single-tensor code paths, with {@code g = gradientSum[i] × gradientScale} (float32 throughout; scalars that torch
 * computes in Python doubles are computed in doubles here and rounded to float once):
 *
 * <pre>
 * SGD (momentum μ, dampening 0):  b = g on the first step, else b = μ·b + g;   p = p − lr·b   (μ = 0: p = p − lr·g)
 * Adam (β1, β2, ε), step t:       m = m + (1 − β1)·(g − m)          (torch's lerp_)
 *                                 v = β2·v + (1 − β2)·g·g
 *                                 denom = sqrt(v) / sqrt(1 − β2^t) + ε
 *                                 p = p − (lr / (1 − β1^t)) · m / denom
 * </pre>
 *
 * Not thread-safe: one owner (a server's shard, or a reference trainer).
 */
public final class Optimizer {
    private final OptimizerSpec spec;
    private final int length;
    private final float[] first;
    private final float[] second;
    private long steps;

    /** State for {@code length} parameters, all zero (no step taken). */
    public Optimizer(OptimizerSpec spec, int length) {
        if (length < 0) {
            throw new IllegalArgumentException("length " + length + " is negative");
        }
        this.spec = spec;
        this.length = length;
        boolean needsFirst = spec.kind() == OptimizerSpec.Kind.ADAM || spec.momentum() != 0f;
        this.first = needsFirst ? new float[length] : null;
        this.second = spec.kind() == OptimizerSpec.Kind.ADAM ? new float[length] : null;
    }

    /** Steps taken so far. */
    public long steps() {
        return steps;
    }

    /** The spec. */
    public OptimizerSpec spec() {
        return spec;
    }

    /** One step over a float array's {@code length} parameters. */
    public void step(float[] parameters, float[] gradientSum, float gradientScale) {
        step(MemorySegment.ofArray(parameters), 0, gradientSum, gradientScale);
    }

    /**
     * One step: updates the {@code length} float32 parameters at {@code byteOffset} of {@code parameters} with
     * {@code gradientSum[0..length)} scaled by {@code gradientScale}. Allocates nothing.
     */
    public void step(MemorySegment parameters, long byteOffset, float[] gradientSum, float gradientScale) {
        if (gradientSum.length < length) {
            throw new IllegalArgumentException("gradient of " + gradientSum.length + " < " + length + " values");
        }
        steps++;
        float lr = spec.learningRate();
        if (spec.kind() == OptimizerSpec.Kind.SGD) {
            float mu = spec.momentum();
            for (int i = 0; i < length; i++) {
                long at = byteOffset + (long) i * Float.BYTES;
                float g = gradientSum[i] * gradientScale;
                float d = g;
                if (first != null) {
                    d = steps == 1 ? g : mu * first[i] + g;
                    first[i] = d;
                }
                parameters.set(ValueLayout.JAVA_FLOAT_UNALIGNED, at,
                    parameters.get(ValueLayout.JAVA_FLOAT_UNALIGNED, at) - lr * d);
            }
            return;
        }
        float beta1 = spec.beta1();
        float oneMinusBeta1 = (float) (1.0 - beta1);
        float beta2 = spec.beta2();
        float oneMinusBeta2 = (float) (1.0 - beta2);
        float stepSize = (float) (lr / (1.0 - Math.pow(beta1, steps)));
        float biasCorrection2Sqrt = (float) Math.sqrt(1.0 - Math.pow(beta2, steps));
        float eps = spec.epsilon();
        for (int i = 0; i < length; i++) {
            long at = byteOffset + (long) i * Float.BYTES;
            float g = gradientSum[i] * gradientScale;
            float m = first[i] + oneMinusBeta1 * (g - first[i]);
            float v = beta2 * second[i] + oneMinusBeta2 * g * g;
            first[i] = m;
            second[i] = v;
            float denom = (float) Math.sqrt(v) / biasCorrection2Sqrt + eps;
            parameters.set(ValueLayout.JAVA_FLOAT_UNALIGNED, at,
                parameters.get(ValueLayout.JAVA_FLOAT_UNALIGNED, at) - stepSize * (m / denom));
        }
    }
}
