package io.jccl.services.ingest;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;

/**
 * The consumer's registered region: a header the producers use, then the data ring.
 *
 * <pre>
 *    0 long tail              producers' FETCH_ADD target: the next free position (bytes ever reserved)
 *   64 long head, headCheck   the consumer's read position (every byte before it is consumed or skipped)
 *  128 + 32 * producer:       expected (next sequence the consumer accepts), its check,
 *                             acknowledged (highest sequence durable on disk), its check
 *  dataOffset                 ring data: position p lies at dataOffset + (p mod ringBytes)
 * </pre>
 *
 * Every value the consumer publishes is paired with {@code value ^ CHECK_MAGIC}: a producer's READ copies bytes,
 * not atomic words, so a pair that does not match is a torn read and is read again.
 */
final class RingLayout {
    static final long TAIL = 0;
    static final long HEAD = 64;
    static final long SLOTS = 128;
    static final int SLOT_BYTES = 32;
    static final long CHECK_MAGIC = 0x5EEDF00DCAFEL;

    private static final VarHandle LONG = ValueLayout.JAVA_LONG.varHandle();

    private RingLayout() {
    }

    static long dataOffset(int maxProducers) {
        return (SLOTS + (long) SLOT_BYTES * maxProducers + 4095) & ~4095L;
    }

    static long slot(int producer) {
        return SLOTS + (long) SLOT_BYTES * producer;
    }

    /** Publishes a value and its check word (the check last, so a matching pair is the new value). */
    static void publish(MemorySegment segment, long at, long value) {
        LONG.setRelease(segment, at, value);
        LONG.setRelease(segment, at + 8, value ^ CHECK_MAGIC);
    }

    /** A value read as bytes, or -1 when the pair does not match (torn). */
    static long checked(MemorySegment segment, long at) {
        long value = segment.get(ValueLayout.JAVA_LONG, at);
        return (value ^ CHECK_MAGIC) == segment.get(ValueLayout.JAVA_LONG, at + 8) ? value : -1;
    }

    static long getVolatile(MemorySegment segment, long at) {
        return (long) LONG.getVolatile(segment, at);
    }
}
