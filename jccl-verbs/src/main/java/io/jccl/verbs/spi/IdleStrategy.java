package io.jccl.verbs.spi;

import java.util.concurrent.locks.LockSupport;

/**
 * Spin, then yield, then park with growing pauses. Waking a parked process on this machine kind costs 40–150 µs,
 * so a short spin phase keeps small-message latency low, while the park phase keeps an idle process near zero CPU
 * even with 8 processes on 2 cores. Not thread-safe: one instance per waiting thread.
 *
 * <p>Tunable with {@code JCCL_SPIN_US} (default 50), {@code JCCL_YIELD_US} (default 200) and
 * {@code JCCL_PARK_MAX_US} (default 1000), as environment variables or {@code jccl.*} system properties.
 */
public final class IdleStrategy {
    /** Default spin phase in nanoseconds. */
    public static final long SPIN_NS = Config.longValue("JCCL_SPIN_US", 50) * 1000;
    /** Default yield phase (after spinning) in nanoseconds. */
    public static final long YIELD_NS = Config.longValue("JCCL_YIELD_US", 200) * 1000;
    /** Longest single park in nanoseconds. */
    public static final long PARK_MAX_NS = Config.longValue("JCCL_PARK_MAX_US", 1000) * 1000;
    private static final long PARK_MIN_NS = 10_000;

    private final long spinNs;
    private final long yieldNs;
    private final long parkMaxNs;
    private long idleSinceNs;
    private long parkNs;
    private int calls;
    private boolean spinning;

    /** An idler with the configured phases. */
    public IdleStrategy() {
        this(SPIN_NS, YIELD_NS, PARK_MAX_NS);
    }

    /** An idler with explicit phases. */
    public IdleStrategy(long spinNs, long yieldNs, long parkMaxNs) {
        this.spinNs = spinNs;
        this.yieldNs = yieldNs;
        this.parkMaxNs = Math.max(parkMaxNs, PARK_MIN_NS);
    }

    /** Call after a round that found work: the next idle period starts with spinning again. */
    public void reset() {
        calls = 0;
        parkNs = PARK_MIN_NS;
    }

    /** Idles once; {@code workCount > 0} resets the strategy instead. */
    public void idle(int workCount) {
        if (workCount > 0) {
            reset();
            return;
        }
        idle();
    }

    /**
     * Idles once: spin-wait, yield or park, depending on how long this idle period has lasted. With a spin phase
     * of 0 the first call already yields (oversubscribed hosts: the thread being waited for needs this core).
     */
    public void idle() {
        if (calls++ == 0) {
            idleSinceNs = System.nanoTime();
            parkNs = PARK_MIN_NS;
            spinning = spinNs > 0;
            if (spinning) {
                Thread.onSpinWait();
                return;
            }
        } else if (spinning && (calls & 15) != 0) {
            // Checking the clock every call costs more than the spin itself.
            Thread.onSpinWait();
            return;
        }
        long idleNs = System.nanoTime() - idleSinceNs;
        if (idleNs < spinNs) {
            Thread.onSpinWait();
            return;
        }
        // Past the spin phase every call costs a system call anyway: read the clock each time from now on.
        spinning = false;
        if (idleNs < spinNs + yieldNs) {
            Thread.yield();
        } else {
            LockSupport.parkNanos(parkNs);
            parkNs = Math.min(parkNs * 2, parkMaxNs);
        }
    }
}
