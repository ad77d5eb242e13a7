package io.jccl.verbs;

/** Send-queue operations, as {@code enum ibv_wr_opcode}. */
public enum SendOpcode {
    /** RDMA WRITE: copy local data into the peer's region; the peer's CPU is not involved. */
    RDMA_WRITE(WorkCompletionOpcode.RDMA_WRITE),
    /** RDMA WRITE with immediate data: the write, then a receive completion at the peer carrying the immediate. */
    RDMA_WRITE_WITH_IMM(WorkCompletionOpcode.RDMA_WRITE),
    /** SEND: consumes a receive posted at the peer. */
    SEND(WorkCompletionOpcode.SEND),
    /** SEND with immediate data. */
    SEND_WITH_IMM(WorkCompletionOpcode.SEND),
    /** RDMA READ: copy the peer's region into local memory. */
    RDMA_READ(WorkCompletionOpcode.RDMA_READ),
    /** 64-bit compare-and-swap on the peer's memory; the original value lands in the local buffer. */
    ATOMIC_CMP_AND_SWP(WorkCompletionOpcode.COMP_SWAP),
    /** 64-bit fetch-and-add on the peer's memory; the original value lands in the local buffer. */
    ATOMIC_FETCH_AND_ADD(WorkCompletionOpcode.FETCH_ADD);

    private final WorkCompletionOpcode completionOpcode;

    SendOpcode(WorkCompletionOpcode completionOpcode) {
        this.completionOpcode = completionOpcode;
    }

    /** The opcode the requester's completion reports. */
    public WorkCompletionOpcode completionOpcode() {
        return completionOpcode;
    }

    /** Whether the operation carries immediate data. */
    public boolean hasImmediate() {
        return this == RDMA_WRITE_WITH_IMM || this == SEND_WITH_IMM;
    }

    /** Whether the operation is an atomic. */
    public boolean isAtomic() {
        return this == ATOMIC_CMP_AND_SWP || this == ATOMIC_FETCH_AND_ADD;
    }

    /** Whether the operation consumes a receive at the peer. */
    public boolean consumesReceive() {
        return this == SEND || this == SEND_WITH_IMM || this == RDMA_WRITE_WITH_IMM;
    }

    /** Whether the operation names remote memory (rkey + address). */
    public boolean isOneSided() {
        return this == RDMA_WRITE || this == RDMA_WRITE_WITH_IMM || this == RDMA_READ || isAtomic();
    }
}
