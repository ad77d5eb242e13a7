package io.jccl.transport.shm;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;

/**
 * A queue pair's mappings of its peer's region files, by file id: a region is mapped on the first request that
 * names it with a valid key and kept for the next ones (lookups are an open-addressing probe, no allocation).
 * {@link #sweep} drops mappings whose key-table entry was revoked, so a peer that allocates and frees regions does
 * not pin their memory through us.
 */
final class PeerRegionCache {
    private final long ownerPid;
    private final long ownerId;
    private long[] ids = new long[16];
    private MemorySegment[] maps = new MemorySegment[16];
    private Arena[] arenas = new Arena[16];
    private int[] slots = new int[16];
    private int[] rkeys = new int[16];
    private int size;

    PeerRegionCache(long ownerPid, long ownerId) {
        this.ownerPid = ownerPid;
        this.ownerId = ownerId;
    }

    private static int home(long id, int mask) {
        long h = id * 0x9E3779B97F4A7C15L;
        return (int) (h ^ (h >>> 32)) & mask;
    }

    /** The mapping of region file {@code fileId}, mapping it now if needed; null when the file is gone. */
    MemorySegment map(long fileId, long minSize, int keySlot, int rkey) {
        int mask = ids.length - 1;
        for (int i = home(fileId, mask); ; i = (i + 1) & mask) {
            long id = ids[i];
            if (id == fileId && fileId != 0) {
                return maps[i];
            }
            if (id == 0) {
                break;
            }
        }
        if (fileId == 0) {
            return null;
        }
        Path path = ShmFiles.DIRECTORY.resolve(ShmFiles.name(ownerPid, ownerId, fileId, ShmFiles.REGION));
        Arena arena = Arena.ofShared();
        MemorySegment mapping;
        try {
            mapping = ShmFiles.mapExisting(path, minSize, arena);
        } catch (IOException | RuntimeException e) {
            arena.close();
            return null;
        }
        if ((size + 1) * 2 > ids.length) {
            grow(ids.length * 2);
        }
        insert(fileId, mapping, arena, keySlot, rkey);
        return mapping;
    }

    private void insert(long fileId, MemorySegment mapping, Arena arena, int keySlot, int rkey) {
        int mask = ids.length - 1;
        int i = home(fileId, mask);
        while (ids[i] != 0) {
            i = (i + 1) & mask;
        }
        ids[i] = fileId;
        maps[i] = mapping;
        arenas[i] = arena;
        slots[i] = keySlot;
        rkeys[i] = rkey;
        size++;
    }

    private void grow(int capacity) {
        long[] oldIds = ids;
        MemorySegment[] oldMaps = maps;
        Arena[] oldArenas = arenas;
        int[] oldSlots = slots;
        int[] oldRkeys = rkeys;
        ids = new long[capacity];
        maps = new MemorySegment[capacity];
        arenas = new Arena[capacity];
        slots = new int[capacity];
        rkeys = new int[capacity];
        size = 0;
        for (int i = 0; i < oldIds.length; i++) {
            if (oldIds[i] != 0) {
                insert(oldIds[i], oldMaps[i], oldArenas[i], oldSlots[i], oldRkeys[i]);
            }
        }
    }

    /** Unmaps regions the owner revoked; returns how many. */
    int sweep(ShmKeyTable keys, ShmKeyTable.Entry scratch) {
        int removed = 0;
        for (int i = 0; i < ids.length; i++) {
            if (ids[i] != 0 && !keys.isValid(slots[i], rkeys[i], scratch)) {
                closeQuietly(arenas[i]);
                ids[i] = 0;
                maps[i] = null;
                arenas[i] = null;
                removed++;
            }
        }
        if (removed > 0) {
            int live = size - removed;
            grow(ids.length);
            size = live;
        }
        return removed;
    }

    /** How many regions are mapped. */
    int size() {
        return size;
    }

    void close() {
        for (int i = 0; i < ids.length; i++) {
            if (arenas[i] != null) {
                closeQuietly(arenas[i]);
            }
            ids[i] = 0;
            maps[i] = null;
            arenas[i] = null;
        }
        size = 0;
    }

    private static void closeQuietly(Arena arena) {
        try {
            arena.close();
        } catch (IllegalStateException ignored) {
            // a view handed out by mapRemote is in use by another thread right now; the mapping stays until GC
        }
    }
}
