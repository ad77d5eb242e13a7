package io.jccl.services.embedding;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Arrays;

/**
 * A client's bounded cache of hot rows, evicting by CLOCK (second chance): a hit sets the entry's reference bit, the
 * hand clears bits until it finds an entry without one. Why CLOCK and not LRU: a hit only sets a bit (no list to
 * relink under the lock), and under a skewed lookup distribution it keeps the hot rows as LRU does. Rows are found
 * through an open-addressing index (linear probing, deletion by backward shift); every array is allocated at
 * construction, so lookups, inserts and invalidations allocate nothing. Thread-safe (one lock).
 */
final class RowCache {
    private final int capacity;
    private final int dim;
    private final float[] data;
    private final long[] rowOf;
    private final long[] versionOf;
    private final boolean[] referenced;
    private final long[] keys;
    private final int[] slots;
    private final int mask;
    private int hand;
    private int size;
    private long hits;
    private long misses;
    private long invalidations;

    RowCache(int capacity, int dim) {
        if ((long) capacity * dim > Integer.MAX_VALUE - 8) {
            throw new IllegalArgumentException("cache of " + capacity + " rows x " + dim + " floats is too large");
        }
        this.capacity = capacity;
        this.dim = dim;
        data = new float[capacity * dim];
        rowOf = new long[capacity];
        versionOf = new long[capacity];
        referenced = new boolean[capacity];
        Arrays.fill(rowOf, -1);
        int tableSize = Integer.highestOneBit(Math.max(4, capacity * 2 - 1)) << 1;
        keys = new long[tableSize];
        slots = new int[tableSize];
        Arrays.fill(keys, -1);
        mask = tableSize - 1;
    }

    int capacity() {
        return capacity;
    }

    /**
     * Copies a cached {@code row} into {@code dst} at {@code offset} (floats) and returns its version, or -1 on a
     * miss.
     */
    synchronized long get(long row, MemorySegment dst, long offset) {
        int s = find(row);
        if (s < 0) {
            misses++;
            return -1;
        }
        hits++;
        referenced[s] = true;
        MemorySegment.copy(data, s * dim, dst, ValueLayout.JAVA_FLOAT_UNALIGNED, offset, dim);
        return versionOf[s];
    }

    /** Caches {@code row} at {@code version} from {@code src} at {@code offset}, unless a newer copy is cached. */
    synchronized void put(long row, long version, MemorySegment src, long offset) {
        int s = find(row);
        if (s >= 0) {
            if (versionOf[s] >= version) {
                return;
            }
        } else {
            s = victim();
            if (rowOf[s] >= 0) {
                remove(rowOf[s]);
            } else {
                size++;
            }
            rowOf[s] = row;
            insert(row, s);
        }
        versionOf[s] = version;
        referenced[s] = false;
        MemorySegment.copy(src, ValueLayout.JAVA_FLOAT_UNALIGNED, offset, data, s * dim, dim);
    }

    /** Drops {@code row} when its cached version is older than {@code version}; returns whether it dropped it. */
    synchronized boolean invalidate(long row, long version) {
        int s = find(row);
        if (s < 0 || versionOf[s] >= version) {
            return false;
        }
        remove(row);
        rowOf[s] = -1;
        referenced[s] = false;
        size--;
        invalidations++;
        return true;
    }

    synchronized boolean contains(long row) {
        return find(row) >= 0;
    }

    synchronized int size() {
        return size;
    }

    synchronized long hits() {
        return hits;
    }

    synchronized long misses() {
        return misses;
    }

    synchronized long invalidations() {
        return invalidations;
    }

    synchronized void clear() {
        Arrays.fill(rowOf, -1);
        Arrays.fill(keys, -1);
        Arrays.fill(referenced, false);
        size = 0;
    }

    /** CLOCK: an empty entry, or the first one the hand finds without its reference bit (clearing bits on the way). */
    private int victim() {
        while (true) {
            int s = hand;
            hand = hand + 1 == capacity ? 0 : hand + 1;
            if (rowOf[s] < 0 || !referenced[s]) {
                return s;
            }
            referenced[s] = false;
        }
    }

    private static int hash(long row) {
        long h = row * 0x9E3779B97F4A7C15L;
        return (int) (h ^ (h >>> 32));
    }

    private int find(long row) {
        for (int i = hash(row) & mask; ; i = (i + 1) & mask) {
            long k = keys[i];
            if (k == row) {
                return slots[i];
            }
            if (k == -1) {
                return -1;
            }
        }
    }

    private void insert(long row, int slot) {
        int i = hash(row) & mask;
        while (keys[i] != -1) {
            i = (i + 1) & mask;
        }
        keys[i] = row;
        slots[i] = slot;
    }

    /** Removes {@code row} from the index, shifting later entries of its probe run back (no tombstones). */
    private void remove(long row) {
        int i = hash(row) & mask;
        while (keys[i] != row) {
            if (keys[i] == -1) {
                return;
            }
            i = (i + 1) & mask;
        }
        int hole = i;
        for (int j = (hole + 1) & mask; keys[j] != -1; j = (j + 1) & mask) {
            int home = hash(keys[j]) & mask;
            // Move j into the hole when its home is not in (hole, j] (cyclically).
            boolean between = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
            if (!between) {
                keys[hole] = keys[j];
                slots[hole] = slots[j];
                hole = j;
            }
        }
        keys[hole] = -1;
    }
}
