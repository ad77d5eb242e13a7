package io.jccl.transport.tcp;

/**
 * The TCP provider's wire format (see docs/transport-tcp.md). Every frame after the handshake starts with a fixed
 * 48-byte big-endian header; SEND, WRITE and READ_RESPONSE frames are followed by exactly {@code length} payload
 * bytes. A fixed header keeps parsing branch-free and lets the reader know, from 48 bytes, exactly how many bytes
 * belong to the frame, so a rejected request's payload can be skipped without interpreting it.
 *
 * <pre>
 *  0 u8  type         4 u32 psn (24 bits)   12 u32 rkey    24 u64 operand 1 (compare/add, atomic result)
 *  1 u8  flags        8 u32 length          16 u64 va      32 u64 operand 2 (swap)
 *  2 u8  syndrome (NAK class)                               40 u32 immediate data
 *  3 u8  RNR timer code (RNR NAK)                           44 u32 ACK word: 0, or on a request a piggybacked ACK
 * </pre>
 *
 * <p>The handshake is one 64-byte HELLO from the connecting side and one 64-byte ACCEPT back:
 * magic "JCCL", version, kind, destination and source QP numbers, the destination's 128-bit secret (proof that
 * the connector was given the endpoint record), the source's secret and the sender's max_dest_rd_atomic.
 *
 * <p>This class holds the constants only; {@link FrameHeaderFlyweight} and {@link HelloFlyweight} are the only code
 * that reads or writes fields at these offsets.
 */
final class Wire {
    static final int HEADER = 48;
    static final int HELLO = 64;
    static final int MAGIC = 0x4A43434C; // "JCCL"
    /** 2: the word at 44 carries a piggybacked ACK on requests (1: reserved, always 0). */
    static final int VERSION = 2;
    static final int KIND_HELLO = 1;
    static final int KIND_ACCEPT = 2;

    // requests
    static final int SEND = 0x01;
    static final int SEND_IMM = 0x02;
    static final int WRITE = 0x03;
    static final int WRITE_IMM = 0x04;
    static final int READ_REQUEST = 0x05;
    static final int COMPARE_SWAP = 0x06;
    static final int FETCH_ADD = 0x07;
    // responses
    static final int ACK = 0x11;
    static final int NAK = 0x12;
    static final int READ_RESPONSE = 0x13;
    static final int ATOMIC_RESPONSE = 0x14;

    // NAK classes (syndrome byte)
    static final int NAK_RNR = 1;
    static final int NAK_INVALID_REQUEST = 2;
    static final int NAK_REMOTE_ACCESS = 3;
    static final int NAK_REMOTE_OPERATION = 4;

    // flags
    static final int FLAG_SOLICITED = 1;
    static final int FLAG_FENCE = 2;

    static final int PSN_MASK = 0xFFFFFF;
    static final int PSN_HALF = 0x800000;

    // header offsets
    static final int OFF_TYPE = 0;
    static final int OFF_FLAGS = 1;
    static final int OFF_SYNDROME = 2;
    static final int OFF_TIMER = 3;
    static final int OFF_PSN = 4;
    static final int OFF_LENGTH = 8;
    static final int OFF_RKEY = 12;
    static final int OFF_VA = 16;
    static final int OFF_OPERAND1 = 24;
    static final int OFF_OPERAND2 = 32;
    static final int OFF_IMM = 40;
    static final int OFF_RESERVED = 44;
    /**
     * The same word: on a request, {@link #ACK_PRESENT} plus a 24-bit PSN acknowledges the peer's requests up to
     * that PSN, exactly as an ACK frame sent just before this request would; 0 otherwise. Responses carry 0.
     */
    static final int OFF_ACK = OFF_RESERVED;
    static final int ACK_PRESENT = 0x80000000;

    // HELLO/ACCEPT offsets
    static final int HELLO_OFF_MAGIC = 0;
    static final int HELLO_OFF_VERSION = 4;
    static final int HELLO_OFF_KIND = 5;
    /** u16 0. */
    static final int HELLO_OFF_ZERO = 6;
    static final int HELLO_OFF_DEST_QPN = 8;
    static final int HELLO_OFF_SOURCE_QPN = 12;
    /** 128 bits: high word, then low word. */
    static final int HELLO_OFF_DEST_SECRET = 16;
    static final int HELLO_OFF_SOURCE_SECRET = 32;
    static final int HELLO_OFF_MAX_DEST_RD_ATOMIC = 48;
    /** 12 bytes 0 up to {@link #HELLO}. */
    static final int HELLO_OFF_PADDING = 52;

    private Wire() {
    }

    static boolean isRequest(int type) {
        return type >= SEND && type <= FETCH_ADD;
    }

    static boolean isResponse(int type) {
        return type >= ACK && type <= ATOMIC_RESPONSE;
    }

    /** Whether a request of this type is followed by payload bytes. */
    static boolean requestCarriesPayload(int type) {
        return type == SEND || type == SEND_IMM || type == WRITE || type == WRITE_IMM;
    }

    static String typeName(int type) {
        return switch (type) {
            case SEND -> "SEND";
            case SEND_IMM -> "SEND_IMM";
            case WRITE -> "WRITE";
            case WRITE_IMM -> "WRITE_IMM";
            case READ_REQUEST -> "READ_REQUEST";
            case COMPARE_SWAP -> "COMPARE_SWAP";
            case FETCH_ADD -> "FETCH_ADD";
            case ACK -> "ACK";
            case NAK -> "NAK";
            case READ_RESPONSE -> "READ_RESPONSE";
            case ATOMIC_RESPONSE -> "ATOMIC_RESPONSE";
            default -> "0x" + Integer.toHexString(type);
        };
    }
}
