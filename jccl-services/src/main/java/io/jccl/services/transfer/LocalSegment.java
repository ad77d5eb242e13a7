package io.jccl.services.transfer;

import io.jccl.verbs.MemoryRegion;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;

/**
 * Memory of this process registered with the transfer engine under a name (Mooncake's
 * {@code registerLocalMemory}, NIXL's {@code registerMem}): the local side of transfers and, through its name, a
 * target peers open with {@link TransferEngine#openSegment}. Registered on every device the engine uses (one
 * memory region per device). {@link #close()} unregisters it: its keys are refused from then on (peers' transfers
 * to it fail with a remote access error) and its name leaves the store.
 */
public final class LocalSegment implements AutoCloseable {
    final TransferEngine engine;
    private final String name;
    private final MemorySegment memory;
    /** One region per device of the engine, indexed like {@link TransferEngine}'s device list. */
    final MemoryRegion[] regions;
    /** The arena of memory the engine allocated without a device (a job of one rank), else null. */
    final Arena arena;
    private volatile boolean closed;

    LocalSegment(TransferEngine engine, String name, MemorySegment memory, MemoryRegion[] regions, Arena arena) {
        this.engine = engine;
        this.arena = arena;
        this.name = name;
        this.memory = memory;
        this.regions = regions;
    }

    /** The name peers open it by. */
    public String name() {
        return name;
    }

    /** The registered memory. */
    public MemorySegment memory() {
        return memory;
    }

    /** Length in bytes. */
    public long length() {
        return memory.byteSize();
    }

    /** Whether it is still registered. */
    public boolean isRegistered() {
        return !closed;
    }

    /** Unregisters (revokes) the segment: idempotent. Memory the engine allocated is released. */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        engine.unregister(this);
    }

    @Override
    public String toString() {
        return "segment '" + name + "' (" + length() + " B, local)";
    }
}
