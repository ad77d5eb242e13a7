package io.jccl.verbs;

/**
 * A completion queue ({@code struct ibv_cq}). Polling drives the provider's progress for the queue pairs that
 * complete here, so an application that polls needs no extra threads.
 */
public interface CompletionQueue extends AutoCloseable {
    /**
     * Moves up to {@code max} completions into {@code out[0..n)} and returns n (0 when none are ready). Allocates
     * nothing. Completions of one queue pair come out in the order their work requests were posted.
     *
     * @throws VerbsException when the queue overflowed (its capacity was too small for the outstanding requests)
     */
    int poll(WorkCompletion[] out, int max);

    /**
     * Like {@link #poll(WorkCompletion[], int)} but waits up to {@code timeoutNs} for at least one completion:
     * it spins briefly, then yields, then parks with growing pauses, so an idle waiter costs almost no CPU.
     *
     * @return completions moved into {@code out}; 0 when the deadline passed first
     */
    int poll(WorkCompletion[] out, int max, long timeoutNs);

    /** How many completions the queue holds at most. */
    int capacity();

    /** The context the queue belongs to. */
    Context context();

    /** Destroys the queue; fails while queue pairs still use it (EBUSY). */
    @Override
    void close();
}
