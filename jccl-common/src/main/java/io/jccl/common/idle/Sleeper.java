package io.jccl.common.idle;

import java.util.concurrent.locks.LockSupport;

/**
 * The last phase of a {@link BackoffIdleStrategy}: gives up the CPU for at most {@code maxNs}. The default parks the
 * thread; a provider that has its own wake-up source sleeps on it instead (the shm completion queue on a shared
 * futex that peers ring, the tcp progress thread in {@code select()}), so that it wakes as soon as work arrives.
 */
@FunctionalInterface
public interface Sleeper {
    /** Parks the calling thread ({@link LockSupport#parkNanos(long)}). */
    Sleeper PARK = new Park();

    /** Sleeps at most {@code maxNs}; may return early (spuriously, or because work arrived). */
    void sleep(long maxNs);

    /** {@link #PARK}: a named class, not a method reference (a lambda would be spun into a class at start-up). */
    final class Park implements Sleeper {
        private Park() {
        }

        @Override
        public void sleep(long maxNs) {
            LockSupport.parkNanos(maxNs);
        }
    }
}
