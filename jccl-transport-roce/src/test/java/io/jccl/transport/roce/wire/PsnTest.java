package io.jccl.transport.roce.wire;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** 24-bit PSN arithmetic across the wrap, as rxe's psn_compare. */
class PsnTest {
    @Test
    void shouldWrapAt24Bits() {
        assertEquals(0, Psn.next(0xFFFFFF));
        assertEquals(5, Psn.add(0xFFFFFE, 7));
        assertEquals(0xFFFFFF, Psn.add(0, -1));
        assertEquals(3, Psn.distance(0xFFFFFE, 1));
    }

    @Test
    void shouldCompareAcrossTheWrap() {
        assertTrue(Psn.compare(0xFFFFFF, 0) < 0, "0xFFFFFF is before 0");
        assertTrue(Psn.compare(0, 0xFFFFFF) > 0);
        assertTrue(Psn.compare(5, 5) == 0);
        assertTrue(Psn.compare(0x7FFFFF, 0) > 0, "half the space ahead is after");
        assertTrue(Psn.compare(0x800000, 0) < 0, "beyond half the space is before");
    }

    @Test
    void shouldRejectPsnsWiderThan24Bits() {
        assertThrows(IllegalArgumentException.class, () -> Psn.checked(0x1000000));
        assertThrows(IllegalArgumentException.class, () -> Psn.checked(-1));
    }
}
