package io.jccl.collectives.memory;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ProtectionDomain;

import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;

/**
 * The memory a communicator handed out with {@code Communicator.allocate}: registered, remote-readable and
 * remote-writable regions, numbered in allocation order. Sending from such memory needs no registration (the
 * message path's registration caches look here first), and on the direct path peers map it and read it where it
 * is. Thread-safe: the application allocates from any thread while operations run.
 */
public final class Allocations implements AutoCloseable {
    private final List<MemoryRegion> regions = new ArrayList<>();

    /** Allocates {@code bytes} in {@code pd} and returns the region; its id is its position in allocation order. */
    public MemoryRegion allocate(ProtectionDomain pd, long bytes) {
        MemoryRegion r = pd.allocateMemory(bytes, AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_READ,
            AccessFlag.REMOTE_WRITE);
        synchronized (regions) {
            regions.add(r);
        }
        return r;
    }

    /** The id of {@code region} (its position in allocation order), or -1. */
    public int idOf(MemoryRegion region) {
        synchronized (regions) {
            return regions.indexOf(region);
        }
    }

    /**
     * Where {@code seg} lies in allocated memory: fills {@code where} with the allocation's id and the segment's
     * offset in it and returns true, or returns false (heap, empty, or memory from elsewhere) and leaves it alone.
     */
    public boolean locate(MemorySegment seg, Slice where) {
        if (!seg.isNative() || seg.byteSize() == 0) {
            return false;
        }
        long a = seg.address();
        synchronized (regions) {
            for (int i = 0; i < regions.size(); i++) {
                MemoryRegion r = regions.get(i);
                if (r.isValid() && a >= r.address() && a + seg.byteSize() <= r.address() + r.length()) {
                    where.id = i;
                    where.offset = a - r.address();
                    return true;
                }
            }
        }
        return false;
    }

    /** The allocated region of {@code pd} that holds all of {@code seg} (a native, non-empty segment), or null. */
    public MemoryRegion holding(ProtectionDomain pd, MemorySegment seg) {
        long a = seg.address();
        long n = seg.byteSize();
        synchronized (regions) {
            for (MemoryRegion r : regions) {
                if (r.protectionDomain() == pd && a >= r.address() && a + n <= r.address() + r.length()) {
                    return r;
                }
            }
        }
        return null;
    }

    /** Frees every allocation. */
    @Override
    public void close() {
        synchronized (regions) {
            for (MemoryRegion r : regions) {
                try {
                    r.close();
                } catch (RuntimeException ignored) {
                    // closing
                }
            }
            regions.clear();
        }
    }

    /**
     * A place in allocated memory, filled by {@link #locate}: the allocation's id and an offset in it. Reused by its
     * owner (one per caller), so that locating memory on every operation allocates nothing.
     */
    public static final class Slice {
        private int id = -1;
        private long offset;

        /** The allocation's id ({@code -1} before the first successful {@link #locate}). */
        public int id() {
            return id;
        }

        /** The offset in the allocation. */
        public long offset() {
            return offset;
        }
    }
}
