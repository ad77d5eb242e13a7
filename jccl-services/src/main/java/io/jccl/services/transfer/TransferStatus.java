package io.jccl.services.transfer;

/** State of one transfer of a batch (Mooncake's {@code TransferStatusEnum}, reduced to what a caller acts on). */
public enum TransferStatus {
    /** Submitted, not yet complete. */
    PENDING,
    /** Every byte landed. */
    SUCCEEDED,
    /** Failed; {@link TransferBatch#error(int)} says why. The batch's other transfers are unaffected. */
    FAILED
}
