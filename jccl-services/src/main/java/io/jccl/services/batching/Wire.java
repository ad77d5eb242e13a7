package io.jccl.services.batching;

/**
 * The ring's layouts, in one place. A request slot (in the consumer's memory, one lane per producer) and a response
 * slot (in the producer's memory) are a header and a row, 64-byte aligned; both are written whole by one
 * WRITE_WITH_IMM whose immediate names the slot.
 *
 * <pre>
 * request  0 requestId:8  8 timeoutNs:8  16 length:4  20 magic:4  24 sequence:4  28 reserved:4  32 input row
 * response 0 requestId:8  8 status:4  12 batchSize:4  16 batchId:8  24 queueDelayNs:8  32 closeReason:4
 *          36 sequence:4  40 reserved:8  48 output row
 * request immediate  = slot | (sequence &amp; 0x7FFF) &lt;&lt; 16      response immediate = slot | status &lt;&lt; 16
 * </pre>
 */
final class Wire {
    static final int REQUEST_HEADER = 32;
    static final int RESPONSE_HEADER = 48;
    static final int MAGIC = 0x4A434231; // "JCB1"
    static final int REQ_ID = 0;
    static final int REQ_TIMEOUT = 8;
    static final int REQ_LENGTH = 16;
    static final int REQ_MAGIC = 20;
    static final int REQ_SEQUENCE = 24;
    static final int RESP_ID = 0;
    static final int RESP_STATUS = 8;
    static final int RESP_BATCH_SIZE = 12;
    static final int RESP_BATCH_ID = 16;
    static final int RESP_QUEUE_DELAY = 24;
    static final int RESP_REASON = 32;
    static final int RESP_SEQUENCE = 36;
    /** Protocol version in the server's store record. */
    static final String VERSION = "1";

    private Wire() {
    }

    static int requestSlotBytes(int inputBytes) {
        return align(REQUEST_HEADER + inputBytes);
    }

    static int responseSlotBytes(int outputBytes) {
        return align(RESPONSE_HEADER + outputBytes);
    }

    private static int align(int n) {
        return (n + 63) & ~63;
    }

    static int requestImmediate(int slot, int sequence) {
        return slot | (sequence & 0x7FFF) << 16;
    }

    static String prefix(String name) {
        return "jccl-batching/" + name + "/";
    }
}
