package io.jccl.services.kvcache;

import io.jccl.services.transfer.Notification;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * The two messages of the KV-cache protocol, carried as transfer-engine notifications (32 of their 64 bytes):
 * magic, type, pool (hash of its name), block count, request id, first block, tokens. ARRIVED goes from the sender to
 * the receiver after every block of a request landed; RETURNED from the receiver to the sender when the request's
 * blocks are free again.
 */
final class KvMessages {
    static final int MAGIC = 0x4A4B5643;
    static final byte ARRIVED = 1;
    static final byte RETURNED = 2;
    static final int LENGTH = 32;

    private KvMessages() {
    }

    /** Encodes a message into {@code into} (at least {@link #LENGTH} bytes). */
    static void encode(byte[] into, byte type, int pool, int blockCount, long requestId, int firstBlock, int tokens) {
        ByteBuffer b = ByteBuffer.wrap(into).order(ByteOrder.LITTLE_ENDIAN);
        b.putInt(0, MAGIC).put(4, type).putInt(8, pool).putInt(12, blockCount).putLong(16, requestId)
            .putInt(24, firstBlock).putInt(28, tokens);
    }

    /** The message's type if {@code n} is a KV message of {@code pool}, else 0. */
    static byte typeOf(Notification n, int pool) {
        byte[] m = n.message();
        if (m.length != LENGTH) {
            return 0;
        }
        ByteBuffer b = ByteBuffer.wrap(m).order(ByteOrder.LITTLE_ENDIAN);
        return b.getInt(0) == MAGIC && b.getInt(8) == pool ? b.get(4) : 0;
    }

    static int blockCount(Notification n) {
        return ByteBuffer.wrap(n.message()).order(ByteOrder.LITTLE_ENDIAN).getInt(12);
    }

    static long requestId(Notification n) {
        return ByteBuffer.wrap(n.message()).order(ByteOrder.LITTLE_ENDIAN).getLong(16);
    }

    static int firstBlock(Notification n) {
        return ByteBuffer.wrap(n.message()).order(ByteOrder.LITTLE_ENDIAN).getInt(24);
    }

    static int tokens(Notification n) {
        return ByteBuffer.wrap(n.message()).order(ByteOrder.LITTLE_ENDIAN).getInt(28);
    }

    /** The pool id of {@code name} in messages. */
    static int poolId(String name) {
        return name.hashCode();
    }
}
