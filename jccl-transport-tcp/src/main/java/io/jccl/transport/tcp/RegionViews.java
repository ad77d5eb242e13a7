package io.jccl.transport.tcp;

import io.jccl.verbs.spi.SoftMemoryRegion;

import java.nio.ByteBuffer;

/**
 * ByteBuffer views over registered regions, cached so that socket reads and writes go straight between the
 * kernel and the region without allocating a view per transfer. ByteBuffers index with ints, so a region is
 * viewed through windows of at most 1 GiB. One instance per direction per connection (views carry a position).
 */
final class RegionViews {
    private static final int WINDOW_SHIFT = 30;
    private static final int SLOTS = 4;

    private final SoftMemoryRegion[] regions = new SoftMemoryRegion[SLOTS];
    private final long[] windows = new long[SLOTS];
    private final ByteBuffer[] buffers = new ByteBuffer[SLOTS];
    private int victim;

    /**
     * A view of {@code region} positioned at {@code offset} whose remaining bytes are
     * {@code min(length, bytes to the end of the window)}.
     */
    ByteBuffer view(SoftMemoryRegion region, long offset, long length) {
        long window = offset >>> WINDOW_SHIFT;
        ByteBuffer buffer = null;
        for (int i = 0; i < SLOTS; i++) {
            if (regions[i] == region && windows[i] == window) {
                buffer = buffers[i];
                break;
            }
        }
        if (buffer == null) {
            long base = window << WINDOW_SHIFT;
            long size = Math.min(1L << WINDOW_SHIFT, region.length() - base);
            buffer = region.segment().asSlice(base, size).asByteBuffer();
            int i = victim;
            victim = (victim + 1) % SLOTS;
            regions[i] = region;
            windows[i] = window;
            buffers[i] = buffer;
        }
        int start = (int) (offset - (window << WINDOW_SHIFT));
        int end = (int) Math.min(buffer.capacity(), start + length);
        buffer.limit(buffer.capacity());
        buffer.position(start);
        buffer.limit(end);
        return buffer;
    }

    /** Drops every cached view (after a reset, so dead regions are not kept reachable). */
    void clear() {
        for (int i = 0; i < SLOTS; i++) {
            regions[i] = null;
            buffers[i] = null;
        }
    }
}
