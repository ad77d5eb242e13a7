package io.jccl.transport.roce.wire;

/**
 * The reliable-connected (RC) opcodes of the base transport header and the layout each implies, as the kernel's
 * {@code rxe_opcode.c} has them, plus the RoCEv2 congestion notification packet (CNP, 0x81).
 *
 * <p>An opcode is a 3-bit transport prefix (RC = 0x00, CNP = 0x80) and a 5-bit operation. For each opcode the table
 * holds a set of {@code *_MASK} flags (which extension headers follow the BTH, whether it carries payload, where in
 * a message it sits) and the header length; extension headers follow the BTH in the order of the InfiniBand
 * specification: RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH. Lookups are array reads: no allocation.
 */
public final class RoceOpcode {
    /** SEND first packet. */
    public static final int SEND_FIRST = 0x00;
    /** SEND middle packet. */
    public static final int SEND_MIDDLE = 0x01;
    /** SEND last packet. */
    public static final int SEND_LAST = 0x02;
    /** SEND last packet with immediate data. */
    public static final int SEND_LAST_WITH_IMMEDIATE = 0x03;
    /** SEND in one packet. */
    public static final int SEND_ONLY = 0x04;
    /** SEND in one packet with immediate data. */
    public static final int SEND_ONLY_WITH_IMMEDIATE = 0x05;
    /** RDMA WRITE first packet (carries the RETH). */
    public static final int RDMA_WRITE_FIRST = 0x06;
    /** RDMA WRITE middle packet. */
    public static final int RDMA_WRITE_MIDDLE = 0x07;
    /** RDMA WRITE last packet. */
    public static final int RDMA_WRITE_LAST = 0x08;
    /** RDMA WRITE last packet with immediate data (consumes a receive). */
    public static final int RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09;
    /** RDMA WRITE in one packet. */
    public static final int RDMA_WRITE_ONLY = 0x0A;
    /** RDMA WRITE in one packet with immediate data. */
    public static final int RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0B;
    /** RDMA READ request (RETH; consumes one PSN per response packet). */
    public static final int RDMA_READ_REQUEST = 0x0C;
    /** RDMA READ response first packet (AETH). */
    public static final int RDMA_READ_RESPONSE_FIRST = 0x0D;
    /** RDMA READ response middle packet (no AETH). */
    public static final int RDMA_READ_RESPONSE_MIDDLE = 0x0E;
    /** RDMA READ response last packet (AETH). */
    public static final int RDMA_READ_RESPONSE_LAST = 0x0F;
    /** RDMA READ response in one packet (AETH). */
    public static final int RDMA_READ_RESPONSE_ONLY = 0x10;
    /** ACK or NAK (AETH). */
    public static final int ACKNOWLEDGE = 0x11;
    /** Atomic response (AETH + AtomicAckETH). */
    public static final int ATOMIC_ACKNOWLEDGE = 0x12;
    /** Atomic compare and swap (AtomicETH). */
    public static final int COMPARE_SWAP = 0x13;
    /** Atomic fetch and add (AtomicETH). */
    public static final int FETCH_ADD = 0x14;
    /** SEND last packet with invalidate (IETH). */
    public static final int SEND_LAST_WITH_INVALIDATE = 0x16;
    /** SEND in one packet with invalidate (IETH). */
    public static final int SEND_ONLY_WITH_INVALIDATE = 0x17;
    /** RoCEv2 congestion notification packet: BTH with BECN set, 16 reserved bytes, ICRC. */
    public static final int CNP = 0x81;

    /** Followed by a RETH. */
    public static final int RETH_MASK = 1;
    /** Followed by an AETH. */
    public static final int AETH_MASK = 1 << 1;
    /** Followed by an AtomicETH. */
    public static final int ATOMIC_ETH_MASK = 1 << 2;
    /** Followed by an AtomicAckETH. */
    public static final int ATOMIC_ACK_ETH_MASK = 1 << 3;
    /** Followed by immediate data. */
    public static final int IMMDT_MASK = 1 << 4;
    /** Followed by an invalidate extended transport header. */
    public static final int IETH_MASK = 1 << 5;
    /** Carries payload (possibly zero bytes). */
    public static final int PAYLOAD_MASK = 1 << 6;
    /** A request (requester to responder). */
    public static final int REQUEST_MASK = 1 << 7;
    /** A response (responder to requester: ACK, READ response, atomic ACK). */
    public static final int ACK_MASK = 1 << 8;
    /** Part of a SEND. */
    public static final int SEND_MASK = 1 << 9;
    /** Part of an RDMA WRITE. */
    public static final int WRITE_MASK = 1 << 10;
    /** An RDMA READ request. */
    public static final int READ_MASK = 1 << 11;
    /** An atomic request. */
    public static final int ATOMIC_MASK = 1 << 12;
    /** Consumes a receive work request at the responder. */
    public static final int RECEIVE_WR_MASK = 1 << 13;
    /** Completes a message at the responder (a receive completion follows when it consumed a receive). */
    public static final int COMPLETION_MASK = 1 << 14;
    /** First packet of a message (FIRST or ONLY). */
    public static final int START_MASK = 1 << 15;
    /** Middle packet of a message. */
    public static final int MIDDLE_MASK = 1 << 16;
    /** Last packet of a message (LAST or ONLY). */
    public static final int END_MASK = 1 << 17;
    /** The congestion notification packet. */
    public static final int CNP_MASK = 1 << 18;

    /** Base transport header length. */
    public static final int BTH_LENGTH = 12;
    /** RDMA extended transport header length (VA, R_Key, DMA length). */
    public static final int RETH_LENGTH = 16;
    /** ACK extended transport header length (syndrome, MSN). */
    public static final int AETH_LENGTH = 4;
    /** Atomic extended transport header length (VA, R_Key, swap/add, compare). */
    public static final int ATOMIC_ETH_LENGTH = 28;
    /** Atomic ACK extended transport header length (original remote data). */
    public static final int ATOMIC_ACK_ETH_LENGTH = 8;
    /** Immediate data length. */
    public static final int IMMDT_LENGTH = 4;
    /** Invalidate extended transport header length (R_Key). */
    public static final int IETH_LENGTH = 4;
    /** Reserved bytes after a CNP's BTH. */
    public static final int CNP_RESERVED_LENGTH = 16;
    /** Invariant CRC trailer length. */
    public static final int ICRC_LENGTH = 4;

    private static final int[] FLAGS = new int[256];
    private static final int[] HEADER_LENGTH = new int[256];
    private static final String[] NAMES = new String[256];

    static {
        int send = REQUEST_MASK | SEND_MASK | PAYLOAD_MASK | RECEIVE_WR_MASK;
        int write = REQUEST_MASK | WRITE_MASK | PAYLOAD_MASK;
        int first = START_MASK;
        int last = END_MASK | COMPLETION_MASK;
        int only = START_MASK | END_MASK | COMPLETION_MASK;
        define(SEND_FIRST, "SEND_FIRST", send | first);
        define(SEND_MIDDLE, "SEND_MIDDLE", send | MIDDLE_MASK);
        define(SEND_LAST, "SEND_LAST", send | last);
        define(SEND_LAST_WITH_IMMEDIATE, "SEND_LAST_WITH_IMMEDIATE", send | IMMDT_MASK | last);
        define(SEND_ONLY, "SEND_ONLY", send | only);
        define(SEND_ONLY_WITH_IMMEDIATE, "SEND_ONLY_WITH_IMMEDIATE", send | IMMDT_MASK | only);
        define(RDMA_WRITE_FIRST, "RDMA_WRITE_FIRST", write | RETH_MASK | first);
        define(RDMA_WRITE_MIDDLE, "RDMA_WRITE_MIDDLE", write | MIDDLE_MASK);
        define(RDMA_WRITE_LAST, "RDMA_WRITE_LAST", write | END_MASK);
        define(RDMA_WRITE_LAST_WITH_IMMEDIATE, "RDMA_WRITE_LAST_WITH_IMMEDIATE",
            write | IMMDT_MASK | RECEIVE_WR_MASK | last);
        define(RDMA_WRITE_ONLY, "RDMA_WRITE_ONLY", write | RETH_MASK | START_MASK | END_MASK);
        define(RDMA_WRITE_ONLY_WITH_IMMEDIATE, "RDMA_WRITE_ONLY_WITH_IMMEDIATE",
            write | RETH_MASK | IMMDT_MASK | RECEIVE_WR_MASK | only);
        define(RDMA_READ_REQUEST, "RDMA_READ_REQUEST", REQUEST_MASK | READ_MASK | RETH_MASK | START_MASK | END_MASK);
        int readResponse = ACK_MASK | PAYLOAD_MASK;
        define(RDMA_READ_RESPONSE_FIRST, "RDMA_READ_RESPONSE_FIRST", readResponse | AETH_MASK | START_MASK);
        define(RDMA_READ_RESPONSE_MIDDLE, "RDMA_READ_RESPONSE_MIDDLE", readResponse | MIDDLE_MASK);
        define(RDMA_READ_RESPONSE_LAST, "RDMA_READ_RESPONSE_LAST", readResponse | AETH_MASK | END_MASK);
        define(RDMA_READ_RESPONSE_ONLY, "RDMA_READ_RESPONSE_ONLY",
            readResponse | AETH_MASK | START_MASK | END_MASK);
        define(ACKNOWLEDGE, "ACKNOWLEDGE", ACK_MASK | AETH_MASK | START_MASK | END_MASK);
        define(ATOMIC_ACKNOWLEDGE, "ATOMIC_ACKNOWLEDGE",
            ACK_MASK | AETH_MASK | ATOMIC_ACK_ETH_MASK | START_MASK | END_MASK);
        int atomic = REQUEST_MASK | ATOMIC_MASK | ATOMIC_ETH_MASK | START_MASK | END_MASK;
        define(COMPARE_SWAP, "COMPARE_SWAP", atomic);
        define(FETCH_ADD, "FETCH_ADD", atomic);
        define(SEND_LAST_WITH_INVALIDATE, "SEND_LAST_WITH_INVALIDATE", send | IETH_MASK | last);
        define(SEND_ONLY_WITH_INVALIDATE, "SEND_ONLY_WITH_INVALIDATE", send | IETH_MASK | only);
        define(CNP, "CNP", CNP_MASK);
    }

    private RoceOpcode() {
    }

    private static void define(int opcode, String name, int flags) {
        FLAGS[opcode] = flags;
        NAMES[opcode] = name;
        int length = BTH_LENGTH;
        length += (flags & RETH_MASK) != 0 ? RETH_LENGTH : 0;
        length += (flags & ATOMIC_ETH_MASK) != 0 ? ATOMIC_ETH_LENGTH : 0;
        length += (flags & AETH_MASK) != 0 ? AETH_LENGTH : 0;
        length += (flags & ATOMIC_ACK_ETH_MASK) != 0 ? ATOMIC_ACK_ETH_LENGTH : 0;
        length += (flags & IMMDT_MASK) != 0 ? IMMDT_LENGTH : 0;
        length += (flags & IETH_MASK) != 0 ? IETH_LENGTH : 0;
        length += (flags & CNP_MASK) != 0 ? CNP_RESERVED_LENGTH : 0;
        HEADER_LENGTH[opcode] = length;
    }

    /** Whether this implementation knows {@code opcode} (an unknown opcode from the wire is dropped, not parsed). */
    public static boolean isKnown(int opcode) {
        return opcode >= 0 && opcode < 256 && NAMES[opcode] != null;
    }

    /** The {@code *_MASK} flags of {@code opcode}; 0 for an unknown opcode. */
    public static int flags(int opcode) {
        return opcode >= 0 && opcode < 256 ? FLAGS[opcode] : 0;
    }

    /** Whether {@code opcode} has every flag in {@code mask}. */
    public static boolean has(int opcode, int mask) {
        return (flags(opcode) & mask) == mask;
    }

    /** Bytes from the start of the BTH to the payload (BTH and extension headers); 0 for an unknown opcode. */
    public static int headerLength(int opcode) {
        return opcode >= 0 && opcode < 256 ? HEADER_LENGTH[opcode] : 0;
    }

    /** Offset of the RETH from the start of the BTH, or -1 when the opcode has none. */
    public static int rethOffset(int opcode) {
        return has(opcode, RETH_MASK) ? BTH_LENGTH : -1;
    }

    /** Offset of the AtomicETH from the start of the BTH, or -1 when the opcode has none. */
    public static int atomicEthOffset(int opcode) {
        return has(opcode, ATOMIC_ETH_MASK) ? BTH_LENGTH : -1;
    }

    /** Offset of the AETH from the start of the BTH, or -1 when the opcode has none. */
    public static int aethOffset(int opcode) {
        return has(opcode, AETH_MASK) ? BTH_LENGTH : -1;
    }

    /** Offset of the AtomicAckETH from the start of the BTH, or -1 when the opcode has none. */
    public static int atomicAckEthOffset(int opcode) {
        return has(opcode, ATOMIC_ACK_ETH_MASK) ? BTH_LENGTH + AETH_LENGTH : -1;
    }

    /** Offset of the immediate data from the start of the BTH, or -1 when the opcode has none. */
    public static int immediateOffset(int opcode) {
        if (!has(opcode, IMMDT_MASK)) {
            return -1;
        }
        return has(opcode, RETH_MASK) ? BTH_LENGTH + RETH_LENGTH : BTH_LENGTH;
    }

    /** Offset of the IETH from the start of the BTH, or -1 when the opcode has none. */
    public static int iethOffset(int opcode) {
        return has(opcode, IETH_MASK) ? BTH_LENGTH : -1;
    }

    /** The opcode's name as rxe spells it without its {@code IB_OPCODE_RC_} prefix, or {@code UNKNOWN_0xNN}. */
    public static String name(int opcode) {
        if (isKnown(opcode)) {
            return NAMES[opcode];
        }
        return String.format("UNKNOWN_0x%02X", opcode & 0xFF);
    }

    /** Pad bytes that bring {@code payloadLength} to a multiple of 4 (the BTH's PadCnt). */
    public static int padCount(int payloadLength) {
        return -payloadLength & 3;
    }

    /**
     * Bytes of the whole RoCE packet inside the UDP datagram: headers, payload, pad and the ICRC.
     *
     * @throws IllegalArgumentException for an unknown opcode, or payload on an opcode that carries none
     */
    public static int packetLength(int opcode, int payloadLength) {
        if (!isKnown(opcode)) {
            throw new IllegalArgumentException("unknown opcode " + name(opcode));
        }
        if (payloadLength < 0 || (payloadLength > 0 && !has(opcode, PAYLOAD_MASK))) {
            throw new IllegalArgumentException(name(opcode) + " cannot carry " + payloadLength + " payload bytes");
        }
        return HEADER_LENGTH[opcode] + payloadLength + padCount(payloadLength) + ICRC_LENGTH;
    }
}
