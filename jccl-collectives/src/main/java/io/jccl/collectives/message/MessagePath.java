package io.jccl.collectives.message;

import io.jccl.collectives.CollectiveException;
import io.jccl.collectives.core.Signature;
import io.jccl.collectives.memory.Allocations;
import io.jccl.common.Log;
import io.jccl.common.ProcessIds;
import io.jccl.common.idle.BackoffIdleStrategy;
import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.Endpoint;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.QueuePairState;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.VerbsException;
import io.jccl.verbs.WorkCompletion;
import io.jccl.verbs.WorkCompletionStatus;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The message path: the verbs plumbing of a communicator. One context, protection domain and completion queue per
 * device in use ({@link DeviceResources}), one RC queue pair per peer, pre-registered inbox slots per peer (written
 * by the peer with RDMA WRITE WITH IMM, credit-based flow control returned with zero-byte SEND WITH IMM) and, for
 * large copied transfers, rendezvous: the receiver offers its destination with a clear-to-send and the sender
 * writes straight into it. The {@link Exchange} drives it. Only the thread running an operation touches this
 * state (health checks and diagnostics read it).
 */
public final class MessagePath implements AutoCloseable {
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
    /**
     * Abort notice (see {@link #abortLinks}): a WRITE WITH IMM of type {@link #IMM_WINDOW} with this bit set (window
     * ids stay below 2^16) and the originating rank in bits 0-23, whose payload, the reason, lands in the abort box
     * after the clear-to-send descriptors: length (int) then UTF-8 text.
     */
    static final int IMM_ABORT_NOTICE = 1 << 29;
    /** With {@link #IMM_ABORT_NOTICE}: the notice is a revocation ({@link #abortLinks} with {@code revoke}). */
    static final int IMM_REVOKE_NOTICE = 1 << 28;
    static final int ABORT_BYTES = 256;
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
    /** An abort notice: not counted among the sends (it goes out as the links break). */
    static final long WR_NOTICE = 4;
    /** How long closing waits for outstanding sends (see {@link #drainSends}). */
    public static final long DRAIN_NS = 2_000_000_000L;

    /** A health check beside the message path's own (the direct path's status word of a peer). */
    @FunctionalInterface
    public interface PeerCheck {
        /** Throws a {@link CollectiveException.PeerFailure} when {@code p} is gone. */
        void check(Peer p);
    }

    private final int rank;
    private final int slots;
    private final Peer[] peers;
    private final Map<String, DeviceResources> devices = new LinkedHashMap<>();
    private final DeviceResources[] deviceArray;
    private final Allocations allocations;
    private final WorkCompletion[] completions = WorkCompletion.array(64);
    private final ReceiveWorkRequest receive = new ReceiveWorkRequest(1);
    private final SendWorkRequest send = new SendWorkRequest(2);
    private final int receiveDepth;
    private final int sendDepth;
    private volatile PeerCheck extraCheck;
    /** Link silence after which a transport fails the peer (JCCL_PEER_TIMEOUT). */
    private final long peerTimeoutNs;
    /** The first peer a send failed to in the current {@link #poll}, thrown at its end (with its reason). */
    private Peer failedSendPeer;
    private String failedSendWhy;
    /** Per-window, per-peer signal counts. */
    private long[][] windowSignals = new long[0][];

    /**
     * The message path of {@code rank} to {@code peers} (indexed by rank, null for this rank) over {@code devices},
     * with {@code slots} inbox slots per peer; sends from {@code allocations} need no registration. A link silent
     * for {@code peerTimeoutNs} fails its peer (the queue pairs' timeout and retry count).
     */
    public MessagePath(int rank, int slots, Peer[] peers, Collection<DeviceResources> devices,
                       Allocations allocations, long peerTimeoutNs) {
        this.rank = rank;
        this.peerTimeoutNs = peerTimeoutNs;
        this.slots = slots;
        this.peers = peers;
        for (DeviceResources d : devices) {
            this.devices.put(d.name(), d);
        }
        this.deviceArray = devices.toArray(DeviceResources[]::new);
        this.allocations = allocations;
        this.receiveDepth = 2 * slots + 64;
        this.sendDepth = 2 * slots + 64;
    }

    /** The peers, indexed by rank (null for this rank). */
    public Peer[] peers() {
        return peers;
    }

    /** The peer {@code rank}. */
    public Peer peer(int rank) {
        return peers[rank];
    }

    /** The devices in use, by name, in preference order. */
    public Map<String, DeviceResources> devices() {
        return devices;
    }

    /** The first device in use, or null (one rank). */
    public DeviceResources firstDevice() {
        return deviceArray.length == 0 ? null : deviceArray[0];
    }

    /** Send queue depth of every queue pair. */
    public int sendDepth() {
        return sendDepth;
    }

    /**
     * Adds a health check run with every {@link #checkPeer}, after those added before (the direct path's status
     * word; a shrink's join watch).
     */
    public synchronized void addPeerCheck(PeerCheck check) {
        PeerCheck before = extraCheck;
        extraCheck = before == null ? check : p -> {
            before.check(p);
            check.check(p);
        };
    }

    // ------------------------------------------------------------------------------------------------ setup

    /** Creates every peer's QP and inbox and moves the QPs to INIT with receives posted. */
    public void createQueuePairs() {
        for (Peer p : peers) {
            if (p == null) {
                continue;
            }
            QueuePairInitAttributes attrs = QueuePairInitAttributes.of(p.device.completionQueue())
                .withDepths(sendDepth, receiveDepth).withMaxInlineData(p.device.inlineBytes());
            p.qp = p.device.protectionDomain().createQueuePair(attrs);
            // Inbox slots, then the clear-to-send descriptors this peer writes; chunk headers, then outgoing ones.
            p.inbox = p.device.protectionDomain().allocateMemory(abortBoxOffset(p) + ABORT_BYTES,
                AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ);
            p.headers = p.device.protectionDomain().allocateMemory(
                (long) slots * Signature.BYTES + CTS_SLOTS * CTS_BYTES + ABORT_BYTES, AccessFlag.LOCAL_WRITE);
            p.qp.modify(QueuePairAttributes.toInit(AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE,
                AccessFlag.REMOTE_READ));
            for (int i = 0; i < receiveDepth; i++) {
                postReceive(p);
            }
        }
    }

    /** What this rank publishes for {@code p}: the endpoint, then the inbox address and rkey (hex, space-separated). */
    public String localRecord(Peer p) {
        return p.qp.localEndpoint().encode() + ' ' + Long.toHexString(p.inbox.address()) + ' '
            + Integer.toHexString(p.inbox.rkey());
    }

    /**
     * Connects {@code p} with the first three fields of the peer's published record (endpoint, inbox address,
     * inbox rkey; see {@link #localRecord}) and moves its queue pair to RTS.
     */
    public void connect(Peer p, String[] record) {
        Endpoint remote = Endpoint.decode(record[0]);
        p.remoteInboxAddress = Long.parseUnsignedLong(record[1], 16);
        p.remoteInboxRkey = Integer.parseUnsignedInt(record[2], 16);
        p.qp.modify(QueuePairAttributes.toReadyToReceive(remote));
        // The link timeout (ACK timeout x tries) is the peer timeout: one setting for how long a silent link is
        // tolerated, on every transport that acknowledges or probes (a peer that is merely late to a call is not
        // silent: its transport still answers). Dead peers are found sooner (lost connection, process gone).
        p.qp.modify(QueuePairAttributes.toReadyToSend(p.qp.initialPsn()).linkTimeoutNs(peerTimeoutNs));
        Log log = Log.get();
        if (log.enabled(Log.Level.INFO, Log.Subsys.NET)) {
            log.info(rank, Log.Subsys.NET, "QP 0x" + Integer.toHexString(p.qp.queuePairNumber()) + " on "
                + p.device.name() + " connected to rank " + p.rank + " (" + remote + "); " + slots + " inbox slots of "
                + p.chunkBytes + " B each way, direct access " + (p.qp.supportsDirectAccess() ? "supported" : "no"));
        }
    }

    // ------------------------------------------------------------------------------------------------ posting

    private void postReceive(Peer p) {
        receive.wrId(((long) p.rank << 32) | WR_RECV).noData();
        p.qp.postReceive(receive);
    }

    /** Whether a data chunk can go to {@code p} now (a free slot at the peer and send-queue room). */
    public boolean canSend(Peer p) {
        return p.sent - p.credited < slots && p.sendsOutstanding < sendDepth - 2;
    }

    /** Whether a chunk of {@code length} payload bytes to {@code p} is posted inline (copied at post time). */
    public boolean copiedAtPost(Peer p, int length) {
        return Signature.BYTES + length <= p.device.inlineBytes();
    }

    /** The registered region holding {@code seg}, to send from it over {@code device} (registered once, cached). */
    public MemoryRegion sourceRegion(DeviceResources device, MemorySegment seg) {
        RegistrationCache c = device.sources;
        if (c == null) {
            c = new RegistrationCache(device.protectionDomain(), allocations, AccessFlag.LOCAL_WRITE);
            device.sources = c;
        }
        return c.regionFor(seg);
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

    /** Offset in this rank's inbox of {@code p} of the abort box (after the clear-to-send descriptors). */
    private long abortBoxOffset(Peer p) {
        return (long) slots * p.slotBytes + CTS_SLOTS * CTS_BYTES;
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
            RegistrationCache c = p.device.destinations;
            if (c == null) {
                c = new RegistrationCache(p.device.protectionDomain(), null, AccessFlag.LOCAL_WRITE,
                    AccessFlag.REMOTE_WRITE);
                p.device.destinations = c;
            }
            MemoryRegion r = c.regionFor(seg);
            if (r != null) {
                address = r.address() + RegistrationCache.offsetIn(r, seg) + offset;
                rkey = r.rkey();
            }
        } catch (RuntimeException e) {
            // not registrable remote-writable here (heap memory, a provider limit): eager chunks instead
            Log.get().info(rank, Log.Subsys.NET, () -> "rendezvous with rank " + p.rank + " falls back to the inbox: "
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
        writeWithImmediate(p, false).remote(remoteAddress, rkey)
            .immediateData((IMM_RDV << 30) | RDV_PIECE | p.pendingCredits)
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
    public void windowPut(Peer p, int windowId, MemoryRegion region, long offset, int length, long remoteAddress,
                          int rkey) {
        writeWithImmediate(p, false).remote(remoteAddress, rkey).immediateData((IMM_WINDOW << 30) | windowId);
        if (length > 0) {
            send.local(region, offset, length);
        } else {
            send.noData();
        }
        post(p, false);
    }

    /**
     * Reads {@code length} bytes of the peer's memory at {@code remoteAddress} (a window) into {@code region} at
     * {@code offset} with RDMA READ; completes like a send (the caller waits for {@link Peer#sendsOutstanding}).
     */
    public void windowGet(Peer p, MemoryRegion region, long offset, int length, long remoteAddress, int rkey) {
        send.wrId(((long) p.rank << 32) | WR_SEND).opcode(SendOpcode.RDMA_READ).flags(SendFlag.SIGNALED)
            .remote(remoteAddress, rkey).local(region, offset, length);
        post(p, false);
    }

    /** Starts counting signals of window {@code id} (one count per peer). */
    public void addWindow(int id) {
        long[][] signals = windowSignals;
        if (signals.length <= id) {
            signals = java.util.Arrays.copyOf(signals, id + 1);
        }
        signals[id] = new long[peers.length];
        windowSignals = signals;
    }

    /** Signals of window {@code id} that arrived from {@code peer} so far. */
    public long windowSignals(int id, int peer) {
        return windowSignals[id][peer];
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
    public int poll() {
        int total = pollOnce();
        Peer failed = failedSendPeer;
        if (failed != null) {
            // A failed send is thrown only after the whole batch, and one more poll, are handled: the peer's abort
            // notice (which names the rank it gave up because of, and why) may sit behind the error in the queue
            // (shm0 fails a send to a peer in ERROR at post time, before the notice's receive is drained)
            String why = failedSendWhy;
            try {
                pollOnce();
            } finally {
                failedSendPeer = null; // thrown here: a second failed send is found again by the health checks
            }
            throw peerFailed(failed, why);
        }
        return total;
    }

    /** One poll of every device's queue; a failed send is recorded ({@link #failedSendPeer}), not thrown. */
    private int pollOnce() {
        int total = 0;
        for (DeviceResources d : deviceArray) {
            int n;
            try {
                n = d.completionQueue().poll(completions, completions.length);
            } catch (VerbsException e) {
                throw new CollectiveException("completion queue of " + d.name() + " failed: " + e.getMessage(), e);
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
        if (kind == WR_NOTICE) {
            return; // this rank is failing anyway
        }
        if (!wc.isSuccess()) {
            String why = wc.status() == WorkCompletionStatus.WR_FLUSH_ERR
                ? "its queue pair is in ERROR (process died, aborted, closed or connection lost)"
                : "a work request failed with " + wc.status();
            if (kind == WR_SEND && p.failure == null) {
                if (failedSendPeer == null) {
                    failedSendPeer = p;
                    failedSendWhy = "rank " + p.rank + " is unreachable: " + why;
                }
                return;
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
                if ((imm & IMM_ABORT_NOTICE) != 0) {
                    onAbortNotice(p, imm & 0xFF_FFFF, (imm & IMM_REVOKE_NOTICE) != 0);
                } else {
                    int w = imm & 0xFFFF;
                    if (w < windowSignals.length && windowSignals[w] != null) {
                        windowSignals[w][p.rank]++;
                    }
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

    /** Byte offset of the next unconsumed slot of {@code p} in its inbox. */
    long nextSlotOffset(Peer p) {
        return (p.consumed % slots) * (long) p.slotBytes;
    }

    // ------------------------------------------------------------------------------------------------ health

    /**
     * Records that {@code p} failed (the first reason sticks) and returns the error to throw. When {@code p} said
     * before it broke its links that it gave up because of another rank (its abort notice), the error names that
     * rank, the origin, with {@code p}'s reason: the neighbours of a dead rank report the dead rank, not each other.
     */
    public CollectiveException.PeerFailure peerFailed(Peer p, String message) {
        String notice = p.abortNotice;
        int origin = notice == null ? p.rank : p.abortOrigin;
        String full;
        if (notice == null) {
            full = message;
        } else if (origin == p.rank) {
            full = message + "; rank " + p.rank + " had given up: " + notice;
        } else {
            full = "rank " + origin + " failed first (rank " + p.rank + " gave up because of it: " + notice + "); "
                + message;
        }
        if (p.failure == null) {
            p.failure = full;
        }
        return new CollectiveException.PeerFailure(origin, full);
    }

    /** Peer {@code p} wrote its abort notice: it gives up because of rank {@code origin}, for the reason in the box. */
    private void onAbortNotice(Peer p, int origin, boolean revoke) {
        MemorySegment box = p.inbox.segment().asSlice(abortBoxOffset(p), ABORT_BYTES);
        int length = box.get(ValueLayout.JAVA_INT_UNALIGNED, 0);
        String reason = length > 0 && length <= ABORT_BYTES - 4
            ? new String(box.asSlice(4, length).toArray(ValueLayout.JAVA_BYTE), StandardCharsets.UTF_8) : "(no reason)";
        p.abortOrigin = origin >= 0 && origin < peers.length ? origin : p.rank;
        p.revokeNotice = revoke; // before abortNotice: revokedBy() reads abortNotice first
        p.abortNotice = reason;
        if (p.broken == null) {
            p.broken = "rank " + p.rank + " aborted its links";
        }
    }

    /**
     * Checks one peer (an earlier failure, a broken receive, the QP state, a same-host process that is gone, and
     * the checks added with {@link #addPeerCheck}); throws when it is gone.
     */
    public void checkPeer(Peer p) {
        if (p.revokeNotice && p.abortNotice != null) {
            throw revoked(p);
        }
        if (p.failure != null) {
            throw new CollectiveException.PeerFailure(p.abortNotice == null ? p.rank : p.abortOrigin, p.failure);
        }
        QueuePairState s = p.qp.state();
        if (p.broken != null || s == QueuePairState.ERROR) {
            // The added checks first: the direct path's status word says who failed first and why, which a
            // broken link alone does not.
            PeerCheck extra = extraCheck;
            if (extra != null) {
                extra.check(p);
            }
            throw peerFailed(p, p.broken != null ? p.broken : "rank " + p.rank + " is unreachable: queue pair to it"
                + " is in ERROR (process died, aborted, closed or connection lost)");
        }
        if (p.sameHost && p.pid > 0 && p.pid != ProcessIds.self()) {
            boolean alive = !p.exited && ProcessHandle.of(p.pid).map(ProcessHandle::isAlive).orElse(false);
            if (!alive) {
                throw peerFailed(p, "rank " + p.rank + " died (process " + p.pid + " on " + p.host + " is gone)");
            }
        }
        PeerCheck extra = extraCheck;
        if (extra != null) {
            extra.check(p);
        }
    }

    /**
     * Tells every peer why this rank gives up, then moves every QP to ERROR so peers notice (this rank failed or was
     * aborted). The notice, a WRITE WITH IMM into the peer's abort box, carries the rank the failure started with
     * ({@code originRank}: a dead peer, or this rank) and the reason: it travels on the links themselves, ahead of
     * the error they then show, so a peer learns the origin even when the store (rank 0's) died with it. Best
     * effort, from any thread (abort()).
     */
    public void abortLinks(int originRank, String reason) {
        abortLinks(originRank, reason, false);
    }

    /**
     * {@link #abortLinks(int, String)}, as a revocation when {@code revoke}: the notice says so, and a peer that
     * reads it fails with {@link CollectiveException.Revoked} naming {@code originRank} (the revoker) instead of a
     * peer failure, and revokes its own communicator in turn.
     */
    public void abortLinks(int originRank, String reason, boolean revoke) {
        byte[] text = reason == null ? new byte[0] : reason.getBytes(StandardCharsets.UTF_8);
        int length = Math.min(text.length, ABORT_BYTES - 4);
        for (Peer p : peers) {
            if (p == null || p.qp == null) {
                continue;
            }
            try {
                if (p.qp.state() == QueuePairState.READY_TO_SEND && p.sendsOutstanding < sendDepth - 1) {
                    sendAbortNotice(p, originRank, text, length, revoke);
                }
            } catch (RuntimeException ignored) {
                // best effort: the error state below still tells the peer that this rank is gone
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

    private void sendAbortNotice(Peer p, int originRank, byte[] text, int length, boolean revoke) {
        MemorySegment h = p.headers.segment();
        long at = (long) slots * Signature.BYTES + CTS_SLOTS * CTS_BYTES;
        h.set(ValueLayout.JAVA_INT_UNALIGNED, at, length);
        MemorySegment.copy(text, 0, h, ValueLayout.JAVA_BYTE, at + 4, length);
        // its own work request: abort() may run on any thread while an operation's thread uses the shared one
        SendWorkRequest notice = new SendWorkRequest(1);
        boolean inline = 4 + length <= p.device.inlineBytes();
        notice.wrId(((long) p.rank << 32) | WR_NOTICE).opcode(SendOpcode.RDMA_WRITE_WITH_IMM)
            .flags(inline ? SendFlag.SIGNALED | SendFlag.INLINE : SendFlag.SIGNALED)
            .remote(p.remoteInboxAddress + abortBoxOffset(p), p.remoteInboxRkey)
            .immediateData((IMM_WINDOW << 30) | IMM_ABORT_NOTICE | (revoke ? IMM_REVOKE_NOTICE : 0)
                | (originRank & 0xFF_FFFF))
            .local(p.headers, at, 4 + length);
        p.qp.postSend(notice);
    }

    /**
     * Adds the ranks known dead from the links to {@code into}: a peer that sent an abort notice (not a revocation)
     * names the rank its failure started with (itself, when it aborted or failed on its own); a same-host peer whose
     * process is gone. Reads volatile state only: callable while no operation runs (shrink).
     */
    public void addKnownFailed(java.util.BitSet into) {
        for (Peer p : peers) {
            if (p == null) {
                continue;
            }
            if (p.abortNotice != null && !p.revokeNotice) {
                into.set(p.abortOrigin >= 0 ? p.abortOrigin : p.rank);
            }
            if (processGone(p.rank)) {
                into.set(p.rank);
            }
        }
    }

    /**
     * The pid of {@code peerRank}'s process when it runs on this host in this PID namespace (its exit can be
     * watched: {@link io.jccl.common.ProcessExits}), else 0.
     */
    public long localPid(int peerRank) {
        Peer p = peerRank >= 0 && peerRank < peers.length ? peers[peerRank] : null;
        return p == null || !p.sameHost || p.pid <= 0 || p.pid == ProcessIds.self() ? 0 : p.pid;
    }

    /** Records that {@code peerRank}'s process exited (the kernel said so: {@link io.jccl.common.ProcessExits}). */
    public void markExited(int peerRank) {
        Peer p = peerRank >= 0 && peerRank < peers.length ? peers[peerRank] : null;
        if (p != null) {
            p.exited = true;
        }
    }

    /** Whether {@code peerRank} runs on this host and its process is gone (a kill -9 seen without any traffic). */
    public boolean processGone(int peerRank) {
        Peer p = peerRank >= 0 && peerRank < peers.length ? peers[peerRank] : null;
        if (p == null || !p.sameHost || p.pid <= 0 || p.pid == ProcessIds.self()) {
            return false;
        }
        // the kernel's word first: an exited process stays "alive" by pid until its parent reaps it (a loaded
        // parent took 25-50 ms here)
        return p.exited || !ProcessHandle.of(p.pid).map(ProcessHandle::isAlive).orElse(false);
    }

    /** The revocation a peer's notice announced, as the error to throw, or null when no peer sent one. */
    public CollectiveException.Revoked revokedBy() {
        for (Peer p : peers) {
            if (p != null && p.abortNotice != null && p.revokeNotice) {
                return revoked(p);
            }
        }
        return null;
    }

    private CollectiveException.Revoked revoked(Peer p) {
        int origin = p.abortOrigin;
        String reason = p.abortNotice;
        return new CollectiveException.Revoked(origin, reason, "rank " + rank + ": the communicator was revoked by rank "
            + origin + (origin != p.rank ? " (notice relayed by rank " + p.rank + ")" : "") + ": " + reason);
    }

    /** One line per peer: device, why, direct mapping, the flow-control counters, a failure (for dumps). */
    public List<String> describePeers() {
        List<String> lines = new ArrayList<>();
        for (Peer p : peers) {
            if (p != null) {
                lines.add("rank " + p.rank + ": " + p.device.name() + " (" + p.reason + ")" + (p.directlyMapped()
                    ? ", direct load/store" : "") + "; sent " + p.sent + " credited " + p.credited + " arrived "
                    + p.arrived + " consumed " + p.consumed + (p.failure != null ? "; FAILED: " + p.failure : ""));
            }
        }
        return lines;
    }

    /**
     * Waits, at most {@code budgetNs}, until every posted send has completed, above all the inline ones that no
     * exchange waited for: a provider may still hold such a message (a tcp QP whose socket was full at post time
     * keeps it in its send queue), and closing the QP would drop it while the peer waits for it. Stops at the
     * first error (a peer that is gone gets nothing more from us anyway).
     */
    public void drainSends(long budgetNs) {
        long deadline = System.nanoTime() + budgetNs;
        BackoffIdleStrategy idle = new BackoffIdleStrategy();
        try {
            while (anySendOutstanding() && System.nanoTime() - deadline < 0) {
                idle.idle(poll());
            }
        } catch (RuntimeException e) {
            Log.get().info(rank, Log.Subsys.NET, () -> "close: outstanding sends not drained (" + e.getMessage() + ")");
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

    /** Closes the caches of send sources (before the allocations they may point into are freed). */
    public void closeSourceCaches() {
        for (DeviceResources d : deviceArray) {
            closeQuietly(d.sources);
            d.sources = null;
        }
    }

    /**
     * Drains outstanding sends, then closes every queue pair and inbox; the devices stay open until
     * {@link #closeDevices}, since the direct path's regions live in them.
     */
    @Override
    public void close() {
        drainSends(DRAIN_NS);
        for (DeviceResources d : deviceArray) {
            closeQuietly(d.destinations);
            d.destinations = null;
        }
        for (Peer p : peers) {
            if (p == null) {
                continue;
            }
            closeQuietly(p.qp);
            closeQuietly(p.inbox);
            closeQuietly(p.headers);
        }
    }

    /** Closes every device (and whatever is left in them). */
    public void closeDevices() {
        for (DeviceResources d : deviceArray) {
            d.close();
        }
    }

    /** Closes {@code c} if not null, ignoring errors (clean-up paths). */
    public static void closeQuietly(AutoCloseable c) {
        if (c == null) {
            return;
        }
        try {
            c.close();
        } catch (Exception ignored) {
            // closing
        }
    }
}
