package io.jccl.conformance;

import io.jccl.verbs.WorkCompletion;
import io.jccl.verbs.WorkCompletionOpcode;
import io.jccl.verbs.WorkCompletionStatus;

/**
 * An immutable copy of a {@link WorkCompletion}, safe to keep after the poll array is reused and to send between
 * processes as one token of the peer protocol.
 *
 * @param wrId the work request's identifier
 * @param status the outcome
 * @param opcode what completed (meaningful only on success, as in libibverbs)
 * @param byteLength bytes received, read or fetched
 * @param immediateData immediate data, valid when {@code withImmediate}
 * @param withImmediate whether immediate data came with the completion
 * @param queuePairNumber the local QP the request belonged to
 * @param sourceQueuePairNumber the sending QP (receive completions)
 */
public record Completion(long wrId, WorkCompletionStatus status, WorkCompletionOpcode opcode, int byteLength,
                         int immediateData, boolean withImmediate, int queuePairNumber,
                         int sourceQueuePairNumber) {

    /** Copies a polled completion. */
    public static Completion of(WorkCompletion wc) {
        return new Completion(wc.wrId(), wc.status(), wc.opcode(), wc.byteLength(), wc.immediateData(),
            wc.withImmediate(), wc.queuePairNumber(), wc.sourceQueuePairNumber());
    }

    /** Whether the status is SUCCESS. */
    public boolean isSuccess() {
        return status == WorkCompletionStatus.SUCCESS;
    }

    /** One protocol token: colon-separated fields, no spaces. */
    String encode() {
        return Long.toString(wrId) + ':' + status.name() + ':' + opcode.name() + ':' + byteLength + ':'
            + immediateData + ':' + withImmediate + ':' + queuePairNumber + ':' + sourceQueuePairNumber;
    }

    /** Parses {@link #encode()}'s form. */
    static Completion decode(String token) {
        String[] f = token.split(":");
        return new Completion(Long.parseLong(f[0]), WorkCompletionStatus.valueOf(f[1]),
            WorkCompletionOpcode.valueOf(f[2]), Integer.parseInt(f[3]), Integer.parseInt(f[4]),
            Boolean.parseBoolean(f[5]), Integer.parseInt(f[6]), Integer.parseInt(f[7]));
    }
}
