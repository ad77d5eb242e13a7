package io.jccl.transport.roce;

import io.jccl.common.SecureIds;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.spi.AbstractProtectionDomain;
import io.jccl.verbs.spi.AbstractQueuePair;
import io.jccl.verbs.spi.SoftMemoryRegion;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;

/** A roce protection domain: regions are plain off-heap memory that this process's responder writes into. */
final class RoceProtectionDomain extends AbstractProtectionDomain {
    private final RoceContext roce;

    RoceProtectionDomain(RoceContext context) {
        super(context);
        this.roce = context;
    }

    @Override
    protected SoftMemoryRegion allocate(long length, int access, int regionCount) {
        Arena arena = Arena.ofShared();
        MemorySegment segment = arena.allocate(length, 4096);
        return new RoceMemoryRegion(this, segment, SecureIds.key(), SecureIds.key(), access, arena);
    }

    @Override
    protected SoftMemoryRegion wrap(MemorySegment segment, int access) {
        return new RoceMemoryRegion(this, segment, SecureIds.key(), SecureIds.key(), access, null);
    }

    @Override
    protected AbstractQueuePair newQueuePair(QueuePairInitAttributes attributes) {
        return new RoceQueuePair(this, roce, attributes);
    }
}
