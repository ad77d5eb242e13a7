package io.jccl.transport.roce;

import io.jccl.verbs.spi.AbstractProtectionDomain;
import io.jccl.verbs.spi.SoftMemoryRegion;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;

/** A region of a roce context; owns its arena when the provider allocated the memory. */
final class RoceMemoryRegion extends SoftMemoryRegion {
    private final Arena arena;

    RoceMemoryRegion(AbstractProtectionDomain domain, MemorySegment segment, int lkey, int rkey, int access,
                     Arena arena) {
        super(domain, segment, lkey, rkey, access);
        this.arena = arena;
    }

    @Override
    protected void release() {
        if (arena != null) {
            // The receive thread copies into regions under the QP lock only, and deregistration invalidates the
            // region first, so no copy can be running into this memory now.
            arena.close();
        }
    }
}
