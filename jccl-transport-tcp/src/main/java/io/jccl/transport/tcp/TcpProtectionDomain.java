package io.jccl.transport.tcp;

import io.jccl.common.SecureIds;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.spi.AbstractProtectionDomain;
import io.jccl.verbs.spi.AbstractQueuePair;
import io.jccl.verbs.spi.SoftMemoryRegion;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;

/** A tcp protection domain: regions are plain off-heap memory; the peer reaches them only through this process. */
final class TcpProtectionDomain extends AbstractProtectionDomain {
    private final TcpContext tcp;

    TcpProtectionDomain(TcpContext context) {
        super(context);
        this.tcp = context;
    }

    @Override
    protected SoftMemoryRegion allocate(long length, int access, int regionCount) {
        Arena arena = Arena.ofShared();
        MemorySegment segment = arena.allocate(length, 4096);
        return new TcpMemoryRegion(this, segment, keyPair(), SecureIds.key(), access, arena);
    }

    @Override
    protected SoftMemoryRegion wrap(MemorySegment segment, int access) {
        return new TcpMemoryRegion(this, segment, keyPair(), SecureIds.key(), access, null);
    }

    private static int keyPair() {
        return SecureIds.key();
    }

    @Override
    protected AbstractQueuePair newQueuePair(QueuePairInitAttributes attributes) {
        return new TcpQueuePair(this, tcp, attributes);
    }
}
