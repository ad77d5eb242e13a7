package io.jccl.verbs;

/**
 * Creation attributes of a reliable-connected queue pair ({@code struct ibv_qp_init_attr}).
 *
 * @param sendCompletionQueue where send-queue completions go
 * @param receiveCompletionQueue where receive-queue completions go (may be the same queue)
 * @param maxSendWorkRequests send-queue depth
 * @param maxReceiveWorkRequests receive-queue depth
 * @param maxSendSge scatter/gather entries per send request
 * @param maxReceiveSge scatter/gather entries per receive request
 * @param maxInlineData largest payload that may be posted with {@link SendFlag#INLINE}
 * @param signalAll whether every send request completes with a completion, signaled or not (sq_sig_all)
 */
public record QueuePairInitAttributes(CompletionQueue sendCompletionQueue, CompletionQueue receiveCompletionQueue,
                                      int maxSendWorkRequests, int maxReceiveWorkRequests, int maxSendSge,
                                      int maxReceiveSge, int maxInlineData, boolean signalAll) {

    /** Validates the fields. */
    public QueuePairInitAttributes {
        if (sendCompletionQueue == null || receiveCompletionQueue == null) {
            throw new IllegalArgumentException("a queue pair needs send and receive completion queues");
        }
        if (maxSendWorkRequests < 1 || maxReceiveWorkRequests < 1 || maxSendSge < 1 || maxReceiveSge < 1
            || maxInlineData < 0) {
            throw new IllegalArgumentException("queue depths and sge counts must be positive, inline size >= 0");
        }
    }

    /** Defaults for one completion queue: 128 sends, 128 receives, 4 sges each, 64 bytes inline, sq_sig_all off. */
    public static QueuePairInitAttributes of(CompletionQueue completionQueue) {
        return new QueuePairInitAttributes(completionQueue, completionQueue, 128, 128, 4, 4, 64, false);
    }

    /** A copy with other queue depths. */
    public QueuePairInitAttributes withDepths(int maxSend, int maxReceive) {
        return new QueuePairInitAttributes(sendCompletionQueue, receiveCompletionQueue, maxSend, maxReceive,
            maxSendSge, maxReceiveSge, maxInlineData, signalAll);
    }

    /** A copy with another inline limit. */
    public QueuePairInitAttributes withMaxInlineData(int bytes) {
        return new QueuePairInitAttributes(sendCompletionQueue, receiveCompletionQueue, maxSendWorkRequests,
            maxReceiveWorkRequests, maxSendSge, maxReceiveSge, bytes, signalAll);
    }

    /** A copy with sq_sig_all set as given. */
    public QueuePairInitAttributes withSignalAll(boolean all) {
        return new QueuePairInitAttributes(sendCompletionQueue, receiveCompletionQueue, maxSendWorkRequests,
            maxReceiveWorkRequests, maxSendSge, maxReceiveSge, maxInlineData, all);
    }
}
