package io.jccl.services.ingest;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.util.zip.CRC32C;

/**
 * A record as it lies in the ring, in the producer's retention buffer and in snapshot files (the same bytes
 * everywhere, so nothing is re-encoded on the way to disk): a 32-byte header, the payload, zero padding to 8 bytes.
 *
 * <pre>
 *  0 int  payloadLength
 *  4 int  lengthCheck = ~payloadLength ^ LENGTH_MAGIC   (a length that fails it is not trusted to skip by)
 *  8 int  producerId, bit 31 set when the next record of the same commit follows (a batch: one reservation and one
 *          WRITE_WITH_IMM for several records; the consumer treats the next position as committed)
 * 12 int  crc32c over bytes 0..11 and 16..(32 + payloadLength)
 * 16 long sequence (1, 2, ... per producer)
 * 24 long timestampNs (producer's clock, ns since the epoch)
 * 32      payload
 * </pre>
 */
final class RecordFormat {
    static final int HEADER_BYTES = 32;
    static final int LENGTH = 0;
    static final int LENGTH_CHECK = 4;
    static final int PRODUCER = 8;
    static final int CRC = 12;
    static final int SEQUENCE = 16;
    static final int TIMESTAMP = 24;
    static final int LENGTH_MAGIC = 0x1D6E5701;
    static final int CONTINUES = 0x8000_0000;

    private static final ValueLayout.OfInt INT = ValueLayout.JAVA_INT_UNALIGNED;
    private static final ValueLayout.OfLong LONG = ValueLayout.JAVA_LONG_UNALIGNED;

    private RecordFormat() {
    }

    /** Bytes a record of this payload occupies (header, payload, padding to 8). */
    static int recordBytes(int payloadLength) {
        return (HEADER_BYTES + payloadLength + 7) & ~7;
    }

    /** Writes the header (CRC included) for a payload already at {@code at + HEADER_BYTES}. */
    static void writeHeader(MemorySegment segment, ByteBuffer view, long at, int payloadLength, int producerId,
                            long sequence, long timestampNs, CRC32C crc) {
        segment.set(INT, at + LENGTH, payloadLength);
        segment.set(INT, at + LENGTH_CHECK, ~payloadLength ^ LENGTH_MAGIC);
        segment.set(INT, at + PRODUCER, producerId);
        segment.set(LONG, at + SEQUENCE, sequence);
        segment.set(LONG, at + TIMESTAMP, timestampNs);
        for (long p = at + HEADER_BYTES + payloadLength, end = at + recordBytes(payloadLength); p < end; p++) {
            segment.set(ValueLayout.JAVA_BYTE, p, (byte) 0); // padding: no slice, no allocation
        }
        segment.set(INT, at + CRC, crc(view, (int) at, payloadLength, crc));
    }

    /** The payload length when its check holds and it is within {@code maxPayload}, else -1. */
    static int trustedLength(MemorySegment segment, long at, int maxPayload) {
        int length = segment.get(INT, at + LENGTH);
        int check = segment.get(INT, at + LENGTH_CHECK);
        if (length < 0 || length > maxPayload || check != (~length ^ LENGTH_MAGIC)) {
            return -1;
        }
        return length;
    }

    /** Whether the stored CRC matches (the length must be trusted first). */
    static boolean crcMatches(MemorySegment segment, ByteBuffer view, long at, int payloadLength, CRC32C crc) {
        return segment.get(INT, at + CRC) == crc(view, (int) at, payloadLength, crc);
    }

    /** CRC32C of the header without its CRC field, and the payload: no allocation (a reused view and CRC). */
    static int crc(ByteBuffer view, int at, int payloadLength, CRC32C crc) {
        crc.reset();
        view.limit(at + CRC).position(at);
        crc.update(view);
        view.limit(at + HEADER_BYTES + payloadLength).position(at + SEQUENCE);
        crc.update(view);
        view.clear();
        return (int) crc.getValue();
    }

    static int producer(MemorySegment segment, long at) {
        return segment.get(INT, at + PRODUCER) & ~CONTINUES;
    }

    /** Whether the next record belongs to the same commit (trust it only once the CRC matched). */
    static boolean continues(MemorySegment segment, long at) {
        return (segment.get(INT, at + PRODUCER) & CONTINUES) != 0;
    }

    /** Sets or clears the batch flag of a stamped record and recomputes its CRC. */
    static void setContinues(MemorySegment segment, ByteBuffer view, long at, boolean continues, CRC32C crc) {
        int raw = segment.get(INT, at + PRODUCER);
        int wanted = continues ? raw | CONTINUES : raw & ~CONTINUES;
        if (raw != wanted) {
            segment.set(INT, at + PRODUCER, wanted);
            segment.set(INT, at + CRC, crc(view, (int) at, segment.get(INT, at + LENGTH), crc));
        }
    }

    static long sequence(MemorySegment segment, long at) {
        return segment.get(LONG, at + SEQUENCE);
    }

    static long timestamp(MemorySegment segment, long at) {
        return segment.get(LONG, at + TIMESTAMP);
    }
}
