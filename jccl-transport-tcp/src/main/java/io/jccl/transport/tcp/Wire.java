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
 * <p>A list of READs posted together travels as one READ_LIST frame (a header, then one 16-byte entry per READ:
 * {@code u32 rkey, u32 length, u64 va}; the READs take consecutive PSNs from the header's); consecutive READ
 * responses leave as one READ_RESPONSE_LIST frame (a header, then the READs' payloads back to back, each of the
 * length its request asked for). Both are framing only: each READ keeps its own PSN, checks, response ring entry and
 * completion (docs/transport-tcp.md, "READ lists").
 *
 * <p>Besides requests and responses, the engines exchange PING and PONG (link liveness, {@link TcpLiveness}): bare
 * headers whose only non-zero field is a probe sequence number in the PSN field.
 *
 * <p>The handshake (version 3) is three 96-byte messages, a mutual challenge-response keyed by the pair key K that
 * only the two QPs can compute (from both endpoint records' secrets, which never travel): HELLO from the connecting
 * side (its nonce), CHALLENGE back (the acceptor's nonce and a MAC proving it knows K), PROOF (the connector's MAC
 * over both nonces). Layout and MACs: {@link HelloFlyweight}; the exchange: {@link TcpConnection}.
 *
 * <p>This class holds the constants only; {@link FrameHeaderFlyweight} and {@link HelloFlyweight} are the only code
 * that reads or writes fields at these offsets.
 */
final class Wire {
    static final int HEADER = 48;
    /** Every handshake message: 64 bytes of fields, then a 32-byte HMAC-SHA256. */
    static final int HANDSHAKE = 96;
    static final int MAGIC = 0x4A43434C; // "JCCL"
    /**
     * 4: READ_LIST and READ_RESPONSE_LIST frames. 3: the challenge-response handshake (2: secrets in a HELLO/ACCEPT; both: the word at 44 carries a piggybacked
     * ACK on requests).
     */
    static final int VERSION = 4;
    static final int KIND_HELLO = 1;
    static final int KIND_CHALLENGE = 2;
    static final int KIND_PROOF = 3;

    // requests
    static final int SEND = 0x01;
    static final int SEND_IMM = 0x02;
    static final int WRITE = 0x03;
    static final int WRITE_IMM = 0x04;
    static final int READ_REQUEST = 0x05;
    static final int COMPARE_SWAP = 0x06;
    static final int FETCH_ADD = 0x07;
    /**
     * READs with consecutive PSNs in one frame: the header's PSN is the first READ's, its immediate field the
     * count (2..{@link #LIST_MAX}), its length {@code count × LIST_ENTRY}; the entries follow as its payload.
     */
    static final int READ_LIST = 0x08;
    // responses
    static final int ACK = 0x11;
    static final int NAK = 0x12;
    static final int READ_RESPONSE = 0x13;
    static final int ATOMIC_RESPONSE = 0x14;
    /**
     * Responses to consecutive READs in one frame: the header's PSN is the first READ's, its immediate field the
     * count (2..{@link #LIST_MAX}), its length the sum of the READs' lengths; the payloads follow in order.
     */
    static final int READ_RESPONSE_LIST = 0x15;
    // link liveness (control frames of the providers' engines, neither requests nor responses: no PSN of the QP)
    /**
     * A liveness probe ({@link TcpLiveness}): sent by a side that has received nothing for a quarter of its
     * hung-peer limit, or that is reading a long frame of the peer while sending nothing. The PSN field carries the
     * probe's own 24-bit sequence number (1, 2, ... per connection); every other field is 0 and no payload follows.
     */
    static final int PING = 0x21;
    /**
     * The answer to PINGs, sent by the peer's engine without the application: the PSN field echoes the sequence
     * number of the last PING received, which answers it and every PING before it; every other field is 0.
     */
    static final int PONG = 0x22;

    // NAK classes (syndrome byte)
    static final int NAK_RNR = 1;
    static final int NAK_INVALID_REQUEST = 2;
    static final int NAK_REMOTE_ACCESS = 3;
    static final int NAK_REMOTE_OPERATION = 4;

    // flags
    static final int FLAG_SOLICITED = 1;
    static final int FLAG_FENCE = 2;

    /** Most READs one READ_LIST or READ_RESPONSE_LIST frame carries (above any max_rd_atomic verbs allows). */
    static final int LIST_MAX = 256;
    /** Bytes of one READ_LIST entry: u32 rkey, u32 length, u64 va. */
    static final int LIST_ENTRY = 16;
    static final int LIST_OFF_RKEY = 0;
    static final int LIST_OFF_LENGTH = 4;
    static final int LIST_OFF_VA = 8;

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

    // handshake message offsets (HELLO, CHALLENGE, PROOF)
    static final int HS_OFF_MAGIC = 0;
    static final int HS_OFF_VERSION = 4;
    static final int HS_OFF_KIND = 5;
    /** u16 0. */
    static final int HS_OFF_ZERO = 6;
    static final int HS_OFF_DEST_QPN = 8;
    static final int HS_OFF_SOURCE_QPN = 12;
    /** 128 bits, high word first: HELLO the connector's nonce, CHALLENGE the acceptor's, PROOF 0. */
    static final int HS_OFF_NONCE = 16;
    /** HELLO and CHALLENGE: the sender's max_dest_rd_atomic (0..65535); PROOF 0. */
    static final int HS_OFF_MAX_DEST_RD_ATOMIC = 32;
    /** 28 bytes 0. */
    static final int HS_OFF_RESERVED = 36;
    /** The bytes the MAC covers (with the nonces of the exchange, see {@link HelloFlyweight}). */
    static final int HS_SIGNED = 64;
    /** 32 bytes: HMAC-SHA256 under the pair key. */
    static final int HS_OFF_MAC = 64;
    /** Largest max_dest_rd_atomic a handshake may carry. */
    static final int HS_MAX_DEST_RD_ATOMIC = 0xFFFF;

    private Wire() {
    }

    static boolean isRequest(int type) {
        return type >= SEND && type <= READ_LIST;
    }

    static boolean isResponse(int type) {
        return type >= ACK && type <= READ_RESPONSE_LIST;
    }

    /** PING or PONG: link liveness, handled by the engines, never seen by the requester or responder. */
    static boolean isControl(int type) {
        return type == PING || type == PONG;
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
            case READ_LIST -> "READ_LIST";
            case ACK -> "ACK";
            case NAK -> "NAK";
            case READ_RESPONSE -> "READ_RESPONSE";
            case ATOMIC_RESPONSE -> "ATOMIC_RESPONSE";
            case READ_RESPONSE_LIST -> "READ_RESPONSE_LIST";
            case PING -> "PING";
            case PONG -> "PONG";
            default -> "0x" + Integer.toHexString(type);
        };
    }
}
