package io.jccl.services.batching;

/** The outcome of one inference request, as the consumer wrote it into the requester's response slot. */
public enum InferenceStatus {
    /** The model ran; the output is in the response. */
    OK,
    /**
     * Rejected: the request waited in the consumer's queue past its timeout before a batch took it (Triton's
     * {@code timeout_action: REJECT}, "Request timeout expired"). The model never saw it.
     */
    TIMEOUT,
    /** Rejected: the request's length exceeds the ring slot's input size ({@link BatchingConfig#inputBytes()}). */
    TOO_LARGE,
    /** Rejected: the slot's header did not match its signal (bad magic, sequence, or a negative length). */
    MALFORMED,
    /** The model threw while running the request's batch. */
    MODEL_ERROR,
    /** The consumer was closing and rejected the queued request. */
    SHUTDOWN;

    private static final InferenceStatus[] VALUES = values();

    static InferenceStatus of(int code) {
        return code >= 0 && code < VALUES.length ? VALUES[code] : MALFORMED;
    }
}
