package io.jccl.services.batching;

/**
 * A batching call that cannot go ahead: the consumer is gone or closed, the ring stayed full, a bad request or
 * configuration. The message names the consumer and the limit involved.
 */
public class BatchingException extends RuntimeException {
    /** An error with its message. */
    public BatchingException(String message) {
        super(message);
    }

    /** An error with its message and cause. */
    public BatchingException(String message, Throwable cause) {
        super(message, cause);
    }
}
