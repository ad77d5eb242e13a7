package io.jccl.tools;

import java.lang.management.CompilationMXBean;
import java.lang.management.ManagementFactory;

/**
 * Idling after a JIT warm-up until this JVM's compiler is quiet, before anything is timed. With as many ranks as
 * cores, compiler threads run only when a spinning rank is preempted, so the compilations a warm-up queued can
 * still be running long after it, inside the first timed loop, on the core of a rank the others wait for
 * (measured: docs/performance-results.md, "Idling until the JIT is quiet").
 */
public final class JitSettle {
    /** Shortest idle. */
    public static final long MIN_MS = 250;
    /** Longest idle (while the JIT keeps compiling). */
    public static final long MAX_MS = 3000;
    /** The compiler counts as quiet after this long without compiling. */
    private static final long QUIET_MS = 100;
    private static final long POLL_MS = 50;

    private JitSettle() {
    }

    /**
     * Sleeps at least {@link #MIN_MS}, then until the JIT has compiled nothing for 100 ms (at most {@link #MAX_MS}
     * in all); returns the milliseconds idled.
     */
    public static long await() {
        CompilationMXBean jit = ManagementFactory.getCompilationMXBean();
        boolean monitored = jit != null && jit.isCompilationTimeMonitoringSupported();
        long start = System.nanoTime();
        long last = monitored ? jit.getTotalCompilationTime() : 0;
        long quietMs = 0;
        try {
            Thread.sleep(MIN_MS);
            while (monitored && quietMs < QUIET_MS && System.nanoTime() - start < MAX_MS * 1_000_000L) {
                Thread.sleep(POLL_MS);
                long now = jit.getTotalCompilationTime();
                quietMs = now == last ? quietMs + POLL_MS : 0;
                last = now;
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        return (System.nanoTime() - start) / 1_000_000;
    }
}
