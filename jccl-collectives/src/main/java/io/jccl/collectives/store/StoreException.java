package io.jccl.collectives.store;

import io.jccl.collectives.CollectiveException;

/**
 * A store operation failed (connection lost past its deadline, I/O error, malformed reply). A
 * {@link CollectiveException}, so that one {@code catch (CollectiveException e)} covers every failure of creating
 * and using a communicator, the usual start-up failure ({@link StoreTimeoutException}) included; it is still a
 * {@code RuntimeException}, and code that catches {@code StoreException} keeps working.
 */
public class StoreException extends CollectiveException {
    /** With a message. */
    public StoreException(String message) {
        super(message);
    }

    /** With a message and cause. */
    public StoreException(String message, Throwable cause) {
        super(message, cause);
    }
}
