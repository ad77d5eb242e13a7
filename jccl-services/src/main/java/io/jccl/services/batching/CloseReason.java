package io.jccl.services.batching;

/** Why the consumer closed a batch when it did (recorded per request, R5.2: what Triton users cannot see). */
public enum CloseReason {
    /** The pending requests reached a preferred batch size before the oldest one's queue delay expired. */
    PREFERRED_SIZE,
    /** The pending requests reached the largest batch that may form (the largest preferred size, else the maximum). */
    MAX_SIZE,
    /** The oldest pending request waited the maximum queue delay: whatever was pending went. */
    DELAY,
    /** No queue delay is configured: whatever was pending went at once. */
    NO_DELAY,
    /** Not a batch: the request was rejected (see its status). */
    NONE;

    private static final CloseReason[] VALUES = values();

    static CloseReason of(int code) {
        return code >= 0 && code < VALUES.length ? VALUES[code] : NONE;
    }
}
