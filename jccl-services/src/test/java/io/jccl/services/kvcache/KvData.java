package io.jccl.services.kvcache;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.zip.CRC32;

/** Synthetic KV data: block {@code i} of request {@code id} filled from a seed; CRC32 checks. */
public final class KvData {
    private KvData() {
    }

    /** Fills {@code block} with the pattern of request {@code id}'s block {@code i}. */
    public static void fill(MemorySegment block, long id, int i) {
        long x = (id * 1_000_003L + i) * 0x9E3779B97F4A7C15L + 1;
        long n = block.byteSize();
        long o = 0;
        for (; o + 8 <= n; o += 8) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
            block.set(ValueLayout.JAVA_LONG_UNALIGNED, o, x);
        }
        for (; o < n; o++) {
            block.set(ValueLayout.JAVA_BYTE, o, (byte) (x + o));
        }
    }

    /** CRC32 of {@code block}. */
    public static long crc(MemorySegment block) {
        CRC32 crc = new CRC32();
        crc.update(block.asByteBuffer());
        return crc.getValue();
    }

    /** CRC32 of the pattern of request {@code id}'s block {@code i} ({@code bytes} long). */
    public static long expectedCrc(long id, int i, int bytes) {
        try (java.lang.foreign.Arena a = java.lang.foreign.Arena.ofConfined()) {
            MemorySegment m = a.allocate(bytes);
            fill(m, id, i);
            return crc(m);
        }
    }

    /** Whether every block of {@code r} holds request {@code r.requestId()}'s pattern. */
    public static boolean verify(KvRequest r, int blockBytes) {
        for (int i = 0; i < r.blockCount(); i++) {
            if (crc(r.block(i)) != expectedCrc(r.requestId(), i, blockBytes)) {
                return false;
            }
        }
        return true;
    }
}
