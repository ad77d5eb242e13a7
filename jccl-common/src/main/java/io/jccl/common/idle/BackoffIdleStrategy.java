package io.jccl.common.idle;

import io.jccl.common.Config;

/**
 * Spin, then yield, then sleep with growing pauses. Waking a parked process on this machine kind costs 40–150 µs,
 * so a short spin phase keeps small-message latency low, while the sleep phase keeps an idle process near zero CPU
 * even with 8 processes on 2 cores. Not thread-safe: one instance per waiting thread.
 *
 * <p>Tunable with {@code JCCL_SPIN_US} (default 50), {@code JCCL_YIELD_US} (default 200) and
 * {@code JCCL_PARK_MAX_US} (default 1000), as environment variables or {@code jccl.*} system properties.
 */
public final class BackoffIdleStrategy implements IdleStrategy {
    /** Default spin phase in nanoseconds. */
    public static final long SPIN_NS = Config.longValue("JCCL_SPIN_US", 50) * 1000;
    /** Default yield phase (after spinning) in nanoseconds. */
    public static final long YIELD_NS = Config.longValue("JCCL_YIELD_US", 200) * 1000;
    /** Longest single sleep in nanoseconds. */
    public static final long PARK_MAX_NS = Config.longValue("JCCL_PARK_MAX_US", 1000) * 1000;
    /** First sleep of an idle period, doubled at every further sleep up to the maximum. */
    public static final long PARK_MIN_NS = 10_000;

    private final long spinNs;
    private final long yieldNs;
    private final long parkMinNs;
    private final long parkMaxNs;
    private final Sleeper sleeper;
    private final int clockMask;
    private long idleSinceNs;
    private long parkNs;
    private int calls;
    private boolean spinning;

    /** An idler with the configured phases. */
    public BackoffIdleStrategy() {
        this(SPIN_NS, YIELD_NS, PARK_MAX_NS);
    }

    /** An idler with explicit phases that parks the thread in its last phase. */
    public BackoffIdleStrategy(long spinNs, long yieldNs, long parkMaxNs) {
        this(spinNs, yieldNs, PARK_MIN_NS, parkMaxNs, Sleeper.PARK);
    }

    /**
     * An idler with explicit phases whose last phase calls {@code sleeper}, first for {@code parkMinNs}, then
     * twice as long each time up to {@code parkMaxNs}.
     */
    public BackoffIdleStrategy(long spinNs, long yieldNs, long parkMinNs, long parkMaxNs, Sleeper sleeper) {
        this(spinNs, yieldNs, parkMinNs, parkMaxNs, sleeper, 16);
    }

    /**
     * As {@link #BackoffIdleStrategy(long, long, long, long, Sleeper)}, reading the clock every {@code clockEvery}
     * calls of the spin phase (a power of two): 16 where a round is a few loads (a clock reading costs more than the
     * spin itself), 1 where every round is a system call anyway (a {@code selectNow()} loop), so that the spin ends
     * on time.
     */
    public BackoffIdleStrategy(long spinNs, long yieldNs, long parkMinNs, long parkMaxNs, Sleeper sleeper,
                               int clockEvery) {
        if (clockEvery < 1 || Integer.bitCount(clockEvery) != 1) {
            throw new IllegalArgumentException("clockEvery must be a power of two: " + clockEvery);
        }
        this.clockMask = clockEvery - 1;
        this.spinNs = spinNs;
        this.yieldNs = yieldNs;
        this.parkMinNs = Math.max(1, parkMinNs);
        this.parkMaxNs = Math.max(parkMaxNs, this.parkMinNs);
        this.sleeper = sleeper;
        this.parkNs = this.parkMinNs;
    }

    @Override
    public void reset() {
        calls = 0;
        parkNs = parkMinNs;
    }

    /**
     * Idles once: spin-wait, yield or sleep, depending on how long this idle period has lasted. With a spin phase
     * of 0 the first call already yields (oversubscribed hosts: the thread being waited for needs this core).
     */
    @Override
    public void idleAtMost(long maxNs) {
        if (calls++ == 0) {
            idleSinceNs = System.nanoTime();
            parkNs = parkMinNs;
            spinning = spinNs > 0;
            if (spinning) {
                Thread.onSpinWait();
                return;
            }
        } else if (spinning && (calls & clockMask) != 0) {
            // Checking the clock every call costs more than the spin itself (unless a round is a system call).
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
            sleeper.sleep(Math.max(1, Math.min(parkNs, maxNs)));
            parkNs = Math.min(parkNs * 2, parkMaxNs);
        }
    }
}
