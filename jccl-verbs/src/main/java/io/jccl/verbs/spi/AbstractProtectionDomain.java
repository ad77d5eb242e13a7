package io.jccl.verbs.spi;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.VerbsException;

import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;

/** A protection domain of a software provider: it owns regions and queue pairs and refuses to close under them. */
public abstract class AbstractProtectionDomain implements ProtectionDomain {
    private final AbstractContext context;
    private final List<SoftMemoryRegion> regions = new ArrayList<>();
    private final List<AbstractQueuePair> queuePairs = new ArrayList<>();
    private boolean closed;

    /** A domain of {@code context}. */
    protected AbstractProtectionDomain(AbstractContext context) {
        this.context = context;
    }

    @Override
    public AbstractContext context() {
        return context;
    }

    @Override
    public final MemoryRegion allocateMemory(long length, AccessFlag... access) {
        int mask = AccessFlag.toMask(access);
        checkRegion(length, mask);
        return register(allocate(length, mask, context.localKeys().size()), mask);
    }

    @Override
    public final MemoryRegion registerMemory(MemorySegment segment, AccessFlag... access) {
        if (segment == null) {
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT, "segment is null");
        }
        if (!segment.isNative()) {
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT, "cannot register heap memory (a "
                + "segment over a Java array): the garbage collector moves it, so no peer could address it. "
                + "Use ProtectionDomain.allocateMemory(length, ...) or an off-heap segment from an Arena "
                + "(Arena.ofShared().allocate(length, 4096)) instead.");
        }
        if (segment.isReadOnly()) {
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT, "cannot register a read-only segment");
        }
        int mask = AccessFlag.toMask(access);
        checkRegion(segment.byteSize(), mask);
        // Provider threads (tcp's progress threads, shm's peers) touch registered memory too, so a segment of a
        // confined arena would throw WrongThreadException there. Register a view of the same bytes that any thread
        // may use, and let the caller's scope keep deciding whether the memory is still alive.
        MemorySegment anyThreadView = MemorySegment.ofAddress(segment.address()).reinterpret(segment.byteSize());
        SoftMemoryRegion region = wrap(anyThreadView, mask);
        region.ownerScope(segment.scope());
        return register(region, mask);
    }

    private void checkRegion(long length, int mask) {
        context.ensureOpen();
        AccessFlag.validate(mask);
        long max = context.query().maxMemoryRegionSize();
        if (length < 1 || length > max) {
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT,
                "region length " + length + " outside 1.." + max + " (max_mr_size)");
        }
    }

    private SoftMemoryRegion register(SoftMemoryRegion region, int mask) {
        synchronized (this) {
            if (closed) {
                region.release();
                throw new VerbsException(VerbsException.Reason.CLOSED, "protection domain is closed");
            }
            if (!context.localKeys().putIfAbsent(region.lkey(), region)) {
                region.release();
                throw new VerbsException(VerbsException.Reason.NO_RESOURCES, "key collision; retry");
            }
            if (!context.remoteKeys().putIfAbsent(region.rkey(), region)) {
                context.localKeys().remove(region.lkey());
                region.release();
                throw new VerbsException(VerbsException.Reason.NO_RESOURCES, "key collision; retry");
            }
            regions.add(region);
        }
        published(region);
        return region;
    }

    /** Allocates shareable memory and builds the region object with fresh random keys. */
    protected abstract SoftMemoryRegion allocate(long length, int access, int regionCount);

    /** Builds the region object for caller-owned memory with fresh random keys. */
    protected abstract SoftMemoryRegion wrap(MemorySegment segment, int access);

    /** Called once a region's keys are live (shm publishes it to its shared key table). */
    protected void published(SoftMemoryRegion region) {
    }

    /** Called after a region's keys were withdrawn. */
    protected void withdrawn(SoftMemoryRegion region) {
    }

    void deregister(SoftMemoryRegion region) {
        synchronized (this) {
            if (!regions.remove(region)) {
                return;
            }
            region.invalidate();
            context.localKeys().remove(region.lkey());
            context.remoteKeys().remove(region.rkey());
        }
        withdrawn(region);
        region.release();
    }

    /** Adds a new queue pair to the domain and the context's QP table (with a free random QPN). */
    protected final <Q extends AbstractQueuePair> Q adopt(Q queuePair) {
        synchronized (this) {
            if (closed) {
                throw new VerbsException(VerbsException.Reason.CLOSED, "protection domain is closed");
            }
            queuePairs.add(queuePair);
        }
        return queuePair;
    }

    void queuePairClosed(AbstractQueuePair queuePair) {
        synchronized (this) {
            queuePairs.remove(queuePair);
        }
    }

    @Override
    public final QueuePair createQueuePair(QueuePairInitAttributes attributes) {
        context.ensureOpen();
        var limits = context.query();
        if (attributes.maxSendWorkRequests() > limits.maxQueuePairWorkRequests()
            || attributes.maxReceiveWorkRequests() > limits.maxQueuePairWorkRequests()) {
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT,
                "queue depth above max_qp_wr " + limits.maxQueuePairWorkRequests());
        }
        if (attributes.maxSendSge() > limits.maxSge() || attributes.maxReceiveSge() > limits.maxSge()) {
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT, "sge count above max_sge " + limits.maxSge());
        }
        if (attributes.maxInlineData() > limits.maxInlineData()) {
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT,
                "max_inline_data " + attributes.maxInlineData() + " above the device's " + limits.maxInlineData());
        }
        if (attributes.sendCompletionQueue().context() != context
            || attributes.receiveCompletionQueue().context() != context) {
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT,
                "completion queues belong to another context");
        }
        if (context.queuePairs().size() >= limits.maxQueuePairs()) {
            throw new VerbsException(VerbsException.Reason.NO_RESOURCES, "max_qp " + limits.maxQueuePairs() + " reached");
        }
        return adopt(newQueuePair(attributes));
    }

    /** Creates the provider's queue pair (which registers itself with the context). */
    protected abstract AbstractQueuePair newQueuePair(QueuePairInitAttributes attributes);

    @Override
    public void close() {
        synchronized (this) {
            if (closed) {
                return;
            }
            if (!regions.isEmpty() || !queuePairs.isEmpty()) {
                throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT, "protection domain still has "
                    + regions.size() + " region(s) and " + queuePairs.size() + " queue pair(s) (EBUSY)");
            }
            closed = true;
        }
        context.domainClosed(this);
    }

    /** Closes everything in the domain; used when the context closes. */
    void forceClose() {
        List<AbstractQueuePair> qps;
        List<SoftMemoryRegion> mrs;
        synchronized (this) {
            qps = new ArrayList<>(queuePairs);
            mrs = new ArrayList<>(regions);
        }
        for (AbstractQueuePair qp : qps) {
            qp.close();
        }
        for (SoftMemoryRegion mr : mrs) {
            mr.close();
        }
        close();
    }
}
