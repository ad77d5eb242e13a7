package io.jccl.services.ingest;

/**
 * An ingestion call that cannot go ahead: a consumer out of reach or not consuming within the deadline, a full
 * retention buffer, a snapshot that cannot be written (disk full), a snapshot that fails its checks at recovery.
 */
public class IngestException extends RuntimeException {
    /** An error with its message. */
    public IngestException(String message) {
        super(message);
    }

    /** An error with its message and cause. */
    public IngestException(String message, Throwable cause) {
        super(message, cause);
    }
}
