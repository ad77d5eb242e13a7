package io.jccl.collectives.memory;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;

/**
 * Native buffers a communicator copies heap (Java array) arguments through, and what it hands out when it has no
 * device (one rank): a few numbered slots, each grown as needed and reused, so repeated calls allocate nothing.
 */
public final class BounceBuffers implements AutoCloseable {
    private final Arena arena = Arena.ofShared();
    private final MemorySegment[] slots = new MemorySegment[3];

    /** Slot {@code slot}'s buffer, at least {@code bytes} long (grown when smaller), as a slice of {@code bytes}. */
    public MemorySegment get(int slot, long bytes) {
        MemorySegment b = slots[slot];
        if (b == null || b.byteSize() < bytes) {
            b = arena.allocate(Math.max(bytes, 4096), 4096);
            slots[slot] = b;
        }
        return b.asSlice(0, bytes);
    }

    /** A native segment with the contents of {@code seg} (itself when native), for sending from. */
    public MemorySegment nativeOf(MemorySegment seg, long bytes, int slot, boolean copyIn) {
        if (seg.isNative()) {
            return seg;
        }
        MemorySegment b = get(slot, bytes);
        if (copyIn) {
            MemorySegment.copy(seg, 0, b, 0, bytes);
        }
        return b;
    }

    /** Page-aligned memory that lives until close (a one-rank communicator's {@code allocate}). */
    public MemorySegment allocate(long bytes) {
        return arena.allocate(bytes, 4096);
    }

    @Override
    public void close() {
        try {
            arena.close();
        } catch (RuntimeException ignored) {
            // in use by a failed async op
        }
    }
}
