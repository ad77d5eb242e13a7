package io.jccl.verbs.spi;

import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.Context;
import io.jccl.verbs.Counter;
import io.jccl.verbs.CounterShare;
import io.jccl.verbs.Device;
import io.jccl.verbs.VerbsException;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * The parts of a context every software provider shares: the key tables (lkey and rkey → region), the QP-number
 * table, counters, completion queues and closing everything in order.
 */
public abstract class AbstractContext implements Context {
    private final Device device;
    private final KeyTable<SoftMemoryRegion> localKeys = new KeyTable<>();
    private final KeyTable<SoftMemoryRegion> remoteKeys = new KeyTable<>();
    private final KeyTable<AbstractQueuePair> queuePairs = new KeyTable<>();
    private final CounterSet counters;
    private final List<AbstractProtectionDomain> domains = new ArrayList<>();
    private final List<SoftCompletionQueue> completionQueues = new ArrayList<>();
    private volatile boolean closed;

    /** A context of {@code device}. */
    protected AbstractContext(Device device) {
        this.device = device;
        // Published in a counter file, so `jccl devinfo -v --pid PID` can read them from outside.
        this.counters = CounterSet.forContext(device.name());
    }

    @Override
    public Device device() {
        return device;
    }

    /** Local-key table. */
    public KeyTable<SoftMemoryRegion> localKeys() {
        return localKeys;
    }

    /** Remote-key table, consulted by the responder for every one-sided request. */
    public KeyTable<SoftMemoryRegion> remoteKeys() {
        return remoteKeys;
    }

    /** Queue pairs by number. */
    public KeyTable<AbstractQueuePair> queuePairs() {
        return queuePairs;
    }

    /** The counters. */
    public CounterSet counterSet() {
        return counters;
    }

    @Override
    public Map<Counter, Long> counters() {
        return counters.snapshot();
    }

    /** A {@link CounterSet.Local} of this context's counters (in its counter file when it has one). */
    @Override
    public CounterShare openCounterShare() {
        return counters.newLocal();
    }

    /** Throws CLOSED when the context was closed. */
    public void ensureOpen() {
        if (closed) {
            throw new VerbsException(VerbsException.Reason.CLOSED, "context " + device.name() + " is closed");
        }
    }

    /** Whether the context is closed. */
    public boolean isClosed() {
        return closed;
    }

    @Override
    public final synchronized AbstractProtectionDomain allocateProtectionDomain() {
        ensureOpen();
        AbstractProtectionDomain domain = newProtectionDomain();
        domains.add(domain);
        return domain;
    }

    /** Creates the provider's protection domain. */
    protected abstract AbstractProtectionDomain newProtectionDomain();

    synchronized void domainClosed(AbstractProtectionDomain domain) {
        domains.remove(domain);
    }

    @Override
    public synchronized CompletionQueue createCompletionQueue(int capacity) {
        ensureOpen();
        int max = query().maxCompletionQueueEntries();
        if (capacity < 1 || capacity > max) {
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT,
                "completion queue capacity " + capacity + " outside 1.." + max);
        }
        SoftCompletionQueue queue = new SoftCompletionQueue(this, capacity);
        completionQueues.add(queue);
        return queue;
    }

    /** Closes queue pairs, regions, domains and completion queues, then the provider's own resources. */
    @Override
    public void close() {
        List<AbstractProtectionDomain> toClose;
        synchronized (this) {
            if (closed) {
                return;
            }
            closed = true;
            toClose = new ArrayList<>(domains);
        }
        for (AbstractProtectionDomain domain : toClose) {
            domain.forceClose();
        }
        synchronized (this) {
            for (SoftCompletionQueue queue : completionQueues) {
                try {
                    queue.close();
                } catch (VerbsException ignored) {
                    // queue pairs are gone by now; nothing else can hold the queue
                }
            }
            completionQueues.clear();
        }
        try {
            closeProvider();
        } finally {
            counters.close();
        }
    }

    /** Releases the provider's own resources (threads, files, sockets). */
    protected abstract void closeProvider();
}
