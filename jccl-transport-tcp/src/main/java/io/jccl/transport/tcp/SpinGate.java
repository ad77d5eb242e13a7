package io.jccl.transport.tcp;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Whether a progress thread's spin can pay: only while recent spins caught work ({@link #spinsThisPeriod}), and only
 * while a core is free for it, that is while the 1-minute load average <em>less this thread's own share of it</em>
 * is below the number of cores ({@link #look}). The share is estimated as the kernel computes the load: the fraction
 * of the time this thread was runnable (on a core or waiting for one, {@code /proc/thread-self/schedstat}), averaged
 * with the same 1-minute decay.
 *
 * <p>Why the own share: a spinning thread is runnable all the time, so it adds one to the load average it is judged
 * by. A polling client and the server's progress thread on two cores make a load of 2 within a minute of steady
 * traffic, and the plain test (load &lt; cores) then stopped the spin for exactly the client it served, until the
 * load fell again a minute later: bench/embedding, tcp0 lookups of one row, p50 10.6-12.9 µs while spinning against
 * 28.3 µs once the run's own threads had taken the load over 2.0. Less its own share the test still sees a really
 * oversubscribed machine as before (load 6-10 on 2 cores, where a spinning thread made a memory-polling ping-pong
 * take 4-6 ms instead of 0.26 ms: docs/transport-tcp.md, "Why the I/O policy is what it is"). Where the file is
 * missing (no schedstats, not Linux) the share stays 0: the plain test.
 */
final class SpinGate {
    private static final Path LOADAVG = Path.of("/proc/loadavg");
    private static final Path SCHEDSTAT = Path.of("/proc/thread-self/schedstat");
    /** The time constant of the kernel's 1-minute load average. */
    static final double LOAD_WINDOW_NS = 60e9;

    /** Spin while at least this fraction of recent spins caught work. */
    static final double MIN_HIT_RATE = 0.25;
    /** Weight of one idle period in the hit rate: about the last eight count. */
    private static final double HIT_WEIGHT = 0.125;
    /** Below the hit rate one idle period in this many spins anyway, to see whether spinning would catch work now. */
    static final int PROBE_EVERY = 8;

    private final int cores;
    /** Idle periods that spun and saw work arrive within the spin, smoothed (0..1). */
    private double spinHits = 1.0;
    private int idlePeriods;
    /** The idle period open now spins. */
    private boolean spinning;
    /** This thread's share of the 1-minute load average (0..1). */
    private double ownLoad;
    private long lastRunnableNs = -1;
    private long lastLookNs;

    /** A gate for a machine of {@code cores} cores. */
    SpinGate(int cores) {
        this.cores = cores;
    }

    /** A gate for this machine's cores. */
    static SpinGate forThisMachine() {
        return new SpinGate(Runtime.getRuntime().availableProcessors());
    }

    /** Looks now (call from the thread that spins): true while spinning may pay, and where there is no /proc. */
    boolean look(long nowNs) {
        double load;
        try {
            String text = Files.readString(LOADAVG);
            int end = text.indexOf(' ');
            load = Double.parseDouble(end > 0 ? text.substring(0, end) : text.trim());
        } catch (IOException | RuntimeException e) {
            return true; // no /proc (not Linux): spin as configured
        }
        return look(nowNs, load, runnableNs());
    }

    /**
     * As {@link #look(long)} with the readings given (tests): the 1-minute load average and the nanoseconds this
     * thread has been runnable so far (-1: unknown).
     */
    boolean look(long nowNs, double loadAverage, long runnableNs) {
        long elapsedNs = nowNs - lastLookNs;
        if (runnableNs >= 0 && lastRunnableNs >= 0 && elapsedNs > 0) {
            double share = Math.clamp((runnableNs - lastRunnableNs) / (double) elapsedNs, 0.0, 1.0);
            double decay = Math.exp(-elapsedNs / LOAD_WINDOW_NS);
            ownLoad = ownLoad * decay + share * (1 - decay);
        }
        lastRunnableNs = runnableNs;
        lastLookNs = nowNs;
        return loadAverage - ownLoad < cores;
    }

    /**
     * Whether the idle period that starts now spins: where {@code loadAllows} (the last {@link #look}), while recent
     * spins caught work (a request arrived within the spin), and one period in {@link #PROBE_EVERY} regardless. A
     * spin that the next request never comes within costs its core and gains nothing: a client that works on each
     * answer for longer than the spin (a 256-row embedding lookup, ~150 µs between batches) found the server's
     * spinning thread beside it on the other core, which left every other runnable thread of the host to its own
     * (tcp0 256 rows of 1 KiB: 1.8-1.9x Redis's MGET spinning, 2.5x not).
     */
    boolean spinsThisPeriod(boolean loadAllows) {
        spinning = loadAllows && (spinHits >= MIN_HIT_RATE || ++idlePeriods % PROBE_EVERY == 0);
        return spinning;
    }

    /** The idle period ended with work; {@code caught}: it arrived within the spin window. */
    void periodEnded(boolean caught) {
        if (spinning) {
            spinHits += HIT_WEIGHT * ((caught ? 1 : 0) - spinHits);
            spinning = false;
        }
    }

    /** The smoothed fraction of spins that caught work (tests, diagnostics). */
    double spinHits() {
        return spinHits;
    }

    /** This thread's share of the load average as estimated so far (tests, diagnostics). */
    double ownLoad() {
        return ownLoad;
    }

    /** Nanoseconds the calling thread has been on a core or waiting for one, or -1 where the kernel does not say. */
    static long runnableNs() {
        try {
            String text = Files.readString(SCHEDSTAT);
            int first = text.indexOf(' ');
            int second = text.indexOf(' ', first + 1);
            if (first <= 0 || second <= first) {
                return -1;
            }
            return Long.parseLong(text, 0, first, 10) + Long.parseLong(text, first + 1, second, 10);
        } catch (IOException | RuntimeException e) {
            return -1;
        }
    }
}
