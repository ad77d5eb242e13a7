package io.jccl.collectives.store;

/** A store operation missed its deadline; the message names the store, the keys and how long it waited. */
public class StoreTimeoutException extends StoreException {
    /** With a message. */
    public StoreTimeoutException(String message) {
        super(message);
    }

    /** With a message and cause. */
    public StoreTimeoutException(String message, Throwable cause) {
        super(message, cause);
    }

    static String millis(long ns) {
        return ns >= 10_000_000_000L ? (ns / 1_000_000_000L) + " s" : (ns / 1_000_000L) + " ms";
    }
}
