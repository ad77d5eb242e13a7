package io.jccl.transport.shm;

import io.jccl.common.SecureIds;
import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.VerbsException;
import io.jccl.verbs.spi.AbstractProtectionDomain;
import io.jccl.verbs.spi.AbstractQueuePair;
import io.jccl.verbs.spi.SoftMemoryRegion;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;

/** A protection domain of the shm provider: allocates region files and creates {@link ShmQueuePair}s. */
public final class ShmProtectionDomain extends AbstractProtectionDomain {
    private static final long PAGE = 4096;
    private final ShmContext context;
    private final long id = ShmFiles.newFileId();

    ShmProtectionDomain(ShmContext context) {
        super(context);
        this.context = context;
    }

    /** Random id written into key-table entries and QP files: peers match them for the PD check. */
    long id() {
        return id;
    }

    @Override
    protected SoftMemoryRegion allocate(long length, int access, int regionCount) {
        long fileId = ShmFiles.newFileId();
        Path path = ShmFiles.DIRECTORY.resolve(ShmFiles.name(fileId, ShmFiles.REGION));
        long fileSize = (length + PAGE - 1) & -PAGE;
        Arena arena = Arena.ofShared();
        MemorySegment mapping;
        try {
            mapping = ShmFiles.createAndMap(path, fileSize, arena);
        } catch (RuntimeException e) {
            arena.close();
            throw e;
        }
        ShmMemoryRegion region = new ShmMemoryRegion(this, context, mapping.asSlice(0, length), SecureIds.key(),
            SecureIds.key(), access, ShmKeyTable.KIND_FILE, fileId, 0, path, arena);
        try {
            region.publish();
        } catch (RuntimeException e) {
            region.release();
            throw e;
        }
        return region;
    }

    @Override
    protected SoftMemoryRegion wrap(MemorySegment segment, int access) {
        if ((access & (AccessFlag.REMOTE_READ.bit() | AccessFlag.REMOTE_WRITE.bit() | AccessFlag.REMOTE_ATOMIC.bit()))
            != 0 && CrossMemoryAttach.unavailable() != null) {
            throw new VerbsException(VerbsException.Reason.UNSUPPORTED, "shm: remote access to registered "
                + "(non-file) memory needs process_vm_readv/writev, which is not available here ("
                + CrossMemoryAttach.unavailable() + "); use ProtectionDomain.allocateMemory instead");
        }
        if ((access & AccessFlag.REMOTE_ATOMIC.bit()) != 0 && (segment.address() & 7) != 0) {
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT, "shm: REMOTE_ATOMIC memory must be "
                + "8-byte aligned (segment at 0x" + Long.toHexString(segment.address()) + ")");
        }
        ShmMemoryRegion region = new ShmMemoryRegion(this, context, segment, SecureIds.key(), SecureIds.key(),
            access, ShmKeyTable.KIND_PRIVATE, 0, 0, null, null);
        region.publish();
        return region;
    }

    @Override
    protected void withdrawn(SoftMemoryRegion region) {
        ((ShmMemoryRegion) region).revoke();
    }

    @Override
    protected AbstractQueuePair newQueuePair(QueuePairInitAttributes attributes) {
        return new ShmQueuePair(this, context, attributes);
    }
}
