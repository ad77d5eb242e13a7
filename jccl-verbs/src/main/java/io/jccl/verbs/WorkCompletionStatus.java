package io.jccl.verbs;

/** Completion status, in the order and with the meaning of {@code enum ibv_wc_status}. */
public enum WorkCompletionStatus {
    /** The operation completed successfully. */
    SUCCESS,
    /** Local length error: a receive buffer was too small, or a message exceeded the port's maximum. */
    LOC_LEN_ERR,
    /** Local QP operation error: an internal consistency error of the work request. */
    LOC_QP_OP_ERR,
    /** Local EE context operation error (unused: no RD transport). */
    LOC_EEC_OP_ERR,
    /** Local protection error: a scatter/gather entry's lkey, range or access rights are not valid. */
    LOC_PROT_ERR,
    /** The work request was flushed because the queue pair entered the error state. */
    WR_FLUSH_ERR,
    /** Memory-window bind error. */
    MW_BIND_ERR,
    /** Bad response: an unexpected transport-layer opcode came back. */
    BAD_RESP_ERR,
    /** Local access error during an RDMA READ response or atomic result write. */
    LOC_ACCESS_ERR,
    /** Remote invalid request: the responder could not handle the request (opcode, length). */
    REM_INV_REQ_ERR,
    /** Remote access error: rkey, range or permission check failed at the responder. */
    REM_ACCESS_ERR,
    /** Remote operation error: the responder failed to complete the operation. */
    REM_OP_ERR,
    /** Transport retry counter exceeded: the peer did not answer (dead peer, lost connection). */
    RETRY_EXC_ERR,
    /** RNR retry counter exceeded: the peer had no receive posted for our SENDs. */
    RNR_RETRY_EXC_ERR,
    /** Local RDD violation (unused). */
    LOC_RDD_VIOL_ERR,
    /** Remote invalid RD request (unused). */
    REM_INV_RD_REQ_ERR,
    /** Remote aborted. */
    REM_ABORT_ERR,
    /** Invalid EE context number (unused). */
    INV_EECN_ERR,
    /** Invalid EE context state (unused). */
    INV_EEC_STATE_ERR,
    /** Fatal error. */
    FATAL_ERR,
    /** Response timeout. */
    RESP_TIMEOUT_ERR,
    /** General error. */
    GENERAL_ERR;

    private static final WorkCompletionStatus[] VALUES = values();

    /** Status from its ibv_wc_status ordinal. */
    public static WorkCompletionStatus fromOrdinal(int ordinal) {
        return VALUES[ordinal];
    }
}
