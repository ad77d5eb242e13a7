package io.jccl.services.rendezvous;

/**
 * A rendezvous that cannot complete: ranks that did not become ready in time (named), a rank or the hub that died,
 * a peer that does not consume its messages.
 */
public class RendezvousException extends RuntimeException {
    /** An error with its message. */
    public RendezvousException(String message) {
        super(message);
    }

    /** An error with its message and cause. */
    public RendezvousException(String message, Throwable cause) {
        super(message, cause);
    }
}
