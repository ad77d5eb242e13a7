package io.jccl.verbs;

/** Queue-pair states, as {@code enum ibv_qp_state}. */
public enum QueuePairState {
    /** Created; no work requests may be posted. */
    RESET,
    /** Initialized: receives may be posted but are not processed. */
    INIT,
    /** Ready to receive: incoming requests are processed; no sends yet. */
    READY_TO_RECEIVE,
    /** Ready to send: fully operational. */
    READY_TO_SEND,
    /** Send queue drained: new sends are queued but not started. */
    SEND_QUEUE_DRAINED,
    /** Send queue error (unreliable types only). */
    SEND_QUEUE_ERROR,
    /** Error: all outstanding and new work requests complete with WR_FLUSH_ERR. */
    ERROR;

    /** The libibverbs short name (RESET, INIT, RTR, RTS, SQD, SQE, ERR). */
    public String shortName() {
        return switch (this) {
            case RESET -> "RESET";
            case INIT -> "INIT";
            case READY_TO_RECEIVE -> "RTR";
            case READY_TO_SEND -> "RTS";
            case SEND_QUEUE_DRAINED -> "SQD";
            case SEND_QUEUE_ERROR -> "SQE";
            case ERROR -> "ERR";
        };
    }
}
