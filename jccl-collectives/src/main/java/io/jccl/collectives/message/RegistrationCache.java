package io.jccl.collectives.message;

import io.jccl.collectives.memory.Allocations;
import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ProtectionDomain;

import java.lang.foreign.MemorySegment;

/**
 * Registered memory for sending from (or, remote-writable, receiving into) arbitrary native segments: memory from
 * {@code Communicator.allocate} is used as is; other native segments are registered once and cached (up to
 * {@link #CAPACITY} per protection domain, checked for liveness so a closed arena is registered again); lookups on
 * a hit allocate nothing. The returned region holds the whole segment, so the segment's offset in it is
 * {@code seg.address() - region.address()}.
 */
public final class RegistrationCache implements AutoCloseable {
    /** Registrations kept per cache (round-robin replacement). */
    public static final int CAPACITY = 32;
    private final ProtectionDomain pd;
    private final AccessFlag[] access;
    private final long[] address = new long[CAPACITY];
    private final long[] length = new long[CAPACITY];
    private final MemoryRegion[] regions = new MemoryRegion[CAPACITY];
    private final MemorySegment.Scope[] scopes = new MemorySegment.Scope[CAPACITY];
    private final Allocations owned;
    private int next;

    /** A cache registering with {@code access}; {@code owned} regions are used as they are (they grant it). */
    public RegistrationCache(ProtectionDomain pd, Allocations owned, AccessFlag... access) {
        this.pd = pd;
        this.owned = owned;
        this.access = access.clone();
    }

    /** The region holding all of {@code seg} (native), registering it if needed; null for an empty segment. */
    public MemoryRegion regionFor(MemorySegment seg) {
        long a = seg.address();
        long n = seg.byteSize();
        if (n == 0) {
            return null;
        }
        MemoryRegion mine = owned == null ? null : owned.holding(pd, seg);
        if (mine != null) {
            return mine;
        }
        for (int i = 0; i < CAPACITY; i++) {
            MemoryRegion r = regions[i];
            if (r != null && a >= address[i] && a + n <= address[i] + length[i]) {
                if (r.isValid() && scopes[i].isAlive()) {
                    return r;
                }
                r.close();
                regions[i] = null;
            }
        }
        int i = next;
        next = (next + 1) % CAPACITY;
        if (regions[i] != null) {
            regions[i].close();
        }
        // Register a global view of the same memory: providers may read it from their own threads, which a
        // confined segment forbids (WrongThreadException). Liveness is still checked against the caller's scope.
        MemorySegment view = MemorySegment.ofAddress(a).reinterpret(n);
        MemoryRegion r = pd.registerMemory(view, access);
        regions[i] = r;
        scopes[i] = seg.scope();
        address[i] = a;
        length[i] = n;
        return r;
    }

    /** The offset of {@code seg} in {@code region} as {@link #regionFor} returned it (0 for none). */
    public static long offsetIn(MemoryRegion region, MemorySegment seg) {
        return region == null ? 0 : seg.address() - region.address();
    }

    @Override
    public void close() {
        for (int i = 0; i < CAPACITY; i++) {
            if (regions[i] != null) {
                regions[i].close();
                regions[i] = null;
            }
        }
    }
}
