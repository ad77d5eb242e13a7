package io.jccl.collectives;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ProtectionDomain;

import java.lang.foreign.MemorySegment;

/**
 * Registered memory for sending from arbitrary native segments: memory from {@link Communicator#allocate} is used
 * as is; other native segments are registered once and cached (up to {@link #CAPACITY} per protection domain,
 * checked for liveness so a closed arena is registered again); lookups on a hit allocate nothing.
 */
final class RegistrationCache implements AutoCloseable {
    static final int CAPACITY = 32;
    private final ProtectionDomain pd;
    private final AccessFlag[] access;
    private final long[] address = new long[CAPACITY];
    private final long[] length = new long[CAPACITY];
    private final MemoryRegion[] regions = new MemoryRegion[CAPACITY];
    private final MemorySegment.Scope[] scopes = new MemorySegment.Scope[CAPACITY];
    private final java.util.List<MemoryRegion> owned;
    private int next;
    /** Offset of the last looked-up segment within the returned region. */
    long lastOffset;

    RegistrationCache(ProtectionDomain pd, java.util.List<MemoryRegion> owned) {
        this(pd, owned, AccessFlag.LOCAL_WRITE);
    }

    /** A cache registering with {@code access}; {@code owned} regions must grant at least that. */
    RegistrationCache(ProtectionDomain pd, java.util.List<MemoryRegion> owned, AccessFlag... access) {
        this.pd = pd;
        this.owned = owned;
        this.access = access.clone();
    }

    /** The region holding {@code seg} (sets {@link #lastOffset}). */
    MemoryRegion regionFor(MemorySegment seg) {
        long a = seg.address();
        long n = seg.byteSize();
        if (n == 0) {
            lastOffset = 0;
            return null;
        }
        synchronized (owned) {
            for (MemoryRegion r : owned) {
                if (r.protectionDomain() == pd && a >= r.address() && a + n <= r.address() + r.length()) {
                    lastOffset = a - r.address();
                    return r;
                }
            }
        }
        for (int i = 0; i < CAPACITY; i++) {
            MemoryRegion r = regions[i];
            if (r != null && a >= address[i] && a + n <= address[i] + length[i]) {
                if (r.isValid() && scopes[i].isAlive()) {
                    lastOffset = a - address[i];
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
        lastOffset = 0;
        return r;
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
