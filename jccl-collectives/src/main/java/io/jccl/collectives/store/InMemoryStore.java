package io.jccl.collectives.store;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/** A store for the threads of one JVM (tests, in-process ranks); also the table behind {@link TcpStoreServer}. */
public final class InMemoryStore implements Store {
    private final Map<String, byte[]> values = new HashMap<>();
    private final ReentrantLock lock = new ReentrantLock();
    private final Condition changed = lock.newCondition();
    private final String name;

    /** An empty store. */
    public InMemoryStore() {
        this("InMemoryStore");
    }

    /** An empty store with a name for messages. */
    public InMemoryStore(String name) {
        this.name = name;
    }

    @Override
    public void set(String key, byte[] value, long timeoutNs) {
        lock.lock();
        try {
            values.put(key, value.clone());
            changed.signalAll();
        } finally {
            lock.unlock();
        }
    }

    @Override
    public byte[] get(String key, long timeoutNs) {
        waitFor(List.of(key), timeoutNs);
        lock.lock();
        try {
            byte[] v = values.get(key);
            if (v == null) {
                throw new StoreException("key '" + key + "' was deleted while being read from " + name);
            }
            return v.clone();
        } finally {
            lock.unlock();
        }
    }

    /** The value of {@code key} now, or null. */
    public byte[] getNow(String key) {
        lock.lock();
        try {
            byte[] v = values.get(key);
            return v == null ? null : v.clone();
        } finally {
            lock.unlock();
        }
    }

    @Override
    public long add(String key, long delta, long timeoutNs) {
        lock.lock();
        try {
            byte[] old = values.get(key);
            long value;
            try {
                value = (old == null ? 0 : Long.parseLong(new String(old, StandardCharsets.UTF_8))) + delta;
            } catch (NumberFormatException e) {
                throw new StoreException("add on key '" + key + "' whose value is not a counter", e);
            }
            values.put(key, Long.toString(value).getBytes(StandardCharsets.UTF_8));
            changed.signalAll();
            return value;
        } finally {
            lock.unlock();
        }
    }

    @Override
    public void waitFor(List<String> keys, long timeoutNs) {
        long start = System.nanoTime();
        long deadline = start + Math.max(0, timeoutNs);
        lock.lock();
        try {
            while (true) {
                List<String> missing = null;
                for (String key : keys) {
                    if (!values.containsKey(key)) {
                        if (missing == null) {
                            missing = new ArrayList<>();
                        }
                        missing.add(key);
                    }
                }
                if (missing == null) {
                    return;
                }
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    throw new StoreTimeoutException("timed out after " + StoreTimeoutException.millis(
                        System.nanoTime() - start) + " waiting for key(s) " + missing + " in " + name);
                }
                try {
                    changed.await(Math.min(left, TimeUnit.SECONDS.toNanos(1)), TimeUnit.NANOSECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new StoreException("interrupted while waiting for " + missing + " in " + name, e);
                }
            }
        } finally {
            lock.unlock();
        }
    }

    @Override
    public boolean compareAndSet(String key, byte[] expected, byte[] desired, long timeoutNs) {
        lock.lock();
        try {
            byte[] current = values.get(key);
            boolean match = expected == null ? current == null : current != null && Arrays.equals(current, expected);
            if (match) {
                values.put(key, desired.clone());
                changed.signalAll();
            }
            return match;
        } finally {
            lock.unlock();
        }
    }

    @Override
    public boolean delete(String key, long timeoutNs) {
        lock.lock();
        try {
            return values.remove(key) != null;
        } finally {
            lock.unlock();
        }
    }

    @Override
    public boolean check(String key, long timeoutNs) {
        lock.lock();
        try {
            return values.containsKey(key);
        } finally {
            lock.unlock();
        }
    }

    /** Number of keys. */
    public int size() {
        lock.lock();
        try {
            return values.size();
        } finally {
            lock.unlock();
        }
    }

    @Override
    public String describe() {
        return name;
    }

    @Override
    public void close() {
    }
}
