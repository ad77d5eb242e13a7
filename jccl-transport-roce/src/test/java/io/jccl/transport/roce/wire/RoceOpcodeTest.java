package io.jccl.transport.roce.wire;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The opcode table against rxe_opcode.c: header lengths (its {@code length} column), extension-header offsets
 * (its {@code offset} arrays) and the flags the protocol engine will branch on.
 */
class RoceOpcodeTest {
    @Test
    void shouldHaveRxesHeaderLengths() {
        int[][] expected = {
            {0x00, 12}, {0x01, 12}, {0x02, 12}, {0x03, 16}, {0x04, 12}, {0x05, 16},
            {0x06, 28}, {0x07, 12}, {0x08, 12}, {0x09, 16}, {0x0A, 28}, {0x0B, 32},
            {0x0C, 28}, {0x0D, 16}, {0x0E, 12}, {0x0F, 16}, {0x10, 16}, {0x11, 16}, {0x12, 24},
            {0x13, 40}, {0x14, 40}, {0x16, 16}, {0x17, 16}, {0x81, 28},
        };
        for (int[] e : expected) {
            assertTrue(RoceOpcode.isKnown(e[0]), RoceOpcode.name(e[0]));
            assertEquals(e[1], RoceOpcode.headerLength(e[0]), RoceOpcode.name(e[0]));
        }
        int known = 0;
        for (int op = 0; op < 256; op++) {
            known += RoceOpcode.isKnown(op) ? 1 : 0;
        }
        assertEquals(expected.length, known, "no opcode beyond the table is known");
    }

    @Test
    void shouldPlaceExtensionHeadersInSpecificationOrder() {
        assertEquals(28, RoceOpcode.immediateOffset(RoceOpcode.RDMA_WRITE_ONLY_WITH_IMMEDIATE), "after the RETH");
        assertEquals(12, RoceOpcode.immediateOffset(RoceOpcode.SEND_LAST_WITH_IMMEDIATE));
        assertEquals(12, RoceOpcode.rethOffset(RoceOpcode.RDMA_READ_REQUEST));
        assertEquals(12, RoceOpcode.aethOffset(RoceOpcode.ATOMIC_ACKNOWLEDGE));
        assertEquals(16, RoceOpcode.atomicAckEthOffset(RoceOpcode.ATOMIC_ACKNOWLEDGE));
        assertEquals(12, RoceOpcode.atomicEthOffset(RoceOpcode.FETCH_ADD));
        assertEquals(12, RoceOpcode.iethOffset(RoceOpcode.SEND_ONLY_WITH_INVALIDATE));
        assertEquals(-1, RoceOpcode.aethOffset(RoceOpcode.RDMA_READ_RESPONSE_MIDDLE), "middle responses have none");
        assertEquals(-1, RoceOpcode.rethOffset(RoceOpcode.RDMA_WRITE_MIDDLE));
        assertEquals(-1, RoceOpcode.immediateOffset(RoceOpcode.SEND_ONLY));
    }

    @Test
    void shouldFlagWhatTheResponderNeeds() {
        assertTrue(RoceOpcode.has(RoceOpcode.SEND_FIRST, RoceOpcode.RECEIVE_WR_MASK | RoceOpcode.START_MASK));
        assertTrue(RoceOpcode.has(RoceOpcode.RDMA_WRITE_LAST_WITH_IMMEDIATE,
            RoceOpcode.RECEIVE_WR_MASK | RoceOpcode.COMPLETION_MASK | RoceOpcode.END_MASK));
        assertFalse(RoceOpcode.has(RoceOpcode.RDMA_WRITE_LAST, RoceOpcode.RECEIVE_WR_MASK),
            "a plain WRITE consumes no receive");
        assertTrue(RoceOpcode.has(RoceOpcode.ACKNOWLEDGE, RoceOpcode.ACK_MASK));
        assertFalse(RoceOpcode.has(RoceOpcode.ACKNOWLEDGE, RoceOpcode.REQUEST_MASK));
        assertTrue(RoceOpcode.has(RoceOpcode.COMPARE_SWAP, RoceOpcode.ATOMIC_MASK | RoceOpcode.REQUEST_MASK));
        assertTrue(RoceOpcode.has(RoceOpcode.CNP, RoceOpcode.CNP_MASK));
        assertEquals(0, RoceOpcode.flags(0x15), "0x15 is reserved");
        assertEquals(0, RoceOpcode.flags(-1));
        assertEquals(0, RoceOpcode.flags(256));
        assertEquals("UNKNOWN_0x24", RoceOpcode.name(0x24), "UC is not implemented");
        assertEquals("RDMA_READ_RESPONSE_FIRST", RoceOpcode.name(0x0D));
    }

    @Test
    void shouldSizePacketsWithPadAndIcrc() {
        assertEquals(12 + 4, RoceOpcode.packetLength(RoceOpcode.SEND_ONLY, 0));
        assertEquals(12 + 5 + 3 + 4, RoceOpcode.packetLength(RoceOpcode.SEND_ONLY, 5));
        assertEquals(28 + 4096 + 4, RoceOpcode.packetLength(RoceOpcode.RDMA_WRITE_FIRST, 4096));
        assertEquals(3, RoceOpcode.padCount(1));
        assertEquals(0, RoceOpcode.padCount(4));
        assertThrows(IllegalArgumentException.class, () -> RoceOpcode.packetLength(RoceOpcode.ACKNOWLEDGE, 1));
        assertThrows(IllegalArgumentException.class, () -> RoceOpcode.packetLength(0x15, 0));
        assertThrows(IllegalArgumentException.class, () -> RoceOpcode.packetLength(RoceOpcode.SEND_ONLY, -1));
    }
}
