package io.jccl.conformance;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.Context;
import io.jccl.verbs.DeviceAttributes;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.Verbs;

import java.util.List;

/**
 * The test's own end: a context on the device under test with one protection domain and one completion queue
 * that a {@link CompletionCollector} keeps polling. Tests use the verbs objects directly; this class only saves
 * the setup and the waiting.
 */
public final class LocalEnd implements AutoCloseable {
    private final Context context;
    private final ProtectionDomain domain;
    private final CompletionQueue queue;
    private final CompletionCollector collector;
    private final DeviceAttributes attributes;

    /** Opens {@code deviceName}. */
    public LocalEnd(String deviceName) {
        context = Verbs.device(deviceName).open();
        try {
            attributes = context.query();
            domain = context.allocateProtectionDomain();
            queue = context.createCompletionQueue(Math.min(65_536, attributes.maxCompletionQueueEntries()));
            collector = new CompletionCollector(queue, "local-cq-" + deviceName);
        } catch (RuntimeException e) {
            context.close();
            throw e;
        }
    }

    /** The open context. */
    public Context context() {
        return context;
    }

    /** The protection domain every local region and queue pair belongs to. */
    public ProtectionDomain domain() {
        return domain;
    }

    /** The completion queue of every local queue pair. */
    public CompletionQueue completionQueue() {
        return queue;
    }

    /** The device attributes (queried once). */
    public DeviceAttributes attributes() {
        return attributes;
    }

    /** Allocates and registers {@code length} zeroed bytes. */
    public MemoryRegion region(long length, AccessFlag... access) {
        return domain.allocateMemory(length, access);
    }

    /** Creates a queue pair in RESET whose send and receive completions go to the collected queue. */
    public QueuePair queuePair(PeerSide.QueuePairSpec spec) {
        return domain.createQueuePair(new QueuePairInitAttributes(queue, queue, spec.maxSend(), spec.maxReceive(),
            spec.maxSendSge(), spec.maxReceiveSge(), spec.maxInline(), spec.signalAll()));
    }

    /** Waits up to {@code timeoutNs} for {@code count} completions of {@code qp}; returns those that came. */
    public List<Completion> await(QueuePair qp, int count, long timeoutNs) {
        return collector.await(qp.queuePairNumber(), count, timeoutNs);
    }

    /** Stops polling and closes the context with everything created from it. */
    @Override
    public void close() {
        try {
            collector.close();
        } finally {
            context.close();
        }
    }
}
