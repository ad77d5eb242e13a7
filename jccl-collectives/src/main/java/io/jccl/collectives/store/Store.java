package io.jccl.collectives.store;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;

/**
 * A rendezvous key-value store (as torch.distributed's Store and Gloo's rendezvous store): ranks publish their
 * addresses under keys and wait for each other's. Every operation that can block has a deadline; a missed
 * deadline throws {@link StoreTimeoutException} naming the store, the keys and the time waited.
 *
 * <p>Implementations: {@link TcpStore} (a server in rank 0 or {@link TcpStoreServer}), {@link FileStore} (a shared
 * directory), {@link InMemoryStore} (threads of one JVM) and {@link PrefixStore} (a namespace inside another store).
 */
public interface Store extends AutoCloseable {
    /** Default deadline of blocking calls without an explicit one: 5 minutes. */
    long DEFAULT_TIMEOUT_NS = Duration.ofMinutes(5).toNanos();

    /** Sets {@code key} to {@code value}, replacing any value, and wakes waiters. */
    void set(String key, byte[] value, long timeoutNs);

    /**
     * The value of {@code key}, waiting until some rank sets it.
     *
     * @throws StoreTimeoutException when the key does not appear within {@code timeoutNs}
     */
    byte[] get(String key, long timeoutNs);

    /**
     * Adds {@code delta} to the 64-bit counter under {@code key} (a missing key counts as 0) and returns the new
     * value. The counter is stored as its decimal text.
     */
    long add(String key, long delta, long timeoutNs);

    /**
     * Waits until every key exists.
     *
     * @throws StoreTimeoutException naming the keys still missing
     */
    void waitFor(List<String> keys, long timeoutNs);

    /**
     * Sets {@code key} to {@code desired} if its value equals {@code expected} ({@code null}: if the key is absent).
     *
     * @return whether the value was replaced
     */
    boolean compareAndSet(String key, byte[] expected, byte[] desired, long timeoutNs);

    /** Removes {@code key}; returns whether it existed. */
    boolean delete(String key, long timeoutNs);

    /** Whether {@code key} exists now (never waits for it). */
    boolean check(String key, long timeoutNs);

    /** A one-line description for error messages (for example {@code TcpStore 10.0.0.1:29500}). */
    String describe();

    /** Releases connections, server sockets or files held by this store object. */
    @Override
    void close();

    // ------------------------------------------------------------------------------------------------ conveniences

    /** {@link #set} with {@link #DEFAULT_TIMEOUT_NS}. */
    default void set(String key, byte[] value) {
        set(key, value, DEFAULT_TIMEOUT_NS);
    }

    /** {@link #get} with {@link #DEFAULT_TIMEOUT_NS}. */
    default byte[] get(String key) {
        return get(key, DEFAULT_TIMEOUT_NS);
    }

    /** {@link #add} with {@link #DEFAULT_TIMEOUT_NS}. */
    default long add(String key, long delta) {
        return add(key, delta, DEFAULT_TIMEOUT_NS);
    }

    /** Sets a UTF-8 string value. */
    default void setString(String key, String value, long timeoutNs) {
        set(key, value.getBytes(StandardCharsets.UTF_8), timeoutNs);
    }

    /** Gets a UTF-8 string value, waiting up to {@code timeoutNs}. */
    default String getString(String key, long timeoutNs) {
        return new String(get(key, timeoutNs), StandardCharsets.UTF_8);
    }
}
