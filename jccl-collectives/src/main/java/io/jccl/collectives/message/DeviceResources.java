package io.jccl.collectives.message;

import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.Context;
import io.jccl.verbs.LinkLayer;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.Reach;
import io.jccl.verbs.Verbs;

/**
 * One device in use by a communicator: its context, protection domain and completion queue, what it is attached
 * to, and the registration caches of memory sent from or received into over it.
 */
public final class DeviceResources implements AutoCloseable {
    /**
     * Largest inline send (header + payload) the queue pairs are created for, below the device's max_inline_data:
     * every send slot of a QP reserves this much (72 slots per peer by default).
     */
    public static final int INLINE_MAX = 2048;

    private final String name;
    private final String providerName;
    private final LinkLayer linkLayer;
    private final Context context;
    private final ProtectionDomain pd;
    private final CompletionQueue cq;
    private final int inlineBytes;
    /** Sources of sends, and destinations offered by rendezvous (remote-writable); created on first use. */
    RegistrationCache sources;
    RegistrationCache destinations;

    private DeviceResources(String name, String providerName, LinkLayer linkLayer, Context context,
                            ProtectionDomain pd, CompletionQueue cq, int inlineBytes) {
        this.name = name;
        this.providerName = providerName;
        this.linkLayer = linkLayer;
        this.context = context;
        this.pd = pd;
        this.cq = cq;
        this.inlineBytes = inlineBytes;
    }

    /**
     * Opens device {@code name} for peers within {@code peers} (a network device may then listen on loopback only)
     * with a completion queue of {@code cqCapacity} (or the device's maximum).
     */
    public static DeviceResources open(String name, int cqCapacity, Reach peers) {
        Context context = Verbs.device(name).open(peers);
        try {
            ProtectionDomain pd = context.allocateProtectionDomain();
            int capacity = Math.min(cqCapacity, context.query().maxCompletionQueueEntries());
            CompletionQueue cq = context.createCompletionQueue(capacity);
            int inline = Math.min(INLINE_MAX, context.query().maxInlineData());
            return new DeviceResources(name, context.device().providerName(), context.device().linkLayer(), context,
                pd, cq, inline >= io.jccl.collectives.core.Signature.BYTES ? inline : 0);
        } catch (RuntimeException e) {
            context.close();
            throw e;
        }
    }

    /** The device's name ({@code shm0}). */
    public String name() {
        return name;
    }

    /** The provider serving it ({@code shm}). */
    public String providerName() {
        return providerName;
    }

    /** What the device is attached to: memory of this host, or a network. */
    public LinkLayer linkLayer() {
        return linkLayer;
    }

    /** The open device. */
    public Context context() {
        return context;
    }

    /** The protection domain every region and queue pair of the communicator uses on this device. */
    public ProtectionDomain protectionDomain() {
        return pd;
    }

    /** The completion queue of every queue pair on this device. */
    public CompletionQueue completionQueue() {
        return cq;
    }

    /** Largest send (header + payload) posted inline on this device's QPs; 0 when it has no inline sends. */
    public int inlineBytes() {
        return inlineBytes;
    }

    /** Closes the caches and the device (and everything created from it). */
    @Override
    public void close() {
        MessagePath.closeQuietly(sources);
        MessagePath.closeQuietly(destinations);
        MessagePath.closeQuietly(context);
    }

    @Override
    public String toString() {
        return name;
    }
}
