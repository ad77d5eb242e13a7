package io.jccl.services.embedding;

/**
 * An embedding-cache call that cannot go ahead: unknown table, a segment that is not a table, a table that cannot be
 * reached or was re-created, an update that failed.
 */
public class EmbeddingException extends RuntimeException {
    /** An error with its message. */
    public EmbeddingException(String message) {
        super(message);
    }

    /** An error with its message and cause. */
    public EmbeddingException(String message, Throwable cause) {
        super(message, cause);
    }
}
