package io.jccl.collectives.store;

/** A store operation failed (connection lost past its deadline, I/O error, malformed reply). */
public class StoreException extends RuntimeException {
    /** With a message. */
    public StoreException(String message) {
        super(message);
    }

    /** With a message and cause. */
    public StoreException(String message, Throwable cause) {
        super(message, cause);
    }
}
