package io.jccl.services.ps;

/**
 * Which optimizer the servers apply and its hyper-parameters, as {@code torch.optim.SGD} (momentum, no dampening,
 * no Nesterov, no weight decay) and {@code torch.optim.Adam} (no AMSGrad, no weight decay) define them; see
 * {@link Optimizer} for the update rules.
 *
 * @param kind SGD or Adam
 * @param learningRate lr
 * @param momentum SGD's momentum (0: plain SGD); unused by Adam
 * @param beta1 Adam's first-moment decay
 * @param beta2 Adam's second-moment decay
 * @param epsilon Adam's eps
 */
public record OptimizerSpec(Kind kind, float learningRate, float momentum, float beta1, float beta2, float epsilon) {
    /** The optimizers there are. */
    public enum Kind {
        /** Stochastic gradient descent with momentum ({@code torch.optim.SGD}). */
        SGD,
        /** Adam ({@code torch.optim.Adam}). */
        ADAM
    }

    /** Checks the values. */
    public OptimizerSpec {
        if (kind == null) {
            throw new IllegalArgumentException("optimizer kind is null");
        }
        if (!(learningRate > 0) || !Float.isFinite(learningRate)) {
            throw new IllegalArgumentException("learning rate " + learningRate + " must be positive and finite");
        }
        if (!(momentum >= 0 && momentum < 1)) {
            throw new IllegalArgumentException("momentum " + momentum + " outside [0, 1)");
        }
        if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1)) {
            throw new IllegalArgumentException("betas (" + beta1 + ", " + beta2 + ") outside [0, 1)");
        }
        if (!(epsilon >= 0) || !Float.isFinite(epsilon)) {
            throw new IllegalArgumentException("epsilon " + epsilon + " must be finite and not negative");
        }
    }

    /** SGD with momentum ({@code torch.optim.SGD(params, lr, momentum)}); momentum 0 is plain SGD. */
    public static OptimizerSpec sgd(float learningRate, float momentum) {
        return new OptimizerSpec(Kind.SGD, learningRate, momentum, 0f, 0f, 0f);
    }

    /** Adam ({@code torch.optim.Adam(params, lr, betas=(beta1, beta2), eps)}). */
    public static OptimizerSpec adam(float learningRate, float beta1, float beta2, float epsilon) {
        return new OptimizerSpec(Kind.ADAM, learningRate, 0f, beta1, beta2, epsilon);
    }

    /** Adam with torch's defaults: betas (0.9, 0.999), eps 1e-8. */
    public static OptimizerSpec adam(float learningRate) {
        return adam(learningRate, 0.9f, 0.999f, 1e-8f);
    }
}
