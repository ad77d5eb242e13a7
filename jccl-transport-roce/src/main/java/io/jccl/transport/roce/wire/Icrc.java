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
        return finish(packet, offset, roceLength);
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
        byte[] p = pseudo;
        for (int i = 0; i < BthFlyweight.LENGTH; i++) {
            p[BTH + i] = packet.get(offset + i);
        }
        p[BTH + 4] = (byte) 0xFF; // FECN, BECN and reserved: a switch may set them on the way
        CRC32 c = crc;
        c.reset();
        c.update(p, 0, PSEUDO_LENGTH);
        int restOffset = offset + BthFlyweight.LENGTH;
        int restLength = roceLength - BthFlyweight.LENGTH - RoceOpcode.ICRC_LENGTH;
        if (packet.hasArray()) {
            c.update(packet.array(), packet.arrayOffset() + restOffset, restLength);
        } else {
            // update(ByteBuffer) reads position..limit: move them and put them back (duplicate() would allocate)
            int position = packet.position();
            int limit = packet.limit();
            packet.limit(restOffset + restLength).position(restOffset);
            c.update(packet);
            packet.limit(limit).position(position);
        }
        return (int) c.getValue();
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
