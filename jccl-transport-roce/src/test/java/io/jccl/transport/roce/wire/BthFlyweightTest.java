package io.jccl.transport.roce.wire;

import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.HexFormat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The BTH: fields read from captured packets, each field written without touching its neighbours, bounds. */
class BthFlyweightTest {
    @Test
    void shouldReadTheBthOfCapturedPackets() {
        ByteBuffer cnp = ByteBuffer.wrap(HexFormat.of().parseHex(IcrcTest.CONNECTX4_CNP_FRAME));
        BthFlyweight bth = new BthFlyweight().wrap(cnp, 42);
        assertEquals(RoceOpcode.CNP, bth.opcode());
        assertTrue(bth.becn());
        assertFalse(bth.fecn());
        assertFalse(bth.solicitedEvent());
        assertFalse(bth.migrationRequest());
        assertEquals(0, bth.padCount());
        assertEquals(0, bth.transportVersion());
        assertEquals(0xFFFF, bth.pKey());
        assertEquals(0x118, bth.destQp());
        assertFalse(bth.ackRequest());
        assertEquals(0, bth.psn());

        ByteBuffer send = ByteBuffer.wrap(HexFormat.of().parseHex(IcrcTest.SCAPY_UC_SEND_DATAGRAM));
        bth.wrap(send, 28);
        assertEquals(0x24, bth.opcode(), "UC SEND_ONLY");
        assertTrue(bth.migrationRequest());
        assertEquals(2, bth.padCount());
        assertEquals(211, bth.destQp());
        assertEquals(13571856, bth.psn());
    }

    @Test
    void shouldWriteEachFieldWithoutTouchingTheOthers() {
        for (ByteOrder order : new ByteOrder[] {ByteOrder.BIG_ENDIAN, ByteOrder.LITTLE_ENDIAN}) {
            ByteBuffer b = ByteBuffer.allocate(BthFlyweight.LENGTH + 4).order(order);
            BthFlyweight bth = new BthFlyweight().wrap(b, 2);
            bth.init(RoceOpcode.RDMA_WRITE_FIRST, 3, 0x8001, 0xABCDEF, 0xFFFFFF);
            assertEquals("0000" + "0670" + "8001" + "00abcdef" + "00ffffff" + "0000",
                HexFormat.of().formatHex(b.array()),
                "M set, pad 3, " + order);
            bth.solicitedEvent(true).fecn(true).becn(true).ackRequest(true);
            assertEquals("0000" + "06f0" + "8001" + "c0abcdef" + "80ffffff" + "0000",
                HexFormat.of().formatHex(b.array()),
                order.toString());
            assertTrue(bth.solicitedEvent());
            assertEquals(0xF0, b.get(3) & 0xFF, "SE|M|pad 3");
            assertEquals(0xC0, b.get(6) & 0xFF, "FECN|BECN");
            assertEquals(0x80, b.get(10) & 0xFF, "AckReq");
            bth.psn(0);
            assertEquals(0, bth.psn());
            assertTrue(bth.ackRequest(), "PSN write keeps AckReq");
            bth.destQp(1);
            assertTrue(bth.fecn() && bth.becn(), "QPN write keeps FECN/BECN");
            bth.padCount(1);
            assertTrue(bth.solicitedEvent() && bth.migrationRequest());
            assertEquals(1, bth.padCount());
            bth.becn(false);
            assertTrue(bth.fecn());
            assertFalse(bth.becn());
            assertEquals(0, b.get(0) | b.get(1) | b.get(14) | b.get(15), "neighbours untouched");
        }
    }

    @Test
    void shouldRejectFieldsThatDoNotFit() {
        BthFlyweight bth = new BthFlyweight().wrap(ByteBuffer.allocate(12), 0);
        assertThrows(IllegalArgumentException.class, () -> bth.psn(1 << 24));
        assertThrows(IllegalArgumentException.class, () -> bth.destQp(1 << 24));
        assertThrows(IllegalArgumentException.class, () -> bth.padCount(4));
        assertThrows(IndexOutOfBoundsException.class, () -> bth.wrap(ByteBuffer.allocate(11), 0));
        assertThrows(IndexOutOfBoundsException.class, () -> bth.wrap(ByteBuffer.allocate(20), 9));
        assertThrows(IndexOutOfBoundsException.class, () -> bth.wrap(ByteBuffer.allocate(20), -1));
    }
}
