package io.jccl.verbs;

/**
 * A work completion ({@code struct ibv_wc}). Callers allocate an array of these once and pass it to
 * {@link CompletionQueue#poll(WorkCompletion[], int)}, which overwrites the entries; nothing is allocated per poll.
 */
public final class WorkCompletion {
    private long wrId;
    private WorkCompletionStatus status = WorkCompletionStatus.SUCCESS;
    private WorkCompletionOpcode opcode = WorkCompletionOpcode.SEND;
    private int byteLength;
    private int immediateData;
    private boolean withImmediate;
    private int queuePairNumber;
    private int sourceQueuePairNumber;
    private int vendorError;

    /** Allocates {@code n} completions for a poll array. */
    public static WorkCompletion[] array(int n) {
        WorkCompletion[] completions = new WorkCompletion[n];
        for (int i = 0; i < n; i++) {
            completions[i] = new WorkCompletion();
        }
        return completions;
    }

    /** Overwrites every field; used by providers. */
    public void set(long wrId, WorkCompletionStatus status, WorkCompletionOpcode opcode, int byteLength,
                    int immediateData, boolean withImmediate, int queuePairNumber, int sourceQueuePairNumber,
                    int vendorError) {
        this.wrId = wrId;
        this.status = status;
        this.opcode = opcode;
        this.byteLength = byteLength;
        this.immediateData = immediateData;
        this.withImmediate = withImmediate;
        this.queuePairNumber = queuePairNumber;
        this.sourceQueuePairNumber = sourceQueuePairNumber;
        this.vendorError = vendorError;
    }

    /** The work request's identifier. */
    public long wrId() {
        return wrId;
    }

    /** The outcome. */
    public WorkCompletionStatus status() {
        return status;
    }

    /** Whether the outcome is {@link WorkCompletionStatus#SUCCESS}. */
    public boolean isSuccess() {
        return status == WorkCompletionStatus.SUCCESS;
    }

    /**
     * What completed. As in libibverbs, only {@link #wrId()}, {@link #status()}, {@link #queuePairNumber()} and
     * {@link #vendorError()} are meaningful for completions with an error status.
     */
    public WorkCompletionOpcode opcode() {
        return opcode;
    }

    /** Bytes received (receive completions) or transferred (READ and atomics). */
    public int byteLength() {
        return byteLength;
    }

    /** Immediate data, valid when {@link #withImmediate()}. */
    public int immediateData() {
        return immediateData;
    }

    /** Whether the completion carries immediate data (IBV_WC_WITH_IMM). */
    public boolean withImmediate() {
        return withImmediate;
    }

    /** Number of the local queue pair the request belonged to. */
    public int queuePairNumber() {
        return queuePairNumber;
    }

    /** Number of the remote queue pair that sent the message (receive completions). */
    public int sourceQueuePairNumber() {
        return sourceQueuePairNumber;
    }

    /** Provider-specific detail for errors (0 when none). */
    public int vendorError() {
        return vendorError;
    }

    @Override
    public String toString() {
        return "WorkCompletion{wrId=" + wrId + ", " + status + ", " + opcode + ", len=" + byteLength
            + (withImmediate ? ", imm=0x" + Integer.toHexString(immediateData) : "") + ", qpn=0x"
            + Integer.toHexString(queuePairNumber) + ", srcQpn=0x" + Integer.toHexString(sourceQueuePairNumber)
            + (vendorError != 0 ? ", vendorErr=" + vendorError : "") + "}";
    }
}
