package io.jccl.services.transfer;

/**
 * A transfer-engine call that cannot go ahead: unknown segment, a name already taken, a peer that cannot be reached.
 */
public class TransferException extends RuntimeException {
    /** An error with its message. */
    public TransferException(String message) {
        super(message);
    }

    /** An error with its message and cause. */
    public TransferException(String message, Throwable cause) {
        super(message, cause);
    }
}
