package io.jccl.transport.shm;

import io.jccl.verbs.spi.AbstractProtectionDomain;
import io.jccl.verbs.spi.SoftMemoryRegion;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;

/**
 * A memory region of the shm provider: either a file under /dev/shm mapped shared ({@link ShmKeyTable#KIND_FILE},
 * from {@code allocateMemory}: peers map the same file, so WRITE/READ are single copies and atomics are real
 * cross-process atomics) or caller memory ({@link ShmKeyTable#KIND_PRIVATE}, from {@code registerMemory}: peers
 * reach it through cross-memory attach). Its key-table entry is published at creation and revoked at release.
 */
public final class ShmMemoryRegion extends SoftMemoryRegion {
    private final ShmContext context;
    private final int kind;
    private final long fileId;
    private final long fileOffset;
    private final Path path;
    private final Arena arena;
    private volatile int keySlot = -1;

    ShmMemoryRegion(AbstractProtectionDomain domain, ShmContext context, MemorySegment segment, int lkey, int rkey,
                    int access, int kind, long fileId, long fileOffset, Path path, Arena arena) {
        super(domain, segment, lkey, rkey, access);
        this.context = context;
        this.kind = kind;
        this.fileId = fileId;
        this.fileOffset = fileOffset;
        this.path = path;
        this.arena = arena;
    }

    /** {@link ShmKeyTable#KIND_FILE} or {@link ShmKeyTable#KIND_PRIVATE}. */
    public int kind() {
        return kind;
    }

    /** Random id of the backing file (0 for private memory). */
    public long fileId() {
        return fileId;
    }

    /** Offset of the first byte within the backing file. */
    public long fileOffset() {
        return fileOffset;
    }

    /** The backing file, or null for private memory. */
    public Path path() {
        return path;
    }

    /** The key-table slot (peers validate receive descriptors against it). */
    int keySlot() {
        return keySlot;
    }

    void publish() {
        keySlot = context.keyTable().publish(rkey(), access(), kind, address(), length(), fileId, fileOffset,
            ((ShmProtectionDomain) domain()).id());
    }

    void revoke() {
        int slot = keySlot;
        if (slot >= 0) {
            context.keyTable().revoke(slot, rkey());
        }
    }

    @Override
    protected void release() {
        revoke();
        if (arena != null) {
            // Why unlink now: peers that mapped the file keep their pages until they unmap; nobody can open it anew.
            ShmFiles.delete(path);
            arena.close();
        }
    }
}
