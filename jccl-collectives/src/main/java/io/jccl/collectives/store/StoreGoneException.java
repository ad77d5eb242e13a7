package io.jccl.collectives.store;

/**
 * A store server that served this client refuses its connections now: its process is gone (a {@link TcpStore}
 * whose host died). Distinct from a store that does not answer (a stopped or unreachable host): callers that know
 * which process hosted the store (a standby store's rank) learn that the process is dead.
 */
public class StoreGoneException extends StoreException {
    /** With a message and cause. */
    public StoreGoneException(String message, Throwable cause) {
        super(message, cause);
    }
}
