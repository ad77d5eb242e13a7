package io.jccl.verbs;

/**
 * One writer's share of a context's {@link Counter}s, for traffic that moves without work requests: loads and
 * stores on memory mapped from a peer (the collectives' direct path) post nothing the provider could count, so the
 * code that moves the bytes counts them here, and the device's counters ({@link Context#counters()},
 * {@code jccl devinfo -v --pid}) include them.
 *
 * <p>One writer at a time (one thread, or writers ordered by a lock): adds are plain stores, no atomic instruction,
 * so counting costs a few nanoseconds on a hot path. Readers of the context's counters see the share's values.
 * {@link #close()} folds the share into the context's counters; adds after it are not counted.
 */
public interface CounterShare extends AutoCloseable {
    /** A share that counts nothing (contexts that keep no counters). */
    CounterShare NONE = new CounterShare() {
        @Override
        public void add(Counter counter, long delta) {
            // nothing is counted
        }

        @Override
        public void close() {
            // nothing to fold
        }
    };

    /** Adds {@code delta} to {@code counter}. */
    void add(Counter counter, long delta);

    /** Folds the share into the context's counters and detaches it. */
    @Override
    void close();
}
