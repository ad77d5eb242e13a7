package io.jccl.verbs;

import java.lang.foreign.MemorySegment;

/**
 * A reliable-connected queue pair ({@code struct ibv_qp}, type RC).
 *
 * <p>Semantics follow libibverbs: requests of one QP execute in order; the first error completes its request with
 * an error status (signaled or not), moves the QP to {@link QueuePairState#ERROR}, and every outstanding and later
 * request completes with {@link WorkCompletionStatus#WR_FLUSH_ERR}. One-sided requests are checked at the responder
 * (key, range, permission): a violation completes the request with REM_ACCESS_ERR and moves the responder's QP to
 * ERROR too. A SEND finding no receive is retried per rnr_retry/min_rnr_timer, then fails with RNR_RETRY_EXC_ERR.
 *
 * <p>Posting is thread-safe. Work-request objects are copied at post time and may be reused at once.
 */
public interface QueuePair extends AutoCloseable {
    /** The 24-bit QP number (unpredictable). */
    int queuePairNumber();

    /** The current state. */
    QueuePairState state();

    /** The protection domain. */
    ProtectionDomain protectionDomain();

    /** The creation attributes. */
    QueuePairInitAttributes initAttributes();

    /**
     * The record a peer needs to connect to this QP (its own PSN is the initial send PSN that
     * {@link QueuePairAttributes#toReadyToSend(int)} should be given, see {@link #initialPsn()}).
     */
    Endpoint localEndpoint();

    /** The random initial send PSN this QP proposes (24 bits). */
    int initialPsn();

    /**
     * Changes state and attributes as ibv_modify_qp does: each transition requires and allows exactly the
     * attributes ibv_modify_qp(3) lists; an invalid combination throws and changes nothing.
     */
    void modify(QueuePairAttributes attributes);

    /** The current attributes (ibv_query_qp), with every attribute marked. */
    QueuePairAttributes query();

    /**
     * Posts a send-queue request.
     *
     * @throws VerbsException INVALID_ARGUMENT for a malformed request or a QP in RESET/INIT/RTR, NO_RESOURCES when
     *     the send queue is full
     */
    void postSend(SendWorkRequest request);

    /**
     * Posts {@code requests[0..count)} in order as one list, as {@code ibv_post_send} posts a chained list of work
     * requests: the same checks and semantics as posting them one by one, but the provider may start them together
     * (tcp0 writes a list of small requests with one system call; shm0 executes them one after the other as
     * {@link #postSend(SendWorkRequest)} would). The default posts them one by one.
     *
     * <p>Like {@code ibv_post_send}'s {@code bad_wr}: when request {@code i > 0} cannot be posted, the requests before
     * it stay posted and the method returns {@code i}; posting request {@code i} again (alone, or as the head of a
     * list) then throws the reason. When the first cannot be posted, it throws.
     *
     * @return how many requests from the front of the list were posted ({@code count} unless one was refused)
     * @throws VerbsException as {@link #postSend(SendWorkRequest)}, for the list's first request
     * @throws IllegalArgumentException when {@code count} is negative or larger than the array
     */
    default int postSend(SendWorkRequest[] requests, int count) {
        if (count < 0 || count > requests.length) {
            throw new IllegalArgumentException("post list of " + count + " requests, array holds "
                + requests.length);
        }
        for (int i = 0; i < count; i++) {
            try {
                postSend(requests[i]);
            } catch (VerbsException e) {
                if (i == 0) {
                    throw e;
                }
                return i;
            }
        }
        return count;
    }

    /**
     * Posts a receive-queue request (allowed from INIT on).
     *
     * @throws VerbsException INVALID_ARGUMENT for a malformed request or a QP in RESET, NO_RESOURCES when full
     */
    void postReceive(ReceiveWorkRequest request);

    /**
     * Whether {@link #mapRemote} can give direct load/store access to the peer's memory (shm can; tcp cannot).
     */
    default boolean supportsDirectAccess() {
        return false;
    }

    /**
     * A view of {@code length} bytes of the peer's registered memory at {@code remoteAddress}, granted under the
     * same checks as a one-sided request (rkey valid, range inside the region, REMOTE_WRITE for {@code writable},
     * REMOTE_READ otherwise). RDMA has no such verb; it is the load/store path intra-node collectives live on.
     * The view stays valid while the peer keeps the region registered; the peer's revocation is not seen by
     * loads and stores already made through the view.
     *
     * @throws VerbsException UNSUPPORTED when the provider cannot share memory, PERMISSION_DENIED when a check fails
     */
    default MemorySegment mapRemote(long remoteAddress, long length, int rkey, boolean writable) {
        throw new VerbsException(VerbsException.Reason.UNSUPPORTED,
            "provider " + protectionDomain().context().device().providerName() + " offers no direct access");
    }

    /** Destroys the QP; outstanding requests are dropped without completions, as ibv_destroy_qp does. */
    @Override
    void close();
}
