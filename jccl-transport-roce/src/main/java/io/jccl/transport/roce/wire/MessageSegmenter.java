package io.jccl.transport.roce.wire;

/**
 * Cuts one message into packets of at most the path MTU and names each packet's opcode, as rxe's
 * {@code next_opcode_rc} does: a message that fits one MTU is ONLY, otherwise FIRST, MIDDLE..., LAST; the immediate
 * data rides on the LAST or ONLY packet, the RETH on the FIRST or ONLY packet of an RDMA WRITE. A zero-length
 * message is one ONLY packet. Each packet consumes one PSN.
 *
 * <p>Reusable: {@link #reset} starts a new message, then {@link #next()} until {@link #hasNext()} is false.
 * Nothing is allocated.
 */
public final class MessageSegmenter {
    /** A SEND. */
    public static final int SEND = 0;
    /** A SEND with immediate data. */
    public static final int SEND_WITH_IMMEDIATE = 1;
    /** An RDMA WRITE. */
    public static final int RDMA_WRITE = 2;
    /** An RDMA WRITE with immediate data. */
    public static final int RDMA_WRITE_WITH_IMMEDIATE = 3;
    /** The responses to an RDMA READ request. */
    public static final int RDMA_READ_RESPONSE = 4;

    /** Smallest path MTU. */
    public static final int MIN_MTU = 256;
    /** Largest path MTU. */
    public static final int MAX_MTU = 4096;

    // [operation][FIRST, MIDDLE, LAST, ONLY]
    private static final int[][] OPCODES = {
        {RoceOpcode.SEND_FIRST, RoceOpcode.SEND_MIDDLE, RoceOpcode.SEND_LAST, RoceOpcode.SEND_ONLY},
        {RoceOpcode.SEND_FIRST, RoceOpcode.SEND_MIDDLE, RoceOpcode.SEND_LAST_WITH_IMMEDIATE,
            RoceOpcode.SEND_ONLY_WITH_IMMEDIATE},
        {RoceOpcode.RDMA_WRITE_FIRST, RoceOpcode.RDMA_WRITE_MIDDLE, RoceOpcode.RDMA_WRITE_LAST,
            RoceOpcode.RDMA_WRITE_ONLY},
        {RoceOpcode.RDMA_WRITE_FIRST, RoceOpcode.RDMA_WRITE_MIDDLE, RoceOpcode.RDMA_WRITE_LAST_WITH_IMMEDIATE,
            RoceOpcode.RDMA_WRITE_ONLY_WITH_IMMEDIATE},
        {RoceOpcode.RDMA_READ_RESPONSE_FIRST, RoceOpcode.RDMA_READ_RESPONSE_MIDDLE,
            RoceOpcode.RDMA_READ_RESPONSE_LAST, RoceOpcode.RDMA_READ_RESPONSE_ONLY},
    };
    private static final int FIRST = 0;
    private static final int MIDDLE = 1;
    private static final int LAST = 2;
    private static final int ONLY = 3;

    private int[] opcodes;
    private long lengthBytes;
    private int mtuBytes;
    private long offsetBytes;
    private long nextOffsetBytes;
    private int payloadLength;
    private int packetIndex;
    private int packetCount;

    /** Creates a segmenter with no message. */
    public MessageSegmenter() {
    }

    /**
     * Checks that {@code mtuBytes} is an InfiniBand MTU: 256, 512, 1024, 2048 or 4096.
     *
     * @throws IllegalArgumentException otherwise
     */
    public static int checkedMtu(int mtuBytes) {
        if (mtuBytes < MIN_MTU || mtuBytes > MAX_MTU || Integer.bitCount(mtuBytes) != 1) {
            throw new IllegalArgumentException("path MTU " + mtuBytes + " is not one of 256, 512, 1024, 2048, 4096");
        }
        return mtuBytes;
    }

    /** Packets (and PSNs) a message of {@code lengthBytes} takes at {@code mtuBytes}; a READ request's span. */
    public static int packetCount(long lengthBytes, int mtuBytes) {
        checkedMtu(mtuBytes);
        if (lengthBytes < 0 || lengthBytes > 0xFFFF_FFFFL) {
            throw new IllegalArgumentException("message length " + lengthBytes + " outside 0..2^32-1");
        }
        return lengthBytes == 0 ? 1 : (int) ((lengthBytes + mtuBytes - 1) / mtuBytes);
    }

    /**
     * The opcode of one packet of a message of {@code operation}: the first and/or last packet of the message, or a
     * middle one (for a sender that resumes a message across calls instead of walking it with {@link #next()}).
     */
    public static int opcode(int operation, boolean first, boolean last) {
        if (operation < SEND || operation > RDMA_READ_RESPONSE) {
            throw new IllegalArgumentException("operation " + operation + " outside 0..4");
        }
        int position = first ? (last ? ONLY : FIRST) : (last ? LAST : MIDDLE);
        return OPCODES[operation][position];
    }

    /** Starts a message: {@code operation} is one of {@link #SEND} .. {@link #RDMA_READ_RESPONSE}. */
    public MessageSegmenter reset(int operation, long lengthBytes, int mtuBytes) {
        if (operation < SEND || operation > RDMA_READ_RESPONSE) {
            throw new IllegalArgumentException("operation " + operation + " outside 0..4");
        }
        this.packetCount = packetCount(lengthBytes, mtuBytes);
        this.opcodes = OPCODES[operation];
        this.lengthBytes = lengthBytes;
        this.mtuBytes = mtuBytes;
        this.offsetBytes = 0;
        this.nextOffsetBytes = 0;
        this.payloadLength = 0;
        this.packetIndex = 0;
        return this;
    }

    /** Whether packets remain. */
    public boolean hasNext() {
        return opcodes != null && packetIndex < packetCount;
    }

    /**
     * Advances to the next packet and returns its opcode; {@link #payloadOffset()} and {@link #payloadLength()} then
     * describe it.
     *
     * @throws IllegalStateException when no packet remains
     */
    public int next() {
        if (!hasNext()) {
            throw new IllegalStateException("no packet left in this message");
        }
        offsetBytes = nextOffsetBytes;
        payloadLength = (int) Math.min(mtuBytes, lengthBytes - offsetBytes);
        nextOffsetBytes = offsetBytes + payloadLength;
        int position;
        if (packetCount == 1) {
            position = ONLY;
        } else if (packetIndex == 0) {
            position = FIRST;
        } else if (packetIndex == packetCount - 1) {
            position = LAST;
        } else {
            position = MIDDLE;
        }
        packetIndex++;
        return opcodes[position];
    }

    /** Offset of the current packet's payload in the message. */
    public long payloadOffset() {
        return offsetBytes;
    }

    /** Payload bytes of the current packet. */
    public int payloadLength() {
        return payloadLength;
    }

    /** Index of the current packet, 0-based (add it to the message's first PSN with {@link Psn#add}). */
    public int packetIndex() {
        return packetIndex - 1;
    }

    /** Packets in the current message. */
    public int packetCount() {
        return packetCount;
    }
}
