package io.jccl.common;

/**
 * The forked JVM of {@link LogTest}: logs through {@link Log#get()} as a library would (one message per level and
 * subsystem, then the once-per-process announcement twice) under whatever settings and LoggerFinder it was
 * started with, then prints the backend chosen.
 */
public final class LogChild {
    private LogChild() {
    }

    /** Entry point. */
    public static void main(String[] args) {
        Log log = Log.get();
        log.warn(0, Log.Subsys.NET, "a warning");
        log.info(1, Log.Subsys.INIT, () -> "an info " + 42);
        log.trace(2, Log.Subsys.NET, "a trace");
        log.announce(1); // not rank 0: no version line (NCCL prints it from rank 0 only)
        log.announce(0);
        log.announce(0);
        Log.get().announce(0);
        System.err.flush();
        System.out.println("backend=" + log.backend());
    }
}
