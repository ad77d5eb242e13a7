package io.jccl.services.checkpoint;

import org.junit.jupiter.api.Test;

import java.util.Random;
import java.util.zip.CRC32C;

import static org.junit.jupiter.api.Assertions.assertEquals;

/** {@link Crc32c#combine} against {@link CRC32C} over the whole, for split points from 0 to the end. */
class Crc32cTest {
    @Test
    void shouldCombineThePartsCrcsIntoTheWholesCrc() {
        byte[] data = new byte[5000];
        new Random(7).nextBytes(data);
        int whole = crc(data, 0, data.length);
        for (int split : new int[] {0, 1, 7, 8, 9, 1000, 4095, 4096, 4999, 5000}) {
            int a = crc(data, 0, split);
            int b = crc(data, split, data.length - split);
            assertEquals(whole, Crc32c.combine(a, b, data.length - split), "split at " + split);
        }
    }

    private static int crc(byte[] data, int offset, int length) {
        CRC32C crc = new CRC32C();
        crc.update(data, offset, length);
        return (int) crc.getValue();
    }
}
