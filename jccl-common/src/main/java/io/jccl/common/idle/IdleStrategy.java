package io.jccl.common.idle;

/**
 * How a thread waits when a round of work found nothing to do (Agrona's {@code IdleStrategy}): every wait loop in
 * JCCL is {@code while (!done) { work = doWork(); idle.idle(work); }} over one of these, so that spinning, yielding
 * and sleeping are decided in one place and tuned with one set of settings ({@code JCCL_SPIN_US},
 * {@code JCCL_YIELD_US}, {@code JCCL_PARK_MAX_US}).
 *
 * <p>Implementations: {@link BackoffIdleStrategy} (spin, yield, then sleep with growing pauses; the sleep is a
 * {@link Sleeper}, so a provider can sleep on its own wake-up source: a futex, a selector) and
 * {@link AdaptiveSpinIdleStrategy} (a spin whose length adapts to how waits end, then another strategy). Not
 * thread-safe: one instance per waiting thread.
 */
public interface IdleStrategy {
    /** Idles once: spin, yield or sleep, depending on how long this idle period has lasted. */
    default void idle() {
        idleAtMost(Long.MAX_VALUE);
    }

    /**
     * {@link #idle()}, but never sleeping longer than {@code maxNs}: a wait with a deadline passes what is left of
     * it, so that a short timeout is not overslept.
     */
    void idleAtMost(long maxNs);

    /** Starts a new idle period: call after a round that found work. */
    void reset();

    /** {@link #reset()} when {@code workCount > 0}, else {@link #idle()}. */
    default void idle(int workCount) {
        if (workCount > 0) {
            reset();
        } else {
            idle();
        }
    }
}
