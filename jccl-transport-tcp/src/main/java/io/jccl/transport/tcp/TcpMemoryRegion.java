package io.jccl.transport.tcp;

import io.jccl.verbs.spi.AbstractProtectionDomain;
import io.jccl.verbs.spi.SoftMemoryRegion;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.concurrent.locks.LockSupport;

/** A region of a tcp context; owns its arena when the provider allocated the memory. */
final class TcpMemoryRegion extends SoftMemoryRegion {
    private final Arena arena;

    TcpMemoryRegion(AbstractProtectionDomain domain, MemorySegment segment, int lkey, int rkey, int access,
                    Arena arena) {
        super(domain, segment, lkey, rkey, access);
        this.arena = arena;
    }

    @Override
    protected void release() {
        if (arena == null) {
            return;
        }
        // A progress thread may be inside a socket read or write on this memory right now (the region was
        // deregistered while a transfer was in flight). NIO holds the arena for the duration of the call, so
        // closing fails; retry briefly rather than free memory under a running copy.
        for (int attempt = 0; ; attempt++) {
            try {
                arena.close();
                return;
            } catch (IllegalStateException busy) {
                if (attempt >= 2000) {
                    return; // leak rather than crash
                }
                LockSupport.parkNanos(500_000);
            }
        }
    }
}
