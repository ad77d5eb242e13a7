package io.jccl.collectives;

import io.jccl.collectives.store.InMemoryStore;

import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

/** An in-memory store that counts calls per operation ("set", "get", "wait", ...) and key. */
final class CountingStore extends HookedStore {
    final ConcurrentHashMap<String, AtomicInteger> calls = new ConcurrentHashMap<>();
    /** Runs (once) at the start of the first {@link #waitFor}, before the store waits. */
    volatile Runnable onFirstWait;

    CountingStore() {
        super(new InMemoryStore());
    }

    @Override
    void before(String operation, String key) {
        calls.computeIfAbsent(operation + " " + key, k -> new AtomicInteger()).incrementAndGet();
        if (operation.equals("wait")) {
            Runnable r = onFirstWait;
            if (r != null) {
                onFirstWait = null;
                r.run();
            }
        }
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
    public void close() {
        inner.close();
    }
}
