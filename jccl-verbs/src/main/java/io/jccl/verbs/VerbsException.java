package io.jccl.verbs;

/**
 * Raised by verbs calls that fail synchronously, the way an {@code ibv_*} call returns an errno.
 *
 * <p>Failures of posted work requests are never thrown: they arrive as {@link WorkCompletion}s with a
 * {@link WorkCompletionStatus}. This exception is for the call itself being wrong or impossible.
 */
public class VerbsException extends RuntimeException {
    /** Why the call failed; mirrors the errno values libibverbs returns. */
    public enum Reason {
        /** EINVAL: an attribute, flag, opcode or argument is not valid here. */
        INVALID_ARGUMENT,
        /** ENOMEM: a queue is full or a resource limit was reached. */
        NO_RESOURCES,
        /** EPERM/EACCES: a key or permission does not allow the access. */
        PERMISSION_DENIED,
        /** The object was closed or destroyed. */
        CLOSED,
        /** EOPNOTSUPP: the provider does not implement this. */
        UNSUPPORTED,
        /** The peer or connection could not be reached or was lost. */
        CONNECTION,
        /** A deadline passed. */
        TIMEOUT,
        /** An operating-system call failed. */
        SYSTEM,
        /** The peer refused us (authentication or rejected connection request). */
        REJECTED
    }

    private final Reason reason;

    /** Creates an exception with a reason and a message that says what to do about it. */
    public VerbsException(Reason reason, String message) {
        super(message);
        this.reason = reason;
    }

    /** Creates an exception with a reason, message and cause. */
    public VerbsException(Reason reason, String message, Throwable cause) {
        super(message, cause);
        this.reason = reason;
    }

    /** Why the call failed. */
    public Reason reason() {
        return reason;
    }
}
