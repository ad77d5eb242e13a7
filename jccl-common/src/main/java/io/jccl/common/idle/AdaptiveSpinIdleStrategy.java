package io.jccl.common.idle;

/**
 * A busy spin whose length adapts to how waits end, like a JVM monitor's, followed by another strategy (typically a
 * {@link BackoffIdleStrategy} without a spin phase: yield, then sleep).
 *
 * <p>Why adaptive: on 2 cores shared with other work, two processes that wait for each other often land on the same
 * core for a while; spinning then only burns the time slice the other one needs (measured: docs/collectives.md,
 * "Waiting"). The rules: a wait that ended while spinning lets the next spin be a quarter longer
 * ({@link #endedSpinning}); eight waits in a row that ended right after the first yields (the peer ran only once
 * this thread gave up its core) halve it, down to {@link #MIN_SPIN_NS} ({@link #endedQuickly}); a wait for a late
 * peer sets it to twice that wait ({@link #peerLate}). The caller judges how a wait ended, since it may know more
 * (which CPU the peer waited on); {@link #waitEnded} judges from the number of yields alone.
 *
 * <p>A wait is {@link #startWait()}, then {@code while (!done) { idle(); }} with {@link #reset()} after any round
 * that found work (a new idle period spins again). When the spin of a period runs out, {@code idle()} returns once
 * without idling, so the caller looks once more (and can start its slow-path checks, {@link #spinning()} being
 * false) before the first yield.
 */
public final class AdaptiveSpinIdleStrategy implements IdleStrategy {
    /** Shortest adaptive spin (a lock-step peer on another core arrives within it). */
    public static final long MIN_SPIN_NS = 1_000;

    private final IdleStrategy after;
    private final int clockMask;
    private long maxNs;
    private long limitNs;
    private int quickWaits;
    // The current idle period.
    private long periodLimitNs;
    private long spinStartNs;
    private int spins;
    private boolean spinning = true;
    // The current wait.
    private int idlesAfterSpin;

    /**
     * A spin of at most {@code maxSpinNs} (0: never spin) whose clock is read every {@code clockEvery} calls (a
     * power of two; a reading costs ~22 ns on this VM, so a loop whose rounds are a few nanoseconds reads it every
     * 32 calls, and the spin lasts up to that many calls longer than its limit), then {@code after}.
     */
    public AdaptiveSpinIdleStrategy(long maxSpinNs, int clockEvery, IdleStrategy after) {
        if (clockEvery < 1 || Integer.bitCount(clockEvery) != 1) {
            throw new IllegalArgumentException("clockEvery must be a power of two: " + clockEvery);
        }
        this.maxNs = Math.max(0, maxSpinNs);
        this.limitNs = this.maxNs;
        this.clockMask = clockEvery - 1;
        this.after = after;
    }

    /** Starts a wait: a new idle period, and no idles after the spin counted yet. */
    public void startWait() {
        idlesAfterSpin = 0;
        reset();
    }

    @Override
    public void reset() {
        spinning = true;
        spins = 0;
        spinStartNs = 0;
        periodLimitNs = limitNs;
        after.reset();
    }

    @Override
    public void idleAtMost(long maxNs) {
        if (spinning) {
            if (periodLimitNs > 0) {
                Thread.onSpinWait();
                if ((++spins & clockMask) != 0) {
                    return;
                }
                long now = System.nanoTime();
                if (spinStartNs == 0) {
                    spinStartNs = now; // the spin is measured from its first clock reading
                    return;
                }
                if (now - spinStartNs <= periodLimitNs) {
                    return;
                }
            }
            spinning = false;
            return; // one more look by the caller before the first yield
        }
        idlesAfterSpin++;
        after.idleAtMost(maxNs);
    }

    /** Whether the current idle period is still spinning (callers skip their slow-path checks while it is). */
    public boolean spinning() {
        return spinning;
    }

    /** Calls of the strategy after the spin (yields, sleeps) in the current wait. */
    public int idlesAfterSpin() {
        return idlesAfterSpin;
    }

    /** The first clock reading of the current period's spin, or 0 when it was not read. */
    public long spinStartNs() {
        return spinStartNs;
    }

    /** The current spin limit. */
    public long limitNs() {
        return limitNs;
    }

    /** The largest spin limit (0: never spins). */
    public long maxNs() {
        return maxNs;
    }

    /** Never spin again (oversubscribed hosts). */
    public void off() {
        maxNs = 0;
        limitNs = 0;
    }

    /** A wait with spin {@code limit} ended while spinning: spin a quarter longer next time. */
    public void endedSpinning(long limit) {
        limitNs = Math.min(maxNs, limit + (limit >> 2) + 100);
        quickWaits = 0;
    }

    /** A wait ended right after giving up the core: eight in a row halve the spin. */
    public void endedQuickly(long limit) {
        if (++quickWaits >= 8) {
            quickWaits = 0;
            limitNs = Math.max(MIN_SPIN_NS, limit >> 1);
        }
    }

    /** The peer was late by {@code waitedNs}: cover such a wait next time (if under the maximum). */
    public void peerLate(long limit, long waitedNs) {
        quickWaits = 0;
        if (waitedNs < maxNs) {
            limitNs = Math.min(maxNs, Math.max(limit, 2 * waitedNs));
        }
    }

    /** A wait that says nothing about sharing a core. */
    public void neutral() {
        quickWaits = 0;
    }

    /**
     * Adapts from the number of idles after the spin alone: none means the wait ended while spinning, one or two
     * that it ended right after giving up the core, more that the peer was late by {@code waitedNs}.
     */
    public void waitEnded(long limit, long waitedNs) {
        if (idlesAfterSpin == 0) {
            endedSpinning(limit);
        } else if (idlesAfterSpin <= 2) {
            endedQuickly(limit);
        } else {
            peerLate(limit, waitedNs);
        }
    }
}
