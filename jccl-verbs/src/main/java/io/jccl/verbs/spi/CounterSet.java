package io.jccl.verbs.spi;

import io.jccl.verbs.Counter;

import java.util.EnumMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLongArray;

/** The {@link Counter}s of one context: lock-free adds from any thread, snapshots for tools. */
public final class CounterSet {
    private final AtomicLongArray values = new AtomicLongArray(Counter.values().length);

    /** Adds {@code delta} to a counter. */
    public void add(Counter counter, long delta) {
        values.getAndAdd(counter.ordinal(), delta);
    }

    /** Adds one to a counter. */
    public void increment(Counter counter) {
        values.getAndIncrement(counter.ordinal());
    }

    /** The current value of a counter. */
    public long get(Counter counter) {
        return values.get(counter.ordinal());
    }

    /** A snapshot of every counter. */
    public Map<Counter, Long> snapshot() {
        Map<Counter, Long> snapshot = new EnumMap<>(Counter.class);
        for (Counter counter : Counter.values()) {
            snapshot.put(counter, values.get(counter.ordinal()));
        }
        return snapshot;
    }
}
