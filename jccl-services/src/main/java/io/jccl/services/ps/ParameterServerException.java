package io.jccl.services.ps;

/**
 * A parameter-server call that cannot complete: a server or worker that died or stayed silent past the deadline, a
 * job whose ranks do not match the spec. The message names the rank and what was waited for.
 */
public class ParameterServerException extends RuntimeException {
    /** An error with its message. */
    public ParameterServerException(String message) {
        super(message);
    }

    /** An error with its message and cause. */
    public ParameterServerException(String message, Throwable cause) {
        super(message, cause);
    }
}
