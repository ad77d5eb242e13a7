package io.jccl.verbs;

/** What a completion completed, as {@code enum ibv_wc_opcode}. Receive-side opcodes say {@link #isReceive()}. */
public enum WorkCompletionOpcode {
    /** A SEND or SEND_WITH_IMM completed at the requester. */
    SEND(0),
    /** An RDMA WRITE or WRITE_WITH_IMM completed at the requester. */
    RDMA_WRITE(1),
    /** An RDMA READ completed at the requester. */
    RDMA_READ(2),
    /** A compare-and-swap completed at the requester. */
    COMP_SWAP(3),
    /** A fetch-and-add completed at the requester. */
    FETCH_ADD(4),
    /** A receive consumed by an incoming SEND (or SEND_WITH_IMM). */
    RECV(128),
    /** A receive consumed by an incoming RDMA WRITE_WITH_IMM. */
    RECV_RDMA_WITH_IMM(129);

    private static final WorkCompletionOpcode[] VALUES = values();
    private final int code;

    WorkCompletionOpcode(int code) {
        this.code = code;
    }

    /** The libibverbs value. */
    public int code() {
        return code;
    }

    /** Whether this completion belongs to the receive queue. */
    public boolean isReceive() {
        return (code & 128) != 0;
    }

    /** Opcode from its ordinal (used by providers that store completions as primitives). */
    public static WorkCompletionOpcode fromOrdinal(int ordinal) {
        return VALUES[ordinal];
    }
}
