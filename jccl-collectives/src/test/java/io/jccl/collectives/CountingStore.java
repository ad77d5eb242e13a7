package io.jccl.collectives;

import io.jccl.collectives.store.InMemoryStore;
import io.jccl.collectives.store.Store;

import java.util.List;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

/** An in-memory store that counts calls per operation and key. */
final class CountingStore implements Store {
    final InMemoryStore inner = new InMemoryStore();
    final ConcurrentHashMap<String, AtomicInteger> calls = new ConcurrentHashMap<>();
    /** Runs (once) at the start of the first {@link #waitFor}, before the store waits. */
    volatile Runnable onFirstWait;

    private void record(String op, String key) {
        calls.computeIfAbsent(op + " " + key, k -> new AtomicInteger()).incrementAndGet();
    }

    /** Calls made so far. */
    int total() {
        return count("", "");
    }

    /** Calls of operation {@code op} (a prefix; "" for all) on keys containing {@code keyPart}. */
    int count(String op, String keyPart) {
        int sum = 0;
        for (var e : calls.entrySet()) {
            if (e.getKey().startsWith(op) && e.getKey().contains(keyPart)) {
                sum += e.getValue().get();
            }
        }
        return sum;
    }

    @Override
    public void set(String key, byte[] value, long timeoutNs) {
        record("set", key);
        inner.set(key, value, timeoutNs);
    }

    @Override
    public byte[] get(String key, long timeoutNs) {
        record("get", key);
        return inner.get(key, timeoutNs);
    }

    @Override
    public long add(String key, long delta, long timeoutNs) {
        record("add", key);
        return inner.add(key, delta, timeoutNs);
    }

    @Override
    public void waitFor(List<String> keys, long timeoutNs) {
        record("wait", String.join(",", keys));
        Runnable r = onFirstWait;
        if (r != null) {
            onFirstWait = null;
            r.run();
        }
        inner.waitFor(keys, timeoutNs);
    }

    @Override
    public boolean compareAndSet(String key, byte[] expected, byte[] desired, long timeoutNs) {
        record("cas", key);
        return inner.compareAndSet(key, expected, desired, timeoutNs);
    }

    @Override
    public boolean delete(String key, long timeoutNs) {
        record("delete", key);
        return inner.delete(key, timeoutNs);
    }

    @Override
    public boolean check(String key, long timeoutNs) {
        record("check", key);
        return inner.check(key, timeoutNs);
    }

    @Override
    public String describe() {
        return "counting " + inner.describe();
    }

    @Override
    public void close() {
        inner.close();
    }
}
