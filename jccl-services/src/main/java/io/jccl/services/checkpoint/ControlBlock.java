package io.jccl.services.checkpoint;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.zip.CRC32C;

/**
 * The agent's control segment, which ranks READ: a header (the agent's state) and one reply slot per shard. The agent
 * writes a record as a whole with a CRC32C of its bytes at its end; a READ that raced with a write (torn: a mix of
 * the old and the new record) fails the check and is simply read again. Also the requests ranks send as
 * notifications (at most 64 B).
 */
final class ControlBlock {
    /** Bytes of the header record. */
    static final int HEADER_BYTES = 1024;
    /** Bytes of one reply slot. */
    static final int SLOT_BYTES = 512;
    private static final int MAGIC = 0x4A43_4B31; // "JCK1"

    // Header fields (byte offsets).
    static final int H_RELEASED = 8;
    static final int H_HELD = 16;
    static final int H_DURABLE = 24;
    static final int H_FAILED = 32;
    static final int H_TEXT = 48;
    // Slot fields.
    static final int S_REQUEST = 8;
    static final int S_STEP = 16;
    static final int S_CRC = 24;
    static final int S_LENGTH = 32;
    static final int S_STATUS = 40;
    static final int S_TEXT = 48;

    /** Reply status: done. */
    static final int OK = 1;
    /** Reply status: refused or failed, the text says why. */
    static final int ERROR = 2;
    /** Reply status: no durable checkpoint to restore. */
    static final int NONE = 3;

    /** Request kind: a shard was written into staging. */
    static final byte STAGE = 'S';
    /** Request kind: serve a checkpoint from staging. */
    static final byte RESTORE = 'R';

    private ControlBlock() {
    }

    /** Length of a control segment for {@code maxShards} slots. */
    static long length(int maxShards) {
        return HEADER_BYTES + (long) SLOT_BYTES * maxShards;
    }

    /** Offset of slot {@code shard}. */
    static long slotOffset(int shard) {
        return HEADER_BYTES + (long) SLOT_BYTES * shard;
    }

    /** A header record: released, held, durable and failed steps, and the last persist error's text. */
    static byte[] header(long released, long held, long durable, long failed, String error) {
        ByteBuffer b = ByteBuffer.allocate(HEADER_BYTES).order(ByteOrder.LITTLE_ENDIAN);
        b.putInt(0, MAGIC).putLong(H_RELEASED, released).putLong(H_HELD, held).putLong(H_DURABLE, durable)
            .putLong(H_FAILED, failed);
        putText(b, H_TEXT, error);
        seal(b);
        return b.array();
    }

    /** A slot record: the answer to request {@code request}. */
    static byte[] slot(long request, long step, int crc, long length, int status, String text) {
        ByteBuffer b = ByteBuffer.allocate(SLOT_BYTES).order(ByteOrder.LITTLE_ENDIAN);
        b.putInt(0, MAGIC).putLong(S_REQUEST, request).putLong(S_STEP, step).putLong(S_CRC, crc & 0xFFFF_FFFFL)
            .putLong(S_LENGTH, length).putInt(S_STATUS, status);
        putText(b, S_TEXT, text);
        seal(b);
        return b.array();
    }

    private static void putText(ByteBuffer b, int at, String text) {
        byte[] t = text == null ? new byte[0] : text.getBytes(StandardCharsets.UTF_8);
        int max = b.capacity() - at - 4 - 8;
        int n = Math.min(t.length, max);
        b.putInt(at, n).put(at + 4, t, 0, n);
    }

    private static void seal(ByteBuffer b) {
        CRC32C crc = new CRC32C();
        crc.update(b.array(), 0, b.capacity() - 8);
        b.putLong(b.capacity() - 8, crc.getValue());
    }

    /** Whether {@code record} is whole: magic and check match (false for a torn or never-written record). */
    static boolean intact(ByteBuffer record) {
        if (record.getInt(0) != MAGIC) {
            return false;
        }
        CRC32C crc = new CRC32C();
        crc.update(record.array(), 0, record.capacity() - 8);
        return record.getLong(record.capacity() - 8) == crc.getValue();
    }

    /** The text at {@code at} of a record. */
    static String text(ByteBuffer record, int at) {
        int n = record.getInt(at);
        return new String(record.array(), at + 4, n, StandardCharsets.UTF_8);
    }

    // ------------------------------------------------------------------------------------------ requests

    /** Bytes of a request. */
    static final int REQUEST_BYTES = 45;

    /**
     * A STAGE request: shard {@code shard} of {@code layout} for {@code step} is in staging, and its CRC32C as the
     * rank computed it from its own memory is {@code crc}.
     */
    static byte[] stage(long request, long step, int shard, ShardLayout layout, int crc) {
        return request(STAGE, request, step, shard, layout, crc);
    }

    /** A RESTORE request: the newest durable checkpoint, shard {@code shard} of {@code layout}. */
    static byte[] restore(long request, int shard, ShardLayout layout) {
        return request(RESTORE, request, -1, shard, layout, 0);
    }

    private static byte[] request(byte kind, long request, long step, int shard, ShardLayout layout, int crc) {
        return ByteBuffer.allocate(REQUEST_BYTES).order(ByteOrder.LITTLE_ENDIAN).put(kind).putLong(request)
            .putLong(step).putInt(shard).putLong(layout.totalBytes()).putInt(layout.elementBytes())
            .putInt(layout.shards()).putInt(crc).array();
    }

    /**
     * A request as the agent reads it.
     *
     * @param kind {@link #STAGE} or {@link #RESTORE}
     * @param request the rank's request id, echoed in the reply
     * @param step the step (-1 for the newest in a RESTORE)
     * @param shard the shard, also the reply slot
     * @param layout the rank's layout
     * @param crc the rank's CRC32C of its shard (STAGE)
     */
    record Request(byte kind, long request, long step, int shard, ShardLayout layout, int crc) {
    }

    /**
     * Parses a request.
     *
     * @throws IllegalArgumentException when it is malformed
     */
    static Request parse(byte[] message) {
        if (message.length != REQUEST_BYTES || (message[0] != STAGE && message[0] != RESTORE)) {
            throw new IllegalArgumentException("malformed checkpoint request of " + message.length + " B");
        }
        ByteBuffer b = ByteBuffer.wrap(message).order(ByteOrder.LITTLE_ENDIAN);
        byte kind = b.get();
        long request = b.getLong();
        long step = b.getLong();
        int shard = b.getInt();
        long total = b.getLong();
        int element = b.getInt();
        int shards = b.getInt();
        int crc = b.getInt();
        return new Request(kind, request, step, shard, new ShardLayout(total, element, shards), crc);
    }
}
