package io.jccl.collectives.message;

import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.QueuePair;

/**
 * The message path towards one peer rank: its device, queue pair, inbox and the flow-control and rendezvous
 * counters. Touched by the thread running the current operation (and read by health checks and diagnostics).
 */
public final class Peer {
    final int rank;
    final DeviceResources device;
    final String reason;
    /** Ring chunk size towards this peer (depends on the device) and the inbox slot size (header + chunk). */
    final int chunkBytes;
    final int slotBytes;
    /** Smallest copied transfer to/from this peer that goes by rendezvous (0: never); same on both ends. */
    final long rendezvousBytes;
    final String host;
    final long pid;
    final boolean sameHost;
    QueuePair qp;
    /** My inbox for this peer's chunks: slots × slotBytes, then the clear-to-send descriptors it writes. */
    MemoryRegion inbox;
    /** Header ring for my chunks to this peer: slots × HEADER_BYTES, then my outgoing clear-to-sends. */
    MemoryRegion headers;
    long remoteInboxAddress;
    int remoteInboxRkey;
    /** Whether the direct path maps this peer's control block and staging (diagnostics). */
    private volatile boolean directlyMapped;

    long sent;
    long credited;
    long arrived;
    long consumed;
    int pendingCredits;
    /** Rendezvous: clear-to-sends posted to / arrived from / read of this peer; pieces arrived / consumed. */
    long ctsSent;
    long ctsArrived;
    long ctsConsumed;
    long piecesArrived;
    long piecesConsumed;
    /** Posted sends not yet completed (bounded by the send queue depth, see {@link MessagePath#canSend}). */
    int sendsOutstanding;
    /** Of those, sends whose local buffer is still in use (not copied at post time): an exchange waits for them. */
    int sendsAwaited;
    private long p2pSendSeq;
    private long p2pRecvSeq;

    volatile String failure;
    /** The rank this peer's abort notice named as the origin of the failure, and its reason (null: none came). */
    volatile int abortOrigin = -1;
    volatile String abortNotice;
    /** Whether that notice was a revocation (written before {@link #abortNotice}). */
    volatile boolean revokeNotice;
    /** Set when the QP reported an error on a receive (peer gone); fatal only if this peer is still needed. */
    volatile String broken;
    /** The kernel said the peer's process exited (its pidfd, {@code ProcessExits}): dead, even while a zombie. */
    volatile boolean exited;

    /**
     * A peer served by {@code device} (chosen because of {@code reason}), with the chunk and rendezvous sizes both
     * ends derive from the device, and where the peer runs.
     */
    public Peer(int rank, DeviceResources device, String reason, int chunkBytes, long rendezvousBytes, String host,
                long pid, boolean sameHost) {
        this.rank = rank;
        this.device = device;
        this.reason = reason;
        this.chunkBytes = chunkBytes;
        this.slotBytes = io.jccl.collectives.core.Signature.BYTES + chunkBytes;
        this.rendezvousBytes = rendezvousBytes;
        this.host = host;
        this.pid = pid;
        this.sameHost = sameHost;
    }

    /** The peer's rank. */
    public int rank() {
        return rank;
    }

    /** The device serving this peer. */
    public DeviceResources device() {
        return device;
    }

    /** Why that device (for logs and {@code Communicator.transportOf}). */
    public String reason() {
        return reason;
    }

    /** The peer's host identity. */
    public String host() {
        return host;
    }

    /** Whether the peer runs on this host. */
    public boolean sameHost() {
        return sameHost;
    }

    /** The queue pair to the peer (null before the queue pairs are created). */
    public QueuePair queuePair() {
        return qp;
    }

    /** Ring chunk size towards this peer. */
    public int chunkBytes() {
        return chunkBytes;
    }

    /** Marks the peer's direct-path memory as mapped (diagnostics and logs). */
    public void markDirectlyMapped(boolean mapped) {
        directlyMapped = mapped;
    }

    /** Whether the direct path maps this peer's memory. */
    public boolean directlyMapped() {
        return directlyMapped;
    }

    /** The sequence number of the next point-to-point send to this peer (counts per direction). */
    public long nextSendSequence() {
        return ++p2pSendSeq;
    }

    /** The sequence number of the next point-to-point receive from this peer. */
    public long nextReceiveSequence() {
        return ++p2pRecvSeq;
    }

    /** Posted sends not yet completed. */
    public int sendsOutstanding() {
        return sendsOutstanding;
    }

    /** Posted sends whose buffer is still in use. */
    public int sendsAwaited() {
        return sendsAwaited;
    }

    /** Clear-to-sends posted to this peer. */
    public long ctsSent() {
        return ctsSent;
    }

    /** Clear-to-sends that arrived from this peer. */
    public long ctsArrived() {
        return ctsArrived;
    }

    /** Clear-to-sends of this peer read. */
    public long ctsConsumed() {
        return ctsConsumed;
    }

    /** Rendezvous pieces that arrived from this peer. */
    public long piecesArrived() {
        return piecesArrived;
    }

    /** Rendezvous pieces from this peer consumed. */
    public long piecesConsumed() {
        return piecesConsumed;
    }

    /** Why the peer failed, or null. */
    public String failure() {
        return failure;
    }
}
