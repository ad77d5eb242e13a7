package io.jccl.collectives;

import io.jccl.common.Log;
import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.Context;
import io.jccl.verbs.Endpoint;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.QueuePairState;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.Verbs;
import io.jccl.verbs.VerbsException;
import io.jccl.verbs.WorkCompletion;
import io.jccl.verbs.WorkCompletionStatus;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The verbs plumbing of a communicator: one context, protection domain and completion queue per device in use,
 * one RC queue pair per peer, pre-registered inbox slots per peer (written by the peer with RDMA WRITE WITH IMM,
 * credit-based flow control returned with zero-byte SEND WITH IMM), and the direct path's control block and
 * staging buffers mapped from same-host peers. Only the thread running an operation touches this state.
 */
final class Transport implements AutoCloseable {
    static final int IMM_DATA = 0;
    static final int IMM_CREDIT = 1;
    static final int IMM_WINDOW = 2;
    /**
     * Rendezvous (see {@link #sendClearToSend}): bit 29 clear, a clear-to-send descriptor arrived in this rank's
     * descriptor box; set, a piece of a transfer arrived in this rank's destination buffer. Bits 0-28: credits.
     */
    static final int IMM_RDV = 3;
    static final int RDV_PIECE = 1 << 29;
    /** Clear-to-send descriptors per peer (after the inbox slots; one is outstanding at a time) and their size. */
    static final int CTS_SLOTS = 2;
    static final int CTS_BYTES = 64;
    /** Descriptor: signature (chunk length -1), then transfer length, destination address (0: send eager), rkey. */
    static final long CTS_LENGTH = Signature.BYTES;
    static final long CTS_ADDRESS = CTS_LENGTH + 8;
    static final long CTS_RKEY = CTS_ADDRESS + 8;
    static final long WR_RECV = 1;
    /** A send whose local buffer is in use until it completes: an exchange waits for it. */
    static final long WR_SEND = 2;
    /**
     * A send whose data was copied when it was posted (inline, or no data): nothing waits for it; its completion
     * is reaped by a later poll, and the send queue depth bounds how many are outstanding ({@link #canSend}).
     */
    static final long WR_SEND_COPIED = 3;
    /**
     * Largest inline send (header + payload) the QPs are created for, below the device's max_inline_data: every
     * send slot of a QP reserves this much (72 slots per peer by default).
     */
    static final int INLINE_MAX = 2048;
    static final int CONTROL_BYTES = 4096;
    /** Control block: status (0 running, 1 aborted/failed). */
    static final long CTRL_STATUS = 8;
    /** Control block: two input descriptors (by barrier epoch parity): mode (0 staged, 1 allocation), id, offset. */
    static final long CTRL_DESC = 256;
    /**
     * Control block: two output descriptors (by barrier epoch parity): mode, id, offset as the input descriptors,
     * then how the output relates to the input (separate, in place, overlapping). A direct all-reduce publishes it so
     * that all ranks choose the same algorithm, and so that, when every output is {@code Communicator.allocate}
     * memory, each rank can write its slice of the result into all of them.
     */
    static final long CTRL_OUT_DESC = 320;
    /**
     * Control block: two arrival records (by barrier epoch parity), each {@link #REC_BYTES}: the epoch (written
     * last, with release), the operation's signature and up to {@link #INLINE_BYTES} of inline payload, so that a
     * small all-reduce moves flag, signature and data in the same cache lines (one line up to 24 bytes).
     */
    static final long CTRL_REC = 512;
    /** Offset of the signature in an arrival record. */
    static final long REC_SIG = 8;
    /** Offset of an inline payload of up to {@link #REC_FIRST_LINE_BYTES} in an arrival record: the flag's line. */
    static final long REC_PAYLOAD = REC_SIG + Signature.BYTES;
    /** Largest inline payload that shares the cache line of the flag and the signature. */
    static final long REC_FIRST_LINE_BYTES = 64 - REC_PAYLOAD;
    /**
     * Offset of a larger inline payload: the next cache line. At {@link #REC_PAYLOAD} (40) every 64-byte vector
     * load of the reduction would straddle two lines, and the lines are the peer's, just written.
     */
    static final long REC_PAYLOAD_ALIGNED = 64;

    /** Offset of an inline payload of {@code bytes} in an arrival record (both ranks derive it from the size). */
    static long recordPayload(long bytes) {
        return bytes <= REC_FIRST_LINE_BYTES ? REC_PAYLOAD : REC_PAYLOAD_ALIGNED;
    }
    /** Largest inline payload (bytes). */
    static final int INLINE_BYTES = 1024;
    /** Size of one arrival record: 18 cache lines (a multiple of 128 B, so the two never share a line pair). */
    static final long REC_BYTES = 1152;

    /** Resources of one device. */
    static final class DeviceResources {
        final String name;
        final Context context;
        final ProtectionDomain pd;
        final CompletionQueue cq;
        /** Largest send (header + payload) posted inline on this device's QPs; 0 when it has no inline sends. */
        final int inlineBytes;

        DeviceResources(String name, Context context, ProtectionDomain pd, CompletionQueue cq, int inlineBytes) {
            this.name = name;
            this.context = context;
            this.pd = pd;
            this.cq = cq;
            this.inlineBytes = inlineBytes;
        }
    }

    final int rank;
    final int size;
    final int slots;
    final Peer[] peers;
    final Map<String, DeviceResources> devices = new LinkedHashMap<>();
    private final DeviceResources[] deviceArray;
    private final WorkCompletion[] completions = WorkCompletion.array(64);
    private final ReceiveWorkRequest receive = new ReceiveWorkRequest(1);
    private final SendWorkRequest send = new SendWorkRequest(2);
    private final int receiveDepth;
    final int sendDepth;
    final Communicator comm;
    /** Direct path (null when off). */
    MemoryRegion control;
    MemoryRegion staging;
    long directStagingBytes;
    boolean direct;
    /** Per-window, per-peer signal counts. */
    long[][] windowSignals = new long[0][];
    /** Destinations of rendezvous transfers, registered remote-writable (by device; see {@link #sendClearToSend}). */
    private final Map<DeviceResources, RegistrationCache> receiveRegions = new LinkedHashMap<>();

    Transport(Communicator comm, int rank, int size, int slots, Peer[] peers,
              Map<String, DeviceResources> devices) {
        this.comm = comm;
        this.rank = rank;
        this.size = size;
        this.slots = slots;
        this.peers = peers;
        this.devices.putAll(devices);
        this.deviceArray = devices.values().toArray(DeviceResources[]::new);
        this.receiveDepth = 2 * slots + 64;
        this.sendDepth = 2 * slots + 64;
    }

    /** Opens a device, or explains why not. */
    static DeviceResources open(String name, int cqCapacity) {
        Context context = Verbs.device(name).open();
        try {
            ProtectionDomain pd = context.allocateProtectionDomain();
            int capacity = Math.min(cqCapacity, context.query().maxCompletionQueueEntries());
            CompletionQueue cq = context.createCompletionQueue(capacity);
            int inline = Math.min(INLINE_MAX, context.query().maxInlineData());
            return new DeviceResources(name, context, pd, cq, inline >= Signature.BYTES ? inline : 0);
        } catch (RuntimeException e) {
            context.close();
            throw e;
        }
    }

    // ------------------------------------------------------------------------------------------------ setup

    /** Creates every peer's QP and inbox and moves the QPs to INIT with receives posted. */
    void createQueuePairs() {
        for (Peer p : peers) {
            if (p == null) {
                continue;
            }
            QueuePairInitAttributes attrs = QueuePairInitAttributes.of(p.device.cq)
                .withDepths(sendDepth, receiveDepth).withMaxInlineData(p.device.inlineBytes);
            p.qp = p.device.pd.createQueuePair(attrs);
            p.rendezvousBytes = comm.options().rendezvousBytesFor(p.device.name);
            // Inbox slots, then the clear-to-send descriptors this peer writes; chunk headers, then outgoing ones.
            p.inbox = p.device.pd.allocateMemory((long) slots * p.slotBytes + CTS_SLOTS * CTS_BYTES,
                AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ);
            p.headers = p.device.pd.allocateMemory((long) slots * Signature.BYTES + CTS_SLOTS * CTS_BYTES,
                AccessFlag.LOCAL_WRITE);
            p.qp.modify(QueuePairAttributes.toInit(AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE,
                AccessFlag.REMOTE_READ));
            for (int i = 0; i < receiveDepth; i++) {
                postReceive(p);
            }
        }
    }

    /** What this rank publishes for {@code peer}: endpoint and inbox address/rkey (and the direct region keys). */
    String localRecord(Peer p) {
        StringBuilder sb = new StringBuilder();
        sb.append(p.qp.localEndpoint().encode()).append(' ').append(Long.toHexString(p.inbox.address())).append(' ')
            .append(Integer.toHexString(p.inbox.rkey()));
        if (control != null && p.device.pd == control.protectionDomain()) {
            sb.append(' ').append(Long.toHexString(control.address())).append(' ')
                .append(Integer.toHexString(control.rkey())).append(' ').append(Long.toHexString(staging.address()))
                .append(' ').append(Integer.toHexString(staging.rkey())).append(' ').append(staging.length());
        }
        return sb.toString();
    }

    /** Connects {@code p} with the peer's published record; maps its direct regions when offered. */
    boolean connect(Peer p, String record, boolean wantDirect) {
        String[] f = record.split(" ");
        Endpoint remote = Endpoint.decode(f[0]);
        p.remoteInboxAddress = Long.parseUnsignedLong(f[1], 16);
        p.remoteInboxRkey = Integer.parseUnsignedInt(f[2], 16);
        p.qp.modify(QueuePairAttributes.toReadyToReceive(remote));
        // Local ACK timeout 18 (4.096 us x 2^18 = 1.07 s) x 8 tries: ranks reach RTR seconds apart when the host is
        // loaded (joining is a store round per peer), and a transport must not give up on a peer that is merely
        // late. Dead peers are still found at once (lost connection, shm liveness) and by the engine's deadlines.
        p.qp.modify(QueuePairAttributes.toReadyToSend(p.qp.initialPsn()).timeout(18));
        Log log = Log.get();
        if (log.enabled(Log.Level.INFO, Log.Subsys.NET)) {
            log.info(rank, Log.Subsys.NET, "QP 0x" + Integer.toHexString(p.qp.queuePairNumber()) + " on "
                + p.device.name + " connected to rank " + p.rank + " (" + remote + "); " + slots + " inbox slots of "
                + p.chunkBytes + " B each way, direct access " + (p.qp.supportsDirectAccess() ? "supported" : "no"));
        }
        if (!wantDirect || f.length < 8 || !p.qp.supportsDirectAccess()) {
            return false;
        }
        try {
            p.control = p.qp.mapRemote(Long.parseUnsignedLong(f[3], 16), CONTROL_BYTES,
                Integer.parseUnsignedInt(f[4], 16), false);
            p.staging = p.qp.mapRemote(Long.parseUnsignedLong(f[5], 16), Long.parseLong(f[7]),
                Integer.parseUnsignedInt(f[6], 16), false);
            return true;
        } catch (VerbsException e) {
            Log.get().info(rank, Log.Subsys.INIT, "no direct access to rank " + p.rank + "'s memory: " + e.getMessage());
            p.control = null;
            p.staging = null;
            return false;
        }
    }

    // ------------------------------------------------------------------------------------------------ posting

    private void postReceive(Peer p) {
        receive.wrId(((long) p.rank << 32) | WR_RECV).noData();
        p.qp.postReceive(receive);
    }

    /** Whether a data chunk can go to {@code p} now (a free slot at the peer and send-queue room). */
    boolean canSend(Peer p) {
        return p.sent - p.credited < slots && p.sendsOutstanding < sendDepth - 2;
    }

    /** Whether a chunk of {@code length} payload bytes to {@code p} is posted inline (copied at post time). */
    boolean copiedAtPost(Peer p, int length) {
        return Signature.BYTES + length <= p.device.inlineBytes;
    }

    /**
     * Writes one chunk (header + {@code length} bytes from {@code region} at {@code offset}) into the peer's next
     * inbox slot with RDMA WRITE WITH IMM; its immediate data returns this rank's pending credits to the peer.
     * Caller checked {@link #canSend}.
     * <p>A chunk that fits {@link DeviceResources#inlineBytes} is posted inline: the provider copies it at post
     * time, so the caller may reuse {@code region} at once and nothing waits for the send's completion (over tcp
     * that completion needs the peer's ACK, which the peer holds back to carry it on its own next message). A
     * larger chunk is sent from {@code region} and the exchange waits for its completion before it returns.
     */
    void sendChunk(Peer p, Signature sig, MemoryRegion region, long offset, int length) {
        int slot = (int) (p.sent % slots);
        sig.write(p.headers.segment(), (long) slot * Signature.BYTES, length);
        boolean copied = copiedAtPost(p, length);
        writeWithImmediate(p, copied).remote(p.remoteInboxAddress + (long) slot * p.slotBytes, p.remoteInboxRkey)
            .immediateData((IMM_DATA << 30) | p.pendingCredits);
        send.setSgeCount(length > 0 ? 2 : 1);
        send.sge(0).set(p.headers, (long) slot * Signature.BYTES, Signature.BYTES);
        if (length > 0) {
            send.sge(1).set(region, offset, length);
        }
        post(p, copied);
        p.sent++;
        p.pendingCredits = 0;
    }

    /**
     * The shared work request set up as a signaled RDMA WRITE WITH IMM to {@code p}; {@code copied}: posted INLINE
     * (the provider copies it at post time) and marked so that nothing waits for its completion.
     */
    private SendWorkRequest writeWithImmediate(Peer p, boolean copied) {
        return send.wrId(((long) p.rank << 32) | (copied ? WR_SEND_COPIED : WR_SEND))
            .opcode(SendOpcode.RDMA_WRITE_WITH_IMM)
            .flags(copied ? SendFlag.SIGNALED | SendFlag.INLINE : SendFlag.SIGNALED);
    }

    /** Offset in this rank's inbox of {@code p} of the clear-to-send descriptor number {@code index}. */
    long ctsOffset(Peer p, long index) {
        return (long) slots * p.slotBytes + (index % CTS_SLOTS) * CTS_BYTES;
    }

    /** Whether a control message (credits, clear-to-send) can be posted to {@code p} now. */
    boolean canPostControl(Peer p) {
        return p.sendsOutstanding < sendDepth - 2;
    }

    /**
     * Rendezvous, receiver side: registers {@code seg} remote-writable (cached, like sources) and writes a
     * clear-to-send descriptor for {@code length} bytes at {@code offset} of it into {@code p}'s descriptor box
     * (RDMA WRITE WITH IMM, inline where the device allows). The sender then writes the data straight into
     * {@code seg} in pieces ({@link #sendPiece}), saving the copy out of the inbox. When the memory cannot be
     * registered the descriptor carries address 0 and the sender falls back to inbox chunks. Returns whether the
     * destination was offered. Caller checked {@link #canPostControl}.
     * <p>Exposure: the peer holds an rkey for the whole segment while the registration stays cached (like NCCL's
     * registered buffers); only this communicator's authenticated queue pair to that peer can use it.
     */
    boolean sendClearToSend(Peer p, Signature sig, MemorySegment seg, long offset, long length) {
        long address = 0;
        int rkey = 0;
        try {
            RegistrationCache c = receiveRegions.get(p.device);
            if (c == null) {
                c = new RegistrationCache(p.device.pd, new ArrayList<>(), AccessFlag.LOCAL_WRITE,
                    AccessFlag.REMOTE_WRITE);
                receiveRegions.put(p.device, c);
            }
            MemoryRegion r = c.regionFor(seg);
            if (r != null) {
                address = r.address() + c.lastOffset + offset;
                rkey = r.rkey();
            }
        } catch (RuntimeException e) {
            // not registrable remote-writable here (heap memory, a provider limit): eager chunks instead
            Log.get().info(rank, Log.Subsys.NET, "rendezvous with rank " + p.rank + " falls back to the inbox: "
                + e.getMessage());
        }
        MemorySegment h = p.headers.segment();
        long at = (long) slots * Signature.BYTES + (p.ctsSent % CTS_SLOTS) * CTS_BYTES;
        sig.write(h, at, -1);
        h.set(ValueLayout.JAVA_LONG_UNALIGNED, at + CTS_LENGTH, length);
        h.set(ValueLayout.JAVA_LONG_UNALIGNED, at + CTS_ADDRESS, address);
        h.set(ValueLayout.JAVA_INT_UNALIGNED, at + CTS_RKEY, rkey);
        boolean copied = copiedAtPost(p, CTS_BYTES - Signature.BYTES);
        writeWithImmediate(p, copied).remote(p.remoteInboxAddress + ctsOffset(p, p.ctsSent), p.remoteInboxRkey)
            .immediateData((IMM_RDV << 30) | p.pendingCredits)
            .local(p.headers, at, CTS_BYTES);
        post(p, copied);
        p.ctsSent++;
        p.pendingCredits = 0;
        return address != 0;
    }

    /** Whether a rendezvous piece can go to {@code p} now: at most {@code slots} pieces in flight, as chunks. */
    boolean canSendPiece(Peer p) {
        return p.sendsAwaited < slots && p.sendsOutstanding < sendDepth - 2;
    }

    /**
     * Rendezvous, sender side: writes {@code length} bytes from {@code region} at {@code offset} straight to
     * {@code remoteAddress} (the receiver's destination, from its clear-to-send) with RDMA WRITE WITH IMM; the
     * immediate tells the receiver a piece arrived (and returns credits). Caller checked {@link #canSendPiece}.
     */
    void sendPiece(Peer p, MemoryRegion region, long offset, int length, long remoteAddress, int rkey) {
        writeWithImmediate(p, false).remote(remoteAddress, rkey).immediateData((IMM_RDV << 30) | RDV_PIECE | p.pendingCredits)
            .local(region, offset, length);
        post(p, false);
        p.pendingCredits = 0;
    }

    /** Returns pending credits to {@code p} (zero-byte SEND WITH IMM). */
    void flushCredits(Peer p) {
        if (p.pendingCredits == 0 || p.sendsOutstanding >= sendDepth - 1) {
            return;
        }
        send.wrId(((long) p.rank << 32) | WR_SEND_COPIED).opcode(SendOpcode.SEND_WITH_IMM).flags(SendFlag.SIGNALED)
            .immediateData((IMM_CREDIT << 30) | p.pendingCredits).noData();
        post(p, true);
        p.pendingCredits = 0;
    }

    /** One-sided window write with a signal (WRITE WITH IMM carrying the window id). */
    void windowPut(Peer p, int windowId, MemoryRegion region, long offset, int length, long remoteAddress, int rkey) {
        writeWithImmediate(p, false).remote(remoteAddress, rkey).immediateData((IMM_WINDOW << 30) | windowId);
        if (length > 0) {
            send.local(region, offset, length);
        } else {
            send.noData();
        }
        post(p, false);
    }

    private void post(Peer p, boolean copied) {
        try {
            p.qp.postSend(send);
            p.sendsOutstanding++;
            if (!copied) {
                p.sendsAwaited++;
            }
        } catch (VerbsException e) {
            throw peerFailed(p, "cannot post to rank " + p.rank + ": " + e.getMessage());
        }
    }

    // ------------------------------------------------------------------------------------------------ progress

    /** Polls every completion queue once; returns completions handled. */
    int poll() {
        int total = 0;
        for (DeviceResources d : deviceArray) {
            int n;
            try {
                n = d.cq.poll(completions, completions.length);
            } catch (VerbsException e) {
                throw new CollectiveException("completion queue of " + d.name + " failed: " + e.getMessage(), e);
            }
            for (int i = 0; i < n; i++) {
                handle(completions[i]);
            }
            total += n;
        }
        return total;
    }

    private void handle(WorkCompletion wc) {
        int peerRank = (int) (wc.wrId() >>> 32);
        long kind = wc.wrId() & 0xFF;
        Peer p = peerRank >= 0 && peerRank < peers.length ? peers[peerRank] : null;
        if (p == null) {
            return;
        }
        if (kind == WR_SEND || kind == WR_SEND_COPIED) {
            p.sendsOutstanding--;
            if (kind == WR_SEND) {
                p.sendsAwaited--;
            }
        }
        if (!wc.isSuccess()) {
            String why = wc.status() == WorkCompletionStatus.WR_FLUSH_ERR
                ? "its queue pair is in ERROR (process died, aborted, closed or connection lost)"
                : "a work request failed with " + wc.status();
            if (kind == WR_SEND && p.failure == null) {
                throw peerFailed(p, "rank " + p.rank + " is unreachable: " + why);
            }
            // A receive, or a send nothing waits for (copied at post time): fatal only if this peer is still
            // needed (checkPeer). A peer whose exchange is over may close before it acknowledges a credit message
            // this rank sent while it still expected chunks from it; its chunks are here all the same.
            if (p.broken == null) {
                p.broken = "rank " + p.rank + " is unreachable: " + why;
            }
            return;
        }
        if (kind != WR_RECV) {
            return;
        }
        int imm = wc.immediateData();
        switch (imm >>> 30) {
            case IMM_DATA -> {
                p.arrived++;
                p.credited += imm & 0x3FFF_FFFF;
            }
            case IMM_CREDIT -> p.credited += imm & 0x3FFF_FFFF;
            case IMM_RDV -> {
                if ((imm & RDV_PIECE) != 0) {
                    p.piecesArrived++;
                } else {
                    p.ctsArrived++;
                }
                p.credited += imm & (RDV_PIECE - 1);
            }
            case IMM_WINDOW -> {
                int w = imm & 0xFFFF;
                if (w < windowSignals.length && windowSignals[w] != null) {
                    windowSignals[w][p.rank]++;
                }
            }
            default -> {
            }
        }
        try {
            postReceive(p);
        } catch (VerbsException e) {
            throw peerFailed(p, "cannot re-post a receive for rank " + p.rank + ": " + e.getMessage());
        }
    }

    /** Inbox segment of {@code p}. */
    MemorySegment inbox(Peer p) {
        return p.inbox.segment();
    }

    /** Byte offset of the next unconsumed slot of {@code p} in its inbox. */
    long nextSlotOffset(Peer p) {
        return (p.consumed % slots) * (long) p.slotBytes;
    }

    // ------------------------------------------------------------------------------------------------ health

    CollectiveException.PeerFailure peerFailed(Peer p, String message) {
        if (p.failure == null) {
            p.failure = message;
        }
        return new CollectiveException.PeerFailure(p.rank, message);
    }

    /** Checks every peer's liveness; throws on the first dead one. */
    void checkHealth(Peer only) {
        for (Peer p : peers) {
            if (p != null && (only == null || p == only)) {
                checkPeer(p);
            }
        }
    }

    /** Checks one peer (QP state, same-host process, direct status word); throws when it is gone. */
    void checkPeer(Peer p) {
        if (p.failure != null) {
            throw new CollectiveException.PeerFailure(p.rank, p.failure);
        }
        if (p.broken != null) {
            throw peerFailed(p, p.broken);
        }
        QueuePairState s = p.qp.state();
        if (s == QueuePairState.ERROR) {
            throw peerFailed(p, "rank " + p.rank + " is unreachable: queue pair to it is in ERROR (process died, "
                + "aborted, closed or connection lost)");
        }
        if (p.sameHost && p.pid > 0 && p.pid != io.jccl.common.ProcessIds.self()) {
            boolean alive = ProcessHandle.of(p.pid).map(ProcessHandle::isAlive).orElse(false);
            if (!alive) {
                throw peerFailed(p, "rank " + p.rank + " died (process " + p.pid + " on " + p.host + " is gone)");
            }
        }
        long status;
        try {
            status = p.control == null ? 0 : p.control.get(ValueLayout.JAVA_LONG, CTRL_STATUS);
        } catch (IllegalStateException e) {
            throw peerFailed(p, "rank " + p.rank + "'s shared memory went away (it closed, aborted or died)");
        }
        if (status != 0) {
            throw peerFailed(p, "rank " + p.rank + " aborted its communicator");
        }
    }

    /** Marks this rank aborted for direct-path peers and moves every QP to ERROR so peers notice. */
    void abortLinks() {
        try {
            if (control != null && control.isValid()) {
                control.segment().set(ValueLayout.JAVA_LONG, CTRL_STATUS, 1);
            }
        } catch (RuntimeException ignored) {
            // already released
        }
        for (Peer p : peers) {
            if (p == null || p.qp == null) {
                continue;
            }
            try {
                if (p.qp.state() != QueuePairState.ERROR && p.qp.state() != QueuePairState.RESET) {
                    p.qp.modify(new QueuePairAttributes().state(QueuePairState.ERROR));
                }
            } catch (RuntimeException ignored) {
                // best effort
            }
        }
    }

    List<String> describePeers() {
        List<String> lines = new ArrayList<>();
        for (Peer p : peers) {
            if (p != null) {
                lines.add("rank " + p.rank + ": " + p.device.name + " (" + p.reason + ")" + (p.control != null
                    ? ", direct load/store" : "") + "; sent " + p.sent + " credited " + p.credited + " arrived "
                    + p.arrived + " consumed " + p.consumed + (p.failure != null ? "; FAILED: " + p.failure : ""));
            }
        }
        return lines;
    }

    /** How long closing waits for outstanding sends (see {@link #drainSends}). */
    static final long DRAIN_NS = 2_000_000_000L;

    /**
     * Waits, at most {@code budgetNs}, until every posted send has completed, above all the inline ones that no
     * exchange waited for: a provider may still hold such a message (a tcp QP whose socket was full at post time
     * keeps it in its send queue), and closing the QP would drop it while the peer waits for it. Stops at the
     * first error (a peer that is gone gets nothing more from us anyway).
     */
    void drainSends(long budgetNs) {
        long deadline = System.nanoTime() + budgetNs;
        io.jccl.common.idle.BackoffIdleStrategy idle = new io.jccl.common.idle.BackoffIdleStrategy();
        try {
            while (anySendOutstanding() && System.nanoTime() - deadline < 0) {
                idle.idle(poll());
            }
        } catch (RuntimeException e) {
            Log.get().info(rank, Log.Subsys.NET, "close: outstanding sends not drained (" + e.getMessage() + ")");
        }
    }

    private boolean anySendOutstanding() {
        for (Peer p : peers) {
            if (p != null && p.qp != null && p.failure == null && p.broken == null && p.sendsOutstanding > 0
                && p.qp.state() != QueuePairState.ERROR) {
                return true;
            }
        }
        return false;
    }

    @Override
    public void close() {
        drainSends(DRAIN_NS);
        for (RegistrationCache c : receiveRegions.values()) {
            c.close();
        }
        for (Peer p : peers) {
            if (p == null) {
                continue;
            }
            closeQuietly(p.qp);
            closeQuietly(p.inbox);
            closeQuietly(p.headers);
        }
        closeQuietly(control);
        closeQuietly(staging);
        for (DeviceResources d : devices.values()) {
            closeQuietly(d.context);
        }
    }

    static void closeQuietly(AutoCloseable c) {
        if (c == null) {
            return;
        }
        try {
            c.close();
        } catch (Exception ignored) {
            // closing
        }
    }

    /** Publishes (via the store) and reads records; used by setup. */
    static String key(String what, int from, int to) {
        return what + "/" + from + "/" + to;
    }
}
