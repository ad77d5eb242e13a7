package io.jccl.services.ingest;

import io.jccl.verbs.ConnectionParameters;

import java.nio.ByteBuffer;
import java.time.Duration;
import java.time.Instant;

/** The connection's private data both ways, and the epoch clock records are stamped with. */
final class Wire {
    static final int MAGIC = 0x4A494E47; // "JING"
    static final int VERSION = 1;
    static final int REQUEST_BYTES = 12;
    static final int REPLY_BYTES = 60;

    /** Epoch nanoseconds from the monotonic clock plus an offset taken once: no allocation per stamp. */
    private static final long EPOCH_OFFSET_NS;

    static {
        Instant now = Instant.now();
        EPOCH_OFFSET_NS = now.getEpochSecond() * 1_000_000_000L + now.getNano() - System.nanoTime();
    }

    private Wire() {
    }

    /** ACK timeout code of the ring's queue pairs: 4.096 us x 2^18 = 1.07 s, x 8 tries: a silent peer in ~9 s. */
    static final int ACK_TIMEOUT_CODE = 18;

    /**
     * The connection parameters both ends use: the defaults (access, depths, JCCL_AUTH_SECRET) with a link timeout
     * of seconds rather than the default's one: a producer that waits for ring space, or a loaded host, must not
     * have its link declared dead; a consumer that is killed is seen at once anyway (its connections reset).
     */
    static ConnectionParameters parameters(byte[] privateData, Duration handshakeTimeout) {
        ConnectionParameters d = ConnectionParameters.defaults();
        return new ConnectionParameters(d.accessFlags(), d.responderResources(), d.initiatorDepth(), d.retryCount(),
            d.rnrRetryCount(), d.minRnrTimer(), ACK_TIMEOUT_CODE, privateData, handshakeTimeout, d.secret());
    }

    static long epochNanos() {
        return System.nanoTime() + EPOCH_OFFSET_NS;
    }

    static byte[] request(int producerId) {
        return ByteBuffer.allocate(REQUEST_BYTES).putInt(MAGIC).putInt(VERSION).putInt(producerId).array();
    }

    /** The producer id of a request, or -1 when it is not one. */
    static int producerOf(byte[] data) {
        if (data.length != REQUEST_BYTES) {
            return -1;
        }
        ByteBuffer b = ByteBuffer.wrap(data);
        return b.getInt() == MAGIC && b.getInt() == VERSION ? b.getInt() : -1;
    }

    /** What a producer learns from the consumer when it connects. */
    record Reply(long ringAddress, int rkey, int ringBytes, long dataOffset, int maxPayload, int maxProducers,
                 long holeTimeoutNs, long epoch) {
        byte[] encode() {
            return ByteBuffer.allocate(REPLY_BYTES).putInt(MAGIC).putInt(VERSION).putLong(ringAddress).putInt(rkey)
                .putInt(ringBytes).putLong(dataOffset).putInt(maxPayload).putInt(maxProducers).putLong(holeTimeoutNs)
                .putLong(epoch).array();
        }

        static Reply decode(byte[] data) {
            ByteBuffer b = ByteBuffer.wrap(data);
            if (data.length != REPLY_BYTES || b.getInt() != MAGIC || b.getInt() != VERSION) {
                throw new IngestException("the peer is not a JCCL ingest consumer (protocol " + VERSION + ")");
            }
            return new Reply(b.getLong(), b.getInt(), b.getInt(), b.getLong(), b.getInt(), b.getInt(), b.getLong(),
                b.getLong());
        }
    }
}
