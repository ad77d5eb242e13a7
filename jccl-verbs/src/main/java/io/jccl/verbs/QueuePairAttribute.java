package io.jccl.verbs;

/** The attribute-mask bits of {@code ibv_modify_qp}: which fields of {@link QueuePairAttributes} are set. */
public enum QueuePairAttribute {
    /** IBV_QP_STATE. */
    STATE,
    /** IBV_QP_CUR_STATE. */
    CURRENT_STATE,
    /** IBV_QP_EN_SQD_ASYNC_NOTIFY. */
    ENABLE_SQD_ASYNC_NOTIFY,
    /** IBV_QP_ACCESS_FLAGS: which remote operations the QP accepts. */
    ACCESS_FLAGS,
    /** IBV_QP_PKEY_INDEX. */
    PKEY_INDEX,
    /** IBV_QP_PORT. */
    PORT,
    /** IBV_QP_QKEY (UD only). */
    QKEY,
    /** IBV_QP_AV: the address vector, here the remote {@link Endpoint}. */
    ADDRESS_VECTOR,
    /** IBV_QP_PATH_MTU. */
    PATH_MTU,
    /** IBV_QP_TIMEOUT: local ACK timeout, 4.096 µs × 2^timeout (0 = infinite). */
    TIMEOUT,
    /** IBV_QP_RETRY_CNT. */
    RETRY_COUNT,
    /** IBV_QP_RNR_RETRY (7 = infinite). */
    RNR_RETRY,
    /** IBV_QP_RQ_PSN. */
    RQ_PSN,
    /** IBV_QP_MAX_QP_RD_ATOMIC: outstanding READs/atomics this QP may initiate. */
    MAX_QP_RD_ATOMIC,
    /** IBV_QP_ALT_PATH. */
    ALTERNATE_PATH,
    /** IBV_QP_MIN_RNR_TIMER. */
    MIN_RNR_TIMER,
    /** IBV_QP_SQ_PSN. */
    SQ_PSN,
    /** IBV_QP_MAX_DEST_RD_ATOMIC: incoming READs/atomics this QP accepts at once. */
    MAX_DEST_RD_ATOMIC,
    /** IBV_QP_PATH_MIG_STATE. */
    PATH_MIGRATION_STATE,
    /** IBV_QP_DEST_QPN. */
    DEST_QPN
}
