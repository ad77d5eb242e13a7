package io.jccl.transport.roce.wire;

import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.HexFormat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

/** RETH, AETH, AtomicETH, AtomicAckETH and ImmDt: byte layout in network order, whatever the buffer's order. */
class ExtensionHeadersTest {
    private static String hex(ByteBuffer b) {
        return HexFormat.of().formatHex(b.array());
    }

    @Test
    void shouldLayOutTheReth() {
        ByteBuffer b = ByteBuffer.allocate(RethFlyweight.LENGTH).order(ByteOrder.LITTLE_ENDIAN);
        RethFlyweight reth = new RethFlyweight().wrap(b, 0)
            .virtualAddress(0x0102030405060708L).rKey(0x0A0B0C0D).dmaLength(0xFFFFFFFFL);
        assertEquals("0102030405060708" + "0a0b0c0d" + "ffffffff", hex(b));
        assertEquals(0x0102030405060708L, reth.virtualAddress());
        assertEquals(0x0A0B0C0D, reth.rKey());
        assertEquals(0xFFFFFFFFL, reth.dmaLength());
        assertThrows(IllegalArgumentException.class, () -> reth.dmaLength(1L << 32));
    }

    @Test
    void shouldEncodeAcksRnrNaksAndNaks() {
        ByteBuffer b = ByteBuffer.allocate(AethFlyweight.LENGTH);
        AethFlyweight aeth = new AethFlyweight().wrap(b, 0);
        aeth.ack(0x123456);
        assertEquals("1f123456", hex(b));
        assertEquals(AethFlyweight.TYPE_ACK, aeth.type());
        assertEquals(AethFlyweight.CREDITS_UNLIMITED, aeth.value());
        assertEquals(0x123456, aeth.msn());
        aeth.rnrNak(14, 0x1000000); // MSN wraps
        assertEquals("2e000000", hex(b));
        assertEquals(AethFlyweight.TYPE_RNR_NAK, aeth.type());
        assertEquals(14, aeth.value());
        aeth.nak(AethFlyweight.NAK_PSN_SEQUENCE_ERROR, 7);
        assertEquals("60000007", hex(b));
        aeth.nak(AethFlyweight.NAK_REMOTE_ACCESS_ERROR, 7);
        assertEquals(0x62, aeth.syndrome(), "rxe's AETH_NAK_REM_ACC_ERR");
        aeth.nak(AethFlyweight.NAK_REMOTE_OPERATIONAL_ERROR, 7);
        assertEquals(0x63, aeth.syndrome(), "rxe's AETH_NAK_REM_OP_ERR");
        aeth.nak(AethFlyweight.NAK_INVALID_REQUEST, 7);
        assertEquals(0x61, aeth.syndrome(), "rxe's AETH_NAK_INVALID_REQ");
        assertEquals(AethFlyweight.TYPE_NAK, aeth.type());
        assertThrows(IllegalArgumentException.class, () -> aeth.rnrNak(32, 0));
        assertThrows(IllegalArgumentException.class, () -> aeth.nak(5, 0));
    }

    @Test
    void shouldLayOutTheAtomicHeaders() {
        ByteBuffer b = ByteBuffer.allocate(AtomicEthFlyweight.LENGTH + AtomicAckEthFlyweight.LENGTH);
        AtomicEthFlyweight atomic = new AtomicEthFlyweight().wrap(b, 0)
            .virtualAddress(0x1000).rKey(0x2233).swapOrAdd(-1L).compare(0x0102030405060708L);
        new AtomicAckEthFlyweight().wrap(b, AtomicEthFlyweight.LENGTH).originalData(0x1122334455667788L);
        assertEquals("0000000000001000" + "00002233" + "ffffffffffffffff" + "0102030405060708"
            + "1122334455667788", hex(b));
        assertEquals(-1L, atomic.swapOrAdd());
        assertEquals(0x0102030405060708L, atomic.compare());
        assertEquals(0x1122334455667788L,
            new AtomicAckEthFlyweight().wrap(b, AtomicEthFlyweight.LENGTH).originalData());
        assertThrows(IndexOutOfBoundsException.class, () -> atomic.wrap(b, 9));
    }

    @Test
    void shouldWriteImmediateDataInNetworkOrder() {
        ByteBuffer b = ByteBuffer.allocate(4).order(ByteOrder.LITTLE_ENDIAN);
        ImmDtFlyweight imm = new ImmDtFlyweight().wrap(b, 0).immediate(0xCAFEBABE);
        assertEquals("cafebabe", hex(b));
        assertEquals(0xCAFEBABE, imm.immediate());
    }
}
