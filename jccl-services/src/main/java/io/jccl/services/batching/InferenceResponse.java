package io.jccl.services.batching;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * One answered request, read in place from the producer's registered response slot (no copy, nothing allocated per
 * request): valid until the next call on the {@link InferenceClient} that returned it.
 */
public final class InferenceResponse {
    private final MemorySegment slot;
    private final MemorySegment output;
    long latencyNs;

    InferenceResponse(MemorySegment slot, int outputBytes) {
        this.slot = slot;
        this.output = slot.asSlice(Wire.RESPONSE_HEADER, outputBytes).asReadOnly();
    }

    /** The id {@link InferenceClient#submit} returned for the request. */
    public long requestId() {
        return slot.get(ValueLayout.JAVA_LONG_UNALIGNED, Wire.RESP_ID);
    }

    /** The outcome. */
    public InferenceStatus status() {
        return InferenceStatus.of(slot.get(ValueLayout.JAVA_INT_UNALIGNED, Wire.RESP_STATUS));
    }

    /** Whether the model ran and {@link #output()} holds its row. */
    public boolean isOk() {
        return status() == InferenceStatus.OK;
    }

    /** Requests in the batch that carried this one (0 when rejected). */
    public int batchSize() {
        return slot.get(ValueLayout.JAVA_INT_UNALIGNED, Wire.RESP_BATCH_SIZE);
    }

    /** The consumer's number of that batch, from 1 (0 when rejected). */
    public long batchId() {
        return slot.get(ValueLayout.JAVA_LONG_UNALIGNED, Wire.RESP_BATCH_ID);
    }

    /** Nanoseconds the request waited in the consumer's queue (arrival to batch, or to rejection). */
    public long queueDelayNs() {
        return slot.get(ValueLayout.JAVA_LONG_UNALIGNED, Wire.RESP_QUEUE_DELAY);
    }

    /** Why its batch closed ({@link CloseReason#NONE} when rejected). */
    public CloseReason closeReason() {
        return CloseReason.of(slot.get(ValueLayout.JAVA_INT_UNALIGNED, Wire.RESP_REASON));
    }

    /** The model's output row (read-only; meaningful only when {@link #isOk()}). */
    public MemorySegment output() {
        return output;
    }

    /** Nanoseconds from {@link InferenceClient#submit} to the response being seen by this client. */
    public long latencyNs() {
        return latencyNs;
    }

    @Override
    public String toString() {
        return "request " + requestId() + ": " + status() + (isOk() ? " in batch " + batchId() + " of " + batchSize()
            + " (" + closeReason() + ")" : "") + ", queued " + queueDelayNs() / 1000 + " us, latency "
            + latencyNs / 1000 + " us";
    }
}
