package io.jccl.collectives;

import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.QueuePair;

import java.lang.foreign.MemorySegment;

/** Connection state towards one peer rank (package-private engine state; touched by the executing thread). */
final class Peer {
    final int rank;
    final Transport.DeviceResources device;
    final String reason;
    /** Ring chunk size towards this peer (depends on the device) and the inbox slot size (header + chunk). */
    int chunkBytes;
    int slotBytes;
    /** Smallest copied transfer to/from this peer that goes by rendezvous (0: never); same on both ends. */
    long rendezvousBytes;
    QueuePair qp;
    /** My inbox for this peer's chunks: slots × slotBytes. */
    MemoryRegion inbox;
    /** Header ring for my chunks to this peer: slots × HEADER_BYTES. */
    MemoryRegion headers;
    long remoteInboxAddress;
    int remoteInboxRkey;
    String host;
    long pid;
    boolean sameHost;

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
    /** Posted sends not yet completed (bounded by the send queue depth, see {@link Transport#canSend}). */
    int sendsOutstanding;
    /** Of those, sends whose local buffer is still in use (not copied at post time): an exchange waits for them. */
    int sendsAwaited;
    long p2pSendSeq;
    long p2pRecvSeq;

    /** Direct path: the peer's control block and staging, mapped read-only. */
    MemorySegment control;
    MemorySegment staging;

    /** The peer's Communicator.allocate() regions mapped here (direct zero copy), by allocation id. */
    final java.util.Map<Integer, MemorySegment> allocations = new java.util.HashMap<>();
    /** The same, mapped writable (the split all-reduce writes this rank's slice of the result into them). */
    final java.util.Map<Integer, MemorySegment> writableAllocations = new java.util.HashMap<>();

    volatile String failure;
    /** Set when the QP reported an error on a receive (peer gone); fatal only if this peer is still needed. */
    volatile String broken;

    Peer(int rank, Transport.DeviceResources device, String reason) {
        this.rank = rank;
        this.device = device;
        this.reason = reason;
    }
}
