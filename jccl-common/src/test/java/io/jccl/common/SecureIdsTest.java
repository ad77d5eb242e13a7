package io.jccl.common;

import org.junit.jupiter.api.Test;

import java.util.HashSet;
import java.util.Set;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

class SecureIdsTest {
    @Test
    void shouldGiveValuesInTheirRanges() {
        for (int i = 0; i < 10_000; i++) {
            assertNotEquals(0, SecureIds.key());
            int qpn = SecureIds.queuePairNumber();
            assertTrue(qpn > 1 && qpn <= 0xFFFFFF, "qpn " + qpn);
            int psn = SecureIds.packetSequenceNumber();
            assertTrue(psn >= 0 && psn <= 0xFFFFFF, "psn " + psn);
        }
    }

    @Test
    void shouldNotRepeatAcrossPoolRefills() {
        Set<Long> seen = new HashSet<>();
        for (int i = 0; i < 5_000; i++) {
            assertTrue(seen.add(SecureIds.nonce()), "repeated nonce after " + i);
        }
        assertEquals(5_000, seen.size());
    }

    @Test
    void shouldSpreadBitsEvenly() {
        // 64 000 random bits: each bit position of the keys is set about half the time (5 sigma bounds).
        int[] ones = new int[32];
        int n = 2_000;
        for (int i = 0; i < n; i++) {
            int k = SecureIds.key();
            for (int b = 0; b < 32; b++) {
                ones[b] += (k >>> b) & 1;
            }
        }
        for (int b = 0; b < 32; b++) {
            assertTrue(Math.abs(ones[b] - n / 2) < 5 * Math.sqrt(n / 4.0), "bit " + b + " set " + ones[b] + "/" + n);
        }
        assertEquals(100, SecureIds.bytes(100).length);
    }
}
