package io.jccl.services.embedding;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.util.zip.CRC32C;

/**
 * Where everything lives in a table's segment, shared by server and clients (one place, as the transport's
 * flyweights). The segment is a header, one subscriber word per rank of the job, then {@code rows} slots:
 *
 * <pre>
 * header  0 magic "JCCLEMB1" | 8 layout version | 12 table id | 16 rows | 24 dim | 28 slot bytes | 32 data offset
 *         40 ranks (subscriber words)
 * 64      subscriber word per rank: 0 = not subscribed, else subscribed
 * slot    0 head version | 8 CRC32C of bytes 12..end | 12 row (low 32 bits) | 16 D floats (+4 B pad if D is odd)
 *         | end-8 tail version
 * </pre>
 *
 * A row's version is even when stable and odd while a writer is in it (the seqlock); a writer sets the head odd,
 * writes row, data and tail (the new even version) with the checksum, then sets the head to the new version. A
 * reader accepts a slot only when head == tail, even and non-zero, and the checksum and row match: the checksum is
 * there because a one-sided READ does not copy a slot's bytes in address order on every provider (shm0's copy runs
 * backwards when the destination is above the source, a NIC may place a READ response's packets in any order), so
 * head and tail alone could both come from before a write while some data comes from after it.
 */
final class TableLayout {
    static final long MAGIC = 0x31424D454C43434AL; // "JCCLEMB1" little-endian
    /** What the magic becomes when the server closes the table (direct readers see it at their next lookup). */
    static final long CLOSED_MAGIC = 0x44534F4C43424D45L; // "EMBCLOSD"
    static final int LAYOUT_VERSION = 1;
    static final int HEADER_BYTES = 64;
    static final int OFF_MAGIC = 0;
    static final int OFF_LAYOUT = 8;
    static final int OFF_TABLE_ID = 12;
    static final int OFF_ROWS = 16;
    static final int OFF_DIM = 24;
    static final int OFF_SLOT_BYTES = 28;
    static final int OFF_DATA_OFFSET = 32;
    static final int OFF_RANKS = 40;
    static final int SLOT_HEAD = 0;
    static final int SLOT_CRC = 8;
    static final int SLOT_ROW = 12;
    static final int SLOT_DATA = 16;
    /** Largest dimension: a slot stays far below the transfer engine's smallest slice (4 KiB·16). */
    static final int MAX_DIM = 1 << 16;
    /** The version rows start with (even, non-zero: zero means "never written"). */
    static final long INITIAL_VERSION = 2;

    private TableLayout() {
    }

    static int slotBytes(int dim) {
        return SLOT_DATA + ((dim * Float.BYTES + 7) & ~7) + Long.BYTES;
    }

    static int tailOffset(int slotBytes) {
        return slotBytes - Long.BYTES;
    }

    /** Bytes of header plus subscriber words, rounded up to 64. */
    static long dataOffset(int ranks) {
        return (HEADER_BYTES + (long) ranks * Long.BYTES + 63) & ~63L;
    }

    static long subscriberOffset(int rank) {
        return HEADER_BYTES + (long) rank * Long.BYTES;
    }

    /**
     * CRC32C of a slot's bytes from its row field to its end, read through {@code view} (a ByteBuffer over the
     * memory that holds the slot at {@code slotOffset}; position and limit are changed, nothing is allocated).
     */
    static int checksum(CRC32C crc, ByteBuffer view, int slotOffset, int slotBytes) {
        view.limit(view.capacity()).position(0);
        view.limit(slotOffset + slotBytes).position(slotOffset + SLOT_ROW);
        crc.reset();
        crc.update(view);
        return (int) crc.getValue();
    }

    /**
     * Whether the slot at {@code slotOffset} of {@code m} (viewed by {@code view}) is a stable, untorn copy of
     * {@code row}: returns its version, or -1 when a writer was in it or the bytes are torn.
     */
    static long validate(MemorySegment m, CRC32C crc, ByteBuffer view, int slotOffset, int slotBytes, long row) {
        long head = m.get(ValueLayout.JAVA_LONG_UNALIGNED, slotOffset + SLOT_HEAD);
        long tail = m.get(ValueLayout.JAVA_LONG_UNALIGNED, slotOffset + tailOffset(slotBytes));
        if (head != tail || (head & 1) != 0 || head == 0) {
            return -1;
        }
        if (m.get(ValueLayout.JAVA_INT_UNALIGNED, slotOffset + SLOT_ROW) != (int) row) {
            return -1;
        }
        int stored = m.get(ValueLayout.JAVA_INT_UNALIGNED, slotOffset + SLOT_CRC);
        return checksum(crc, view, slotOffset, slotBytes) == stored ? head : -1;
    }

    /**
     * Fills a slot image at {@code slotOffset} of {@code m} for {@code row} at {@code version} (head and tail both
     * {@code version}) from {@code values[from..from+dim)}, with its checksum.
     */
    static void fill(MemorySegment m, ByteBuffer view, CRC32C crc, int slotOffset, int slotBytes, long row,
                     long version, float[] values, int from, int dim) {
        m.set(ValueLayout.JAVA_LONG_UNALIGNED, slotOffset + SLOT_HEAD, version);
        m.set(ValueLayout.JAVA_INT_UNALIGNED, slotOffset + SLOT_ROW, (int) row);
        MemorySegment.copy(values, from, m, ValueLayout.JAVA_FLOAT_UNALIGNED, slotOffset + SLOT_DATA, dim);
        int pad = slotBytes - Long.BYTES - SLOT_DATA - dim * Float.BYTES;
        if (pad > 0) {
            m.set(ValueLayout.JAVA_INT_UNALIGNED, slotOffset + SLOT_DATA + (long) dim * Float.BYTES, 0);
        }
        m.set(ValueLayout.JAVA_LONG_UNALIGNED, slotOffset + tailOffset(slotBytes), version);
        m.set(ValueLayout.JAVA_INT_UNALIGNED, slotOffset + SLOT_CRC, checksum(crc, view, slotOffset, slotBytes));
    }
}
