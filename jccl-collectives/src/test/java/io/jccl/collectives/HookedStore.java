package io.jccl.collectives;

import io.jccl.collectives.store.Store;

import java.util.List;

/**
 * A store that forwards every call to another and first runs {@link #before} with the operation ("set", "get",
 * "add", "wait", "cas", "delete", "check") and the key: tests sever, stall or watch a rank's store calls through it.
 */
abstract class HookedStore implements Store {
    final Store inner;

    HookedStore(Store inner) {
        this.inner = inner;
    }

    /** Runs before each call; may throw (the call then fails) or block. */
    abstract void before(String operation, String key);

    @Override
    public void set(String key, byte[] value, long timeoutNs) {
        before("set", key);
        inner.set(key, value, timeoutNs);
    }

    @Override
    public byte[] get(String key, long timeoutNs) {
        before("get", key);
        return inner.get(key, timeoutNs);
    }

    @Override
    public long add(String key, long delta, long timeoutNs) {
        before("add", key);
        return inner.add(key, delta, timeoutNs);
    }

    @Override
    public void waitFor(List<String> keys, long timeoutNs) {
        before("wait", String.join(",", keys));
        inner.waitFor(keys, timeoutNs);
    }

    @Override
    public boolean compareAndSet(String key, byte[] expected, byte[] desired, long timeoutNs) {
        before("cas", key);
        return inner.compareAndSet(key, expected, desired, timeoutNs);
    }

    @Override
    public boolean delete(String key, long timeoutNs) {
        before("delete", key);
        return inner.delete(key, timeoutNs);
    }

    @Override
    public boolean check(String key, long timeoutNs) {
        before("check", key);
        return inner.check(key, timeoutNs);
    }

    @Override
    public String describe() {
        return getClass().getSimpleName() + " over " + inner.describe();
    }

    @Override
    public void close() {
    }
}
