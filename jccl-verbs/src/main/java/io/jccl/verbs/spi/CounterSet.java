package io.jccl.verbs.spi;

import io.jccl.verbs.Counter;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.Arrays;
import java.util.EnumMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLongArray;

/** The {@link Counter}s of one context: lock-free adds from any thread, snapshots for tools. */
public final class CounterSet {
    private final AtomicLongArray values = new AtomicLongArray(Counter.values().length);
    private volatile Local[] locals = new Local[0];

    /** Adds {@code delta} to a counter. */
    public void add(Counter counter, long delta) {
        values.getAndAdd(counter.ordinal(), delta);
    }

    /** Adds one to a counter. */
    public void increment(Counter counter) {
        values.getAndIncrement(counter.ordinal());
    }

    /** The current value of a counter. */
    public synchronized long get(Counter counter) {
        int i = counter.ordinal();
        long sum = values.get(i);
        for (Local local : locals) {
            sum += (long) Local.ELEMENT.getOpaque(local.values, i);
        }
        return sum;
    }

    /** A snapshot of every counter. */
    public synchronized Map<Counter, Long> snapshot() {
        Map<Counter, Long> snapshot = new EnumMap<>(Counter.class);
        for (Counter counter : Counter.values()) {
            snapshot.put(counter, get(counter));
        }
        return snapshot;
    }

    /**
     * A share of these counters for one writer at a time (for example a queue pair whose counting all happens
     * under its lock): plain adds, no atomic instruction, so no store-buffer drain on a hot path. Reads of the set
     * include it; {@link Local#close()} folds it into the set.
     */
    public synchronized Local newLocal() {
        Local local = new Local(this);
        Local[] next = Arrays.copyOf(locals, locals.length + 1);
        next[locals.length] = local;
        locals = next;
        return local;
    }

    private synchronized void fold(Local local) {
        Local[] current = locals;
        for (int i = 0; i < current.length; i++) {
            if (current[i] == local) {
                for (int c = 0; c < local.values.length; c++) {
                    values.getAndAdd(c, (long) Local.ELEMENT.getOpaque(local.values, c));
                }
                Local[] next = new Local[current.length - 1];
                System.arraycopy(current, 0, next, 0, i);
                System.arraycopy(current, i + 1, next, i, current.length - i - 1);
                locals = next;
                return;
            }
        }
    }

    /**
     * See {@link #newLocal()}. Its writers must be ordered (one lock, one thread): updates are plain read, opaque
     * write; readers of the set see them with opaque reads.
     */
    public static final class Local {
        static final VarHandle ELEMENT = MethodHandles.arrayElementVarHandle(long[].class);
        private final CounterSet owner;
        final long[] values = new long[Counter.values().length];

        private Local(CounterSet owner) {
            this.owner = owner;
        }

        /** Adds {@code delta} to a counter. */
        public void add(Counter counter, long delta) {
            int i = counter.ordinal();
            ELEMENT.setOpaque(values, i, values[i] + delta);
        }

        /** Adds one to a counter. */
        public void increment(Counter counter) {
            add(counter, 1);
        }

        /** Folds this share into the set and detaches it (once; later adds are not counted). */
        public void close() {
            owner.fold(this);
        }
    }
}
