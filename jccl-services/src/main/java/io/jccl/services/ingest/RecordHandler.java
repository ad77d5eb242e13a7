package io.jccl.services.ingest;

import java.lang.foreign.MemorySegment;

/** Receives the records a consumer reads, in ring order (per producer: in sequence order, each once). */
@FunctionalInterface
public interface RecordHandler {
    /**
     * One record.
     *
     * @param producerId the producer's id
     * @param sequence the record's sequence number in its producer's stream (1, 2, 3, ...)
     * @param timestampNs when the producer appended it (nanoseconds since the epoch, the producer's clock)
     * @param buffer memory holding the payload (the ring itself, a scratch copy or a mapped file: no copy is made
     *     for the handler); valid only during this call
     * @param offset where the payload starts in {@code buffer}
     * @param length the payload bytes
     */
    void onRecord(int producerId, long sequence, long timestampNs, MemorySegment buffer, long offset, int length);
}
