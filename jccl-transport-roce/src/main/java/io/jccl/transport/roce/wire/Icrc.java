package io.jccl.transport.roce.wire;

import java.nio.ByteBuffer;
import java.util.zip.CRC32;

/**
 * The RoCEv2 invariant CRC over IPv4, computed exactly as the kernel's {@code rxe_icrc.c}: CRC-32 (the reflected
 * 0x04C11DB7 polynomial of Ethernet and zlib) over
 * <ol>
 *   <li>8 bytes of 0xFF standing for the masked InfiniBand LRH (rxe starts from the CRC of these bytes,
 *       {@code 0xdebb20e3}),</li>
 *   <li>the IPv4 header (20 bytes) with TOS, TTL and header checksum set to all ones,</li>
 *   <li>the UDP header with its checksum set to all ones,</li>
 *   <li>the BTH with FECN, BECN and the six reserved bits of its byte 4 set to all ones,</li>
 *   <li>the rest of the transport headers, the payload and the pad, up to the ICRC itself.</li>
 * </ol>
 * Everything a router may change (TOS/ECN, TTL, checksum) or a switch may mark (FECN/BECN) is masked; the IPv4
 * identification and total length are not. The result is stored in the packet's last four bytes least significant
 * byte first: rxe writes the CPU-order CRC on a little-endian host, and NICs put the same bytes on the wire (the
 * ConnectX-4 capture in the tests).
 *
 * <p>One instance keeps a {@link CRC32} and a 48-byte scratch pseudo-header and is reused for every packet of one
 * thread: no allocation per packet. Not thread-safe.
 */
public final class Icrc {
    /** Length of the IPv4 header the ICRC covers (no options: rxe copies a fixed {@code struct iphdr}). */
    public static final int IPV4_HEADER_LENGTH = 20;
    /** Length of the UDP header. */
    public static final int UDP_HEADER_LENGTH = 8;
    /** IANA's RoCEv2 UDP destination port. */
    public static final int ROCE_V2_UDP_PORT = 4791;

    private static final int LRH_LENGTH = 8;
    private static final int IP = LRH_LENGTH;
    private static final int UDP = IP + IPV4_HEADER_LENGTH;
    private static final int BTH = UDP + UDP_HEADER_LENGTH;
    private static final int PSEUDO_LENGTH = BTH + BthFlyweight.LENGTH;
    private static final int IP_PROTOCOL_UDP = 17;

    private final CRC32 crc = new CRC32();
    private final byte[] pseudo = new byte[PSEUDO_LENGTH];
    /** {@link #delta}'s identifications below 2^6 (a GSO send has at most 64 segments): per-bit deltas. */
    private static final int CACHED_BITS = 6;
    private final int[] cachedBitDelta = new int[CACHED_BITS];
    private int cachedLength = -1;
    /** {@link #matchingIdentification}'s per-bit deltas. */
    private final int[] bitDelta = new int[16];

    /** Creates a calculator. */
    public Icrc() {
        for (int i = 0; i < LRH_LENGTH; i++) {
            pseudo[i] = (byte) 0xFF;
        }
    }

    /**
     * The ICRC of a RoCEv2 packet that travels (or travelled) in an IPv4/UDP datagram with these header fields.
     * The sender knows them without seeing the headers the kernel writes: version 4 with no options, protocol UDP,
     * total length and UDP length from {@code roceLength}.
     *
     * @param sourceAddress IPv4 source address (network order as an int: 10.0.0.1 is 0x0A000001)
     * @param destinationAddress IPv4 destination address
     * @param identification the IPv4 identification field (0 on Linux for an unconnected socket with DF set)
     * @param flagsAndFragmentOffset the IPv4 flags and fragment offset (0x4000: Don't Fragment)
     * @param udpSourcePort UDP source port
     * @param udpDestinationPort UDP destination port
     * @param packet buffer that holds the RoCE packet, BTH first
     * @param offset offset of the BTH in {@code packet}
     * @param roceLength length of the RoCE packet, BTH to ICRC inclusive (the UDP payload)
     * @return the CRC value, as {@link #put} stores it
     */
    public int computeIpv4(int sourceAddress, int destinationAddress, int identification, int flagsAndFragmentOffset,
                           int udpSourcePort, int udpDestinationPort, ByteBuffer packet, int offset, int roceLength) {
        checkRoceLength(packet, offset, roceLength);
        pseudoHeader(sourceAddress, destinationAddress, identification, flagsAndFragmentOffset, udpSourcePort,
            udpDestinationPort, roceLength);
        return finish(packet, offset, roceLength);
    }

    private void pseudoHeader(int sourceAddress, int destinationAddress, int identification,
                              int flagsAndFragmentOffset, int udpSourcePort, int udpDestinationPort, int roceLength) {
        int totalLength = IPV4_HEADER_LENGTH + UDP_HEADER_LENGTH + roceLength;
        byte[] p = pseudo;
        p[IP] = 0x45;
        p[IP + 1] = (byte) 0xFF; // TOS (DSCP and ECN) masked
        putShort(p, IP + 2, totalLength);
        putShort(p, IP + 4, identification);
        putShort(p, IP + 6, flagsAndFragmentOffset);
        p[IP + 8] = (byte) 0xFF; // TTL masked
        p[IP + 9] = IP_PROTOCOL_UDP;
        putShort(p, IP + 10, 0xFFFF); // header checksum masked
        putInt(p, IP + 12, sourceAddress);
        putInt(p, IP + 16, destinationAddress);
        putShort(p, UDP, udpSourcePort);
        putShort(p, UDP + 2, udpDestinationPort);
        putShort(p, UDP + 4, UDP_HEADER_LENGTH + roceLength);
        putShort(p, UDP + 6, 0xFFFF); // UDP checksum masked
    }

    /**
     * {@link #computeIpv4} of a packet whose payload lies elsewhere: bytes {@code payloadAt..payloadAt +
     * payloadLength} of the packet are read from {@code payload} at {@code payloadOffset} (a view of a registered
     * region, which the kernel gathers the payload from), the headers before and the pad after from
     * {@code packet}. {@code payload}'s position and limit are moved and put back (not thread-safe, as the rest).
     */
    public int computeIpv4(int sourceAddress, int destinationAddress, int identification, int flagsAndFragmentOffset,
                           int udpSourcePort, int udpDestinationPort, ByteBuffer packet, int offset, int roceLength,
                           int payloadAt, ByteBuffer payload, int payloadOffset, int payloadLength) {
        checkRoceLength(packet, offset, roceLength);
        if (payloadAt < BthFlyweight.LENGTH || payloadAt + payloadLength > roceLength - RoceOpcode.ICRC_LENGTH) {
            throw new IllegalArgumentException("payload " + payloadAt + "+" + payloadLength + " outside a packet of "
                + roceLength + " bytes");
        }
        BigEndian.checkBounds(payload, payloadOffset, payloadLength, "payload");
        pseudoHeader(sourceAddress, destinationAddress, identification, flagsAndFragmentOffset, udpSourcePort,
            udpDestinationPort, roceLength);
        CRC32 c = start(packet, offset);
        update(c, packet, offset + BthFlyweight.LENGTH, payloadAt - BthFlyweight.LENGTH);
        update(c, payload, payloadOffset, payloadLength);
        update(c, packet, offset + payloadAt + payloadLength,
            roceLength - RoceOpcode.ICRC_LENGTH - payloadAt - payloadLength);
        return (int) c.getValue();
    }

    /**
     * The ICRC of a captured IPv4 datagram: the IPv4 header at {@code ipOffset}, UDP and the RoCE packet after it.
     * The header fields the ICRC covers are read from the capture, so this checks what a peer really sent.
     *
     * @throws IllegalArgumentException when the datagram is not IPv4/UDP without options, or its lengths disagree
     *     with the buffer
     */
    public int computeIpv4Datagram(ByteBuffer datagram, int ipOffset) {
        BigEndian.checkBounds(datagram, ipOffset, IPV4_HEADER_LENGTH + UDP_HEADER_LENGTH, "IPv4/UDP header");
        int versionIhl = BigEndian.getUnsignedByte(datagram, ipOffset);
        if (versionIhl != 0x45) {
            throw new IllegalArgumentException(String.format("IPv4 version/IHL 0x%02x: only 0x45 (no options)",
                versionIhl));
        }
        if (BigEndian.getUnsignedByte(datagram, ipOffset + 9) != IP_PROTOCOL_UDP) {
            throw new IllegalArgumentException("IPv4 protocol " + BigEndian.getUnsignedByte(datagram, ipOffset + 9)
                + " is not UDP (17)");
        }
        byte[] p = pseudo;
        for (int i = 0; i < IPV4_HEADER_LENGTH + UDP_HEADER_LENGTH; i++) {
            p[IP + i] = datagram.get(ipOffset + i);
        }
        p[IP + 1] = (byte) 0xFF;
        p[IP + 8] = (byte) 0xFF;
        putShort(p, IP + 10, 0xFFFF);
        putShort(p, UDP + 6, 0xFFFF);
        int udpLength = BigEndian.getUnsignedShort(datagram, ipOffset + IPV4_HEADER_LENGTH + 4);
        int roceLength = udpLength - UDP_HEADER_LENGTH;
        return finish(datagram, ipOffset + IPV4_HEADER_LENGTH + UDP_HEADER_LENGTH, roceLength);
    }

    /**
     * What the ICRC of an IPv4 RoCE packet of {@code roceLength} bytes changes by (XOR) when its IPv4
     * identification is {@code identification} instead of 0, everything else equal. CRC-32 is affine over GF(2):
     * the CRCs of two messages of one length differ by the CRC, without its initial and final inversion, of their
     * XOR, which here is zero but for the two identification bytes; those bytes' register value is then carried over
     * the zero bytes after them (a multiplication by x^(8n) mod P, as zlib's {@code crc32_combine}). Why it matters:
     * Linux numbers the segments of one UDP GSO send base, base + 1, ... (base 0 for a socket with Don't Fragment
     * and no connected peer), so segment k's ICRC is the id-0 one XOR this delta for k. No allocation; about the cost
     * of two 32-step loops.
     *
     * @param identification the IPv4 identification, 0..65535
     * @param roceLength the RoCE packet's length, BTH to ICRC inclusive
     * @return the value to XOR into the id-0 ICRC ({@link #computeIpv4} with identification 0); 0 for id 0
     */
    public static int identificationDelta(int identification, int roceLength) {
        if (identification == 0) {
            return 0;
        }
        return multModP(zeroBytesFactor(roceLength), identificationBits(identification));
    }

    /**
     * {@link #identificationDelta} for this calculator's thread, from the deltas of the identification's six low
     * bits for the last length asked (recomputed when the length changes): a GSO send's packets share one length,
     * so each costs at most six XORs instead of a 32-step multiplication (which a profile of a 1 MiB WRITE stream
     * showed in 10% of the sender's samples).
     */
    public int delta(int identification, int roceLength) {
        if (identification == 0) {
            return 0;
        }
        if (identification >= 1 << CACHED_BITS) {
            return identificationDelta(identification, roceLength);
        }
        if (roceLength != cachedLength) {
            for (int b = 0; b < CACHED_BITS; b++) {
                cachedBitDelta[b] = identificationDelta(1 << b, roceLength);
            }
            cachedLength = roceLength;
        }
        int delta = 0;
        for (int b = 0; b < CACHED_BITS; b++) {
            if ((identification & (1 << b)) != 0) {
                delta ^= cachedBitDelta[b];
            }
        }
        return delta;
    }

    /** The CRC register (no inversion) after the two identification bytes, from 0: linear in the identification. */
    private static int identificationBits(int identification) {
        int lin = 0;
        for (int b = 0; b < 16 && (identification >>> b) != 0; b++) {
            if ((identification & (1 << b)) != 0) {
                lin ^= IDENTIFICATION_BIT[b];
            }
        }
        return lin;
    }

    /**
     * x^(8n) mod P for the zero bytes that follow the identification in the ICRC's input: the pseudo-header's 48
     * bytes less the 14 up to and including the identification, then the RoCE packet less its BTH and ICRC.
     */
    private static int zeroBytesFactor(int roceLength) {
        int zeroBytes = LRH_LENGTH + IPV4_HEADER_LENGTH + UDP_HEADER_LENGTH + roceLength - RoceOpcode.ICRC_LENGTH
            - (IP + 6);
        if (zeroBytes >= 0 && zeroBytes < ZERO_BYTES_FACTOR.length) {
            return ZERO_BYTES_FACTOR[zeroBytes];
        }
        return xPow8n(zeroBytes);
    }

    /** Reflected CRC-32 polynomial (0x04C11DB7 bit-reversed), as zlib's POLY. */
    private static final int POLY = 0xEDB88320;
    /** Register value after one identification bit's two bytes, from 0 (bit 0 = the low byte's lowest bit). */
    private static final int[] IDENTIFICATION_BIT = new int[16];
    /** x^(8n) mod P for n zero bytes up to a 4 KiB MTU packet's (computed once, 17 KB). */
    private static final int[] ZERO_BYTES_FACTOR = new int[4096 + 256 + 64];

    static {
        for (int b = 0; b < 16; b++) {
            int id = 1 << b;
            int c = 0;
            c = crcByte(c, id >>> 8); // network order: high byte first
            c = crcByte(c, id & 0xFF);
            IDENTIFICATION_BIT[b] = c;
        }
        int x8 = xPow8n(1);
        int f = 1 << 31; // x^0 in the reflected representation
        for (int n = 0; n < ZERO_BYTES_FACTOR.length; n++) {
            ZERO_BYTES_FACTOR[n] = f;
            f = multModP(f, x8);
        }
    }

    private static int crcByte(int c, int b) {
        c ^= b;
        for (int i = 0; i < 8; i++) {
            c = (c & 1) != 0 ? (c >>> 1) ^ POLY : c >>> 1;
        }
        return c;
    }

    /** a·b mod P, reflected (zlib's multmodp). */
    private static int multModP(int a, int b) {
        int m = 1 << 31;
        int p = 0;
        while (true) {
            if ((a & m) != 0) {
                p ^= b;
                if ((a & (m - 1)) == 0) {
                    break;
                }
            }
            m >>>= 1;
            if (m == 0) {
                break;
            }
            b = (b & 1) != 0 ? (b >>> 1) ^ POLY : b >>> 1;
        }
        return p;
    }

    /** x^(8n) mod P by square and multiply (zlib's x2nmodp(n, 3)). */
    private static int xPow8n(int n) {
        int p = 1 << 31;
        int square = 1 << 23; // x^8 in the reflected representation (x^0 is bit 31)
        while (n != 0) {
            if ((n & 1) != 0) {
                p = multModP(square, p);
            }
            n >>>= 1;
            square = multModP(square, square);
        }
        return p;
    }

    /**
     * The identification in {@code first..last} (inclusive) with which a packet whose identification-0 ICRC is
     * {@code icrcWithId0} carries {@code storedIcrc}, or -1 when none does (at most one can: the delta is an
     * injective linear function of the identification). The receiver's check where it cannot know the sender's
     * identification exactly (a segment of a GSO send that its own socket received alone). The deltas of the
     * identification's bits are computed once per call; each candidate then costs a few XORs. No allocation.
     */
    public int matchingIdentification(int icrcWithId0, int storedIcrc, int roceLength, int first, int last) {
        int difference = icrcWithId0 ^ storedIcrc;
        if (first <= 0 && difference == 0) {
            return 0;
        }
        int bits = 32 - Integer.numberOfLeadingZeros(Math.min(last, 0xFFFF));
        int factor = zeroBytesFactor(roceLength);
        for (int b = 0; b < bits; b++) {
            bitDelta[b] = multModP(factor, IDENTIFICATION_BIT[b]);
        }
        for (int id = Math.max(first, 1); id <= last && id <= 0xFFFF; id++) {
            int delta = 0;
            for (int b = 0; b < bits; b++) {
                if ((id & (1 << b)) != 0) {
                    delta ^= bitDelta[b];
                }
            }
            if (delta == difference) {
                return id;
            }
        }
        return -1;
    }

    /** Stores {@code icrc} in the last four bytes of the RoCE packet, least significant byte first. */
    public static void put(ByteBuffer packet, int offset, int roceLength, int icrc) {
        int at = offset + roceLength - RoceOpcode.ICRC_LENGTH;
        BigEndian.putInt(packet, at, Integer.reverseBytes(icrc));
    }

    /** The ICRC stored in the last four bytes of the RoCE packet. */
    public static int get(ByteBuffer packet, int offset, int roceLength) {
        int at = offset + roceLength - RoceOpcode.ICRC_LENGTH;
        return Integer.reverseBytes(BigEndian.getInt(packet, at));
    }

    private int finish(ByteBuffer packet, int offset, int roceLength) {
        checkRoceLength(packet, offset, roceLength);
        CRC32 c = start(packet, offset);
        update(c, packet, offset + BthFlyweight.LENGTH, roceLength - BthFlyweight.LENGTH - RoceOpcode.ICRC_LENGTH);
        return (int) c.getValue();
    }

    /** The CRC over the pseudo-header and the packet's masked BTH. */
    private CRC32 start(ByteBuffer packet, int offset) {
        byte[] p = pseudo;
        for (int i = 0; i < BthFlyweight.LENGTH; i++) {
            p[BTH + i] = packet.get(offset + i);
        }
        p[BTH + 4] = (byte) 0xFF; // FECN, BECN and reserved: a switch may set them on the way
        CRC32 c = crc;
        c.reset();
        c.update(p, 0, PSEUDO_LENGTH);
        return c;
    }

    private static void update(CRC32 c, ByteBuffer buffer, int at, int length) {
        if (length <= 0) {
            return;
        }
        if (buffer.hasArray()) {
            c.update(buffer.array(), buffer.arrayOffset() + at, length);
        } else {
            // update(ByteBuffer) reads position..limit: move them and put them back (duplicate() would allocate)
            int position = buffer.position();
            int limit = buffer.limit();
            buffer.limit(at + length).position(at);
            c.update(buffer);
            buffer.limit(limit).position(position);
        }
    }

    private static void checkRoceLength(ByteBuffer packet, int offset, int roceLength) {
        if (roceLength < BthFlyweight.LENGTH + RoceOpcode.ICRC_LENGTH) {
            throw new IllegalArgumentException("RoCE packet of " + roceLength + " bytes is shorter than BTH + ICRC");
        }
        BigEndian.checkBounds(packet, offset, roceLength, "RoCE packet");
    }

    private static void putShort(byte[] b, int i, int v) {
        b[i] = (byte) (v >>> 8);
        b[i + 1] = (byte) v;
    }

    private static void putInt(byte[] b, int i, int v) {
        b[i] = (byte) (v >>> 24);
        b[i + 1] = (byte) (v >>> 16);
        b[i + 2] = (byte) (v >>> 8);
        b[i + 3] = (byte) v;
    }
}
