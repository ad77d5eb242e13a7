package io.jccl.transport.roce.wire;

import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.HexFormat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;

/**
 * The ICRC against packets whose ICRC someone else computed: a CNP captured from a Mellanox ConnectX-4 Lx NIC and a
 * UC SEND from scapy's RoCE regression tests ({@code test/contrib/roce.uts}); then the masks: exactly the fields
 * rxe masks may change without changing the ICRC, and every other byte changes it.
 */
class IcrcTest {
    /** Ethernet frame of a CNP sent by a ConnectX-4 Lx (scapy's roce.uts, "RoCE CNP captured on ConnectX-4 Lx"). */
    static final String CONNECTX4_CNP_FRAME = "e41d2dab2bc27cfe90643b32080045c2003c718c400040119161"
        + "0a0011010a001201000012b700280000" + "8100ffff400001180000000000000000000000000000000000000000"
        + "82fd002a";
    /** IPv4 datagram of scapy's example UC SEND_ONLY (roce.uts "RoCE layer"), ICRC 78 f3 53 f3 on the wire. */
    static final String SCAPY_UC_SEND_DATAGRAM = "45010040047840004011b4d5c0a80007c0a80007c00012b7002caca2"
        + "2460ffff000000d300cf1710" + "4630818be28935d90e9a95505401be885e500000" + "78f353f3";

    private final Icrc icrc = new Icrc();

    private static ByteBuffer hex(String hex) {
        return ByteBuffer.wrap(HexFormat.of().parseHex(hex));
    }

    @Test
    void shouldMatchTheIcrcOfACnpCapturedFromAConnectX4() {
        ByteBuffer frame = hex(CONNECTX4_CNP_FRAME);
        int ip = 14;
        int roce = ip + 28;
        int roceLength = frame.capacity() - roce;
        assertEquals(0x2a00fd82, Icrc.get(frame, roce, roceLength), "stored least significant byte first");
        assertEquals(Icrc.get(frame, roce, roceLength), icrc.computeIpv4Datagram(frame, ip));
    }

    @Test
    void shouldMatchScapysIcrcOfAUcSend() {
        ByteBuffer datagram = hex(SCAPY_UC_SEND_DATAGRAM);
        assertEquals(Icrc.get(datagram, 28, datagram.capacity() - 28), icrc.computeIpv4Datagram(datagram, 0));
    }

    @Test
    void shouldBuildTheConnectX4CnpBitForBitFromItsFields() {
        ByteBuffer captured = hex(CONNECTX4_CNP_FRAME);
        int roceLength = RoceOpcode.packetLength(RoceOpcode.CNP, 0);
        ByteBuffer packet = ByteBuffer.allocateDirect(roceLength);
        new BthFlyweight().wrap(packet, 0).init(RoceOpcode.CNP, 0, BthFlyweight.DEFAULT_PKEY, 0x118, 0)
            .migrationRequest(false).becn(true);
        int value = icrc.computeIpv4(0x0A001101, 0x0A001201, 0x718c, 0x4000, 0, Icrc.ROCE_V2_UDP_PORT,
            packet, 0, roceLength);
        Icrc.put(packet, 0, roceLength, value);
        for (int i = 0; i < roceLength; i++) {
            assertEquals(captured.get(42 + i), packet.get(i), "byte " + i);
        }
    }

    @Test
    void shouldIgnoreTheMaskedFieldsOnly() {
        ByteBuffer original = hex(SCAPY_UC_SEND_DATAGRAM);
        int expected = icrc.computeIpv4Datagram(original, 0);
        int[] masked = {1, 8, 10, 11, 26, 27, 28 + 4}; // TOS, TTL, IP checksum, UDP checksum, BTH FECN/BECN/resv6
        int icrcStart = original.capacity() - 4;
        for (int i = 0; i < icrcStart; i++) {
            if (i == 0 || i == 9 || i == 24 || i == 25) {
                continue; // version/IHL, protocol and UDP length are checked, not hashed blindly
            }
            ByteBuffer changed = hex(SCAPY_UC_SEND_DATAGRAM);
            changed.put(i, (byte) ~changed.get(i));
            int value = icrc.computeIpv4Datagram(changed, 0);
            if (contains(masked, i)) {
                assertEquals(expected, value, "byte " + i + " is masked");
            } else {
                assertNotEquals(expected, value, "byte " + i + " is covered");
            }
        }
    }

    @Test
    void shouldGiveTheSameValueForHeapDirectAndLittleEndianBuffers() {
        ByteBuffer heap = hex(SCAPY_UC_SEND_DATAGRAM);
        ByteBuffer direct = ByteBuffer.allocateDirect(heap.capacity() + 8).order(ByteOrder.LITTLE_ENDIAN);
        direct.put(8, heap, 0, heap.capacity());
        direct.position(3).limit(direct.capacity() - 1);
        int expected = icrc.computeIpv4Datagram(heap, 0);
        assertEquals(expected, icrc.computeIpv4Datagram(direct, 8));
        assertEquals(3, direct.position(), "position restored");
        assertEquals(direct.capacity() - 1, direct.limit(), "limit restored");
        // from fields, as a sender computes it before the kernel writes the headers
        assertEquals(expected, icrc.computeIpv4(0xC0A80007, 0xC0A80007, 1144, 0x4000, 49152, 4791, heap, 28,
            heap.capacity() - 28));
    }

    @Test
    void shouldGiveTheIcrcOfAnyIdentificationFromTheIcrcWithIdZeroAndADelta() {
        java.util.Random random = new java.util.Random(20);
        int[] lengths = {RoceOpcode.packetLength(RoceOpcode.ACKNOWLEDGE, 0), 16 + 256, 28 + 1024 + 4, 12 + 4096 + 4,
            28 + 4096 + 4, 12 + 4096 + 4 + 200}; // the last beyond the precomputed table
        for (int roceLength : lengths) {
            ByteBuffer packet = ByteBuffer.allocateDirect(roceLength);
            for (int i = 0; i < roceLength; i++) {
                packet.put(i, (byte) random.nextInt());
            }
            int withZero = icrc.computeIpv4(0x7F000001, 0x7F000001, 0, 0x4000, 50000, 4791, packet, 0, roceLength);
            for (int id : new int[] {1, 2, 3, 14, 15, 63, 64, 127, 0x1234, 0xFFFF}) {
                int expected = icrc.computeIpv4(0x7F000001, 0x7F000001, id, 0x4000, 50000, 4791, packet, 0,
                    roceLength);
                assertEquals(expected, withZero ^ Icrc.identificationDelta(id, roceLength),
                    "id " + id + ", length " + roceLength);
                assertEquals(expected, withZero ^ icrc.delta(id, roceLength), "cached: id " + id);
                if (id < 64) {
                    assertEquals(id, icrc.matchingIdentification(withZero, expected, roceLength, 0, 63));
                    assertEquals(-1, icrc.matchingIdentification(withZero, expected, roceLength, 0, id - 1));
                }
            }
            assertEquals(0, Icrc.identificationDelta(0, roceLength));
            assertEquals(0, icrc.matchingIdentification(withZero, withZero, roceLength, 0, 63));
            assertEquals(-1, icrc.matchingIdentification(withZero, withZero ^ 1, roceLength, 0, 63),
                "a corrupted ICRC matches no identification");
        }
    }

    @Test
    void shouldComputeTheSameIcrcWithThePayloadElsewhere() {
        java.util.Random random = new java.util.Random(3);
        int payload = 1000;
        int headers = 28;
        int roceLength = headers + payload + 4;
        ByteBuffer whole = ByteBuffer.allocateDirect(roceLength);
        ByteBuffer region = ByteBuffer.allocateDirect(5000);
        for (int i = 0; i < 5000; i++) {
            region.put(i, (byte) random.nextInt());
        }
        for (int i = 0; i < roceLength; i++) {
            whole.put(i, i >= headers && i < headers + payload ? region.get(777 + i - headers) : (byte) i);
        }
        ByteBuffer headersOnly = ByteBuffer.allocateDirect(roceLength); // the payload bytes left as zeros
        for (int i = 0; i < roceLength; i++) {
            if (i < headers || i >= headers + payload) {
                headersOnly.put(i, whole.get(i));
            }
        }
        int expected = icrc.computeIpv4(0x7F000001, 0x7F000002, 3, 0x4000, 50000, 4791, whole, 0, roceLength);
        assertEquals(expected, icrc.computeIpv4(0x7F000001, 0x7F000002, 3, 0x4000, 50000, 4791, headersOnly, 0,
            roceLength, headers, region, 777, payload));
        assertEquals(0, region.position());
        assertEquals(5000, region.limit());
    }

    @Test
    void shouldRejectDatagramsItCannotHash() {
        ByteBuffer options = hex(SCAPY_UC_SEND_DATAGRAM);
        options.put(0, (byte) 0x46);
        org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class,
            () -> icrc.computeIpv4Datagram(options, 0));
        ByteBuffer tcp = hex(SCAPY_UC_SEND_DATAGRAM);
        tcp.put(9, (byte) 6);
        org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class,
            () -> icrc.computeIpv4Datagram(tcp, 0));
        ByteBuffer longer = hex(SCAPY_UC_SEND_DATAGRAM);
        longer.putShort(24, (short) 400); // UDP length beyond the buffer
        org.junit.jupiter.api.Assertions.assertThrows(IndexOutOfBoundsException.class,
            () -> icrc.computeIpv4Datagram(longer, 0));
        ByteBuffer shorter = hex(SCAPY_UC_SEND_DATAGRAM);
        shorter.putShort(24, (short) 10); // shorter than BTH + ICRC
        org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class,
            () -> icrc.computeIpv4Datagram(shorter, 0));
    }

    private static boolean contains(int[] values, int v) {
        for (int x : values) {
            if (x == v) {
                return true;
            }
        }
        return false;
    }
}
