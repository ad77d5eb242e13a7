package io.jccl.collectives.store;

import java.util.ArrayList;
import java.util.List;

/** A namespace inside another store: every key is stored as {@code prefix + "/" + key}. Closing does not close the
 * underlying store. */
public final class PrefixStore implements Store {
    private final String prefix;
    private final Store inner;

    /** Keys of this store live under {@code prefix/} in {@code inner}. */
    public PrefixStore(String prefix, Store inner) {
        this.prefix = prefix + "/";
        this.inner = inner;
    }

    private String k(String key) {
        return prefix + key;
    }

    /** The underlying store. */
    public Store inner() {
        return inner;
    }

    @Override
    public void set(String key, byte[] value, long timeoutNs) {
        inner.set(k(key), value, timeoutNs);
    }

    @Override
    public byte[] get(String key, long timeoutNs) {
        return inner.get(k(key), timeoutNs);
    }

    @Override
    public long add(String key, long delta, long timeoutNs) {
        return inner.add(k(key), delta, timeoutNs);
    }

    @Override
    public void waitFor(List<String> keys, long timeoutNs) {
        List<String> full = new ArrayList<>(keys.size());
        for (String key : keys) {
            full.add(k(key));
        }
        inner.waitFor(full, timeoutNs);
    }

    @Override
    public boolean compareAndSet(String key, byte[] expected, byte[] desired, long timeoutNs) {
        return inner.compareAndSet(k(key), expected, desired, timeoutNs);
    }

    @Override
    public boolean delete(String key, long timeoutNs) {
        return inner.delete(k(key), timeoutNs);
    }

    @Override
    public boolean check(String key, long timeoutNs) {
        return inner.check(k(key), timeoutNs);
    }

    @Override
    public String describe() {
        return inner.describe() + " (prefix " + prefix + ")";
    }

    @Override
    public void close() {
    }
}
