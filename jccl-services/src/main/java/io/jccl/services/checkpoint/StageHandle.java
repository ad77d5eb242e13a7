package io.jccl.services.checkpoint;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;

/**
 * A checkpoint that {@link CheckpointClient#stageAsync} is staging on the client's staging thread (CheckFreq's
 * snapshot, torch DCP's {@code async_save} staging): {@link #awaitStaged()} returns once the rank's shard is in the
 * agent's staging memory and the rank's CRC32C of it was sent. The training loop calls it <b>before it modifies the
 * state</b> (before the optimizer step), so the snapshot overlaps the next iteration's forward and backward passes,
 * which only read the state. Modifying the state before it returns is the caller's bug: the checkpoint may then mix
 * old and new bytes; where a change overlaps the copy of a piece and its checksum, the agent's CRC32C differs from the
 * rank's and the step is refused (never persisted, {@link CheckpointClient#verify()} throws).
 *
 * <p>Used by the thread that owns the {@link CheckpointClient}; {@link #isStaged()} may be read by any thread.
 */
public final class StageHandle {
    private final long step;
    private final CompletableFuture<Integer> done = new CompletableFuture<>();
    private volatile long releaseWaitNs;
    /** Set once {@link #awaitStaged()} threw the failure, so that the client does not throw it a second time. */
    private boolean reported;

    StageHandle(long step) {
        this.step = step;
    }

    /** The step being staged. */
    public long step() {
        return step;
    }

    /** Whether staging ended (the shard is in staging, or it failed): {@link #awaitStaged()} then returns at once. */
    public boolean isStaged() {
        return done.isDone();
    }

    /**
     * Waits until the shard is in the agent's staging memory: from then on the training loop may modify its state.
     * Every wait inside is bounded (the client's timeout, the transfer engine's deadline).
     *
     * @return the shard's CRC32C
     * @throws CheckpointException what {@link CheckpointClient#stage} throws (the previous step's verification
     *     failed, the agent is unreachable, the timeout passed), or when the waiting thread is interrupted (staging
     *     then still reads the state)
     */
    public int awaitStaged() {
        try {
            return done.get();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new CheckpointException("interrupted while step " + step + " was staged (staging still reads the "
                + "state: do not modify it before isStaged())", e);
        } catch (ExecutionException e) {
            reported = true;
            Throwable cause = e.getCause();
            if (cause instanceof IllegalArgumentException iae) {
                throw new IllegalArgumentException(iae.getMessage(), iae);
            }
            throw new CheckpointException(cause.getMessage(), cause);
        }
    }

    /**
     * How long staging waited for the agent to release the previous step (back-pressure: checkpoints coming faster
     * than the agent persists them); valid once {@link #isStaged()}.
     */
    public long releaseWaitNs() {
        return releaseWaitNs;
    }

    // ------------------------------------------------------------------------------------------ the client's side

    void releaseWaitNs(long ns) {
        releaseWaitNs = ns;
    }

    void complete(int crc) {
        done.complete(crc);
    }

    void fail(Throwable failure) {
        done.completeExceptionally(failure);
    }

    /** Waits for the end without throwing; whether a failure is still to be reported to the caller. */
    boolean awaitQuietly() {
        boolean interrupted = false;
        while (true) {
            try {
                done.get();
                break;
            } catch (InterruptedException e) {
                interrupted = true; // staging still uses the client's batches: wait for it, then restore the flag
            } catch (ExecutionException e) {
                break;
            }
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
        return done.isCompletedExceptionally() && !reported;
    }

    @Override
    public String toString() {
        return "StageHandle[step " + step + (done.isDone() ? (done.isCompletedExceptionally() ? ", failed]"
            : ", staged]") : ", staging]");
    }
}
