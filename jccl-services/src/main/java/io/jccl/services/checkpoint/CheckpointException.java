package io.jccl.services.checkpoint;

/**
 * A checkpoint could not be staged, verified, persisted or restored: the message says which step, which shard or
 * file, and why (an unreachable agent, a digest mismatch, a corrupt shard file, a full disk, an oversized shard).
 */
public class CheckpointException extends RuntimeException {
    /** With a message. */
    public CheckpointException(String message) {
        super(message);
    }

    /** With a message and a cause. */
    public CheckpointException(String message, Throwable cause) {
        super(message, cause);
    }
}
