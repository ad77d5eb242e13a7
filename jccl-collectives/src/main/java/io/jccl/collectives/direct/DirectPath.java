package io.jccl.collectives.direct;

import io.jccl.collectives.CollectiveException;
import io.jccl.collectives.core.WaitPolicy;
import io.jccl.collectives.memory.Allocations;
import io.jccl.collectives.message.DeviceResources;
import io.jccl.collectives.message.MessagePath;
import io.jccl.collectives.message.Peer;
import io.jccl.collectives.store.Store;
import io.jccl.common.Log;
import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.VerbsException;

import java.lang.foreign.MemorySegment;
import java.util.HashMap;
import java.util.Map;

/**
 * The direct path: when every rank of a communicator shares one host and one device that maps remote memory
 * ({@code QueuePair.mapRemote}), each rank exposes a control block ({@link ControlBlockFlyweight}) and a staging
 * buffer of two halves, maps its peers' read-only, and the direct algorithms meet at flag barriers
 * ({@link DirectBarrier}) and load and store each other's buffers instead of sending messages. Inputs in
 * {@code Communicator.allocate} memory are published by id and read where they are (zero copy).
 *
 * <p>State of the current direct operation lives here too: the barrier epoch (selects descriptors and records by
 * parity), the staging round (selects the half) and the reduction kernels' source arrays. Only the thread running
 * the current operation touches it.
 */
public final class DirectPath implements AutoCloseable {
    private final int rank;
    private final int size;
    private final MessagePath messagePath;
    private final Store store;
    private final long timeoutNs;
    /** A peer whose heartbeat has not moved for this long is failed (JCCL_PEER_TIMEOUT). */
    private final long peerTimeoutNs;
    /** Per peer: its heartbeat when last read, and when (local nanoTime) it was last seen to move (0: not yet). */
    private final long[] peerBeat;
    private final long[] peerBeatMovedNs;
    /** Per peer: this rank's own heartbeat when the peer's was last seen to move. */
    private final long[] ownBeatWhenMoved;
    private final MemoryRegion control;
    private final ControlBlockFlyweight self = new ControlBlockFlyweight();
    private final MemoryRegion staging;
    private final long stagingBytes;
    private final ControlBlockFlyweight[] peerControl;
    private final MemorySegment[] peerStaging;
    private final Map<Integer, MemorySegment>[] mapped;
    private final Map<Integer, MemorySegment>[] mappedWritable;
    private final WaitPolicy waits;
    private boolean enabled;
    /** Barrier epoch (selects descriptors and records by parity) and staging round (selects the half). */
    long epoch;
    long round;
    /** Scratch for the kernels: sources of every rank and their offsets; outputs of every rank and theirs. */
    final MemorySegment[] sources;
    final long[] sourceOffsets;
    final MemorySegment[] outputs;
    final long[] outputOffsets;
    final long[] blockOffsets;

    /**
     * Allocates this rank's control block and a staging buffer of two halves of {@code stagingBytes} on
     * {@code device}, for {@code rank} among {@code size} ranks whose message path is {@code messagePath}; the
     * store publishes allocations ({@link #publishAllocation}); the barriers wait with {@code waits}. A peer whose
     * heartbeat stands still for {@code peerTimeoutNs} is failed.
     */
    @SuppressWarnings("unchecked")
    public DirectPath(int rank, int size, DeviceResources device, long stagingBytes, MessagePath messagePath,
                      Store store, long timeoutNs, long peerTimeoutNs, WaitPolicy waits) {
        this.rank = rank;
        this.waits = waits;
        this.size = size;
        this.messagePath = messagePath;
        this.store = store;
        this.timeoutNs = timeoutNs;
        this.peerTimeoutNs = peerTimeoutNs;
        this.peerBeat = new long[size];
        this.peerBeatMovedNs = new long[size];
        this.ownBeatWhenMoved = new long[size];
        this.stagingBytes = stagingBytes;
        control = device.protectionDomain().allocateMemory(ControlBlockFlyweight.LENGTH, AccessFlag.LOCAL_WRITE,
            AccessFlag.REMOTE_READ, AccessFlag.REMOTE_WRITE);
        try {
            staging = device.protectionDomain().allocateMemory(2 * stagingBytes, AccessFlag.LOCAL_WRITE,
                AccessFlag.REMOTE_READ, AccessFlag.REMOTE_WRITE);
        } catch (RuntimeException e) {
            control.close();
            throw e;
        }
        self.wrap(control.segment());
        Heartbeat.register(self, peerTimeoutNs);
        peerControl = new ControlBlockFlyweight[size];
        peerStaging = new MemorySegment[size];
        mapped = new Map[size];
        mappedWritable = new Map[size];
        for (int j = 0; j < size; j++) {
            mapped[j] = new HashMap<>();
            mappedWritable[j] = new HashMap<>();
        }
        sources = new MemorySegment[size];
        sourceOffsets = new long[size];
        outputs = new MemorySegment[size];
        outputOffsets = new long[size];
        blockOffsets = new long[size];
    }

    // ------------------------------------------------------------------------------------------------ setup

    /**
     * What this rank adds to its endpoint record for each peer: its control block's and staging's address and rkey,
     * and the staging length (hex, space-separated, each field preceded by a space).
     */
    public String localRecord() {
        return " " + Long.toHexString(control.address()) + ' ' + Integer.toHexString(control.rkey()) + ' '
            + Long.toHexString(staging.address()) + ' ' + Integer.toHexString(staging.rkey()) + ' '
            + staging.length();
    }

    /**
     * Maps peer {@code p}'s control block and staging from fields 3-7 of its endpoint record; returns whether it
     * could (the record offers them and the queue pair supports direct access).
     */
    public boolean map(Peer p, String[] record) {
        if (record.length < 8 || !p.queuePair().supportsDirectAccess()) {
            return false;
        }
        try {
            MemorySegment c = p.queuePair().mapRemote(Long.parseUnsignedLong(record[3], 16),
                ControlBlockFlyweight.LENGTH, Integer.parseUnsignedInt(record[4], 16), false);
            MemorySegment s = p.queuePair().mapRemote(Long.parseUnsignedLong(record[5], 16),
                Long.parseLong(record[7]), Integer.parseUnsignedInt(record[6], 16), false);
            peerControl[p.rank()] = new ControlBlockFlyweight().wrap(c);
            peerStaging[p.rank()] = s;
            p.markDirectlyMapped(true);
            return true;
        } catch (VerbsException e) {
            Log.get().info(rank, Log.Subsys.INIT, () -> "no direct access to rank " + p.rank() + "'s memory: "
                + e.getMessage());
            return false;
        }
    }

    /**
     * Turns the path on when every rank mapped every peer ({@code allMapped}). Either way the message path's health
     * checks from now on also read the status words of the peers that were mapped.
     */
    public void enable(boolean allMapped) {
        this.enabled = allMapped;
        messagePath.addPeerCheck(new StatusCheck());
    }

    /** Whether every rank mapped every peer: the direct algorithms may run. */
    public boolean enabled() {
        return enabled;
    }

    /** Bytes of one staging half (what a rank exposes per round). */
    public long stagingBytes() {
        return stagingBytes;
    }

    int rank() {
        return rank;
    }

    int size() {
        return size;
    }

    WaitPolicy waits() {
        return waits;
    }

    MessagePath messagePath() {
        return messagePath;
    }

    // ------------------------------------------------------------------------------------------------ blocks

    /** This rank's control block. */
    ControlBlockFlyweight self() {
        return self;
    }

    /** Rank {@code r}'s control block (this rank's own for {@code r == rank}). */
    ControlBlockFlyweight control(int r) {
        return r == rank ? self : peerControl[r];
    }

    /** Rank {@code r}'s staging buffer (both halves). */
    MemorySegment staging(int r) {
        return r == rank ? staging.segment() : peerStaging[r];
    }

    /** Offset of the current round's staging half. */
    long half() {
        return (round & 1) * stagingBytes;
    }

    /** Parity of the epoch the next barrier publishes (its descriptors and record). */
    int nextParity() {
        return (int) ((epoch + 1) & 1);
    }

    /**
     * Publishes this rank's input for the next barrier: zero copy ({@code where} in an allocation, peers read it
     * there) or, with {@code where} null, {@code bytes} of {@code in} at {@code inOffset} copied into the staging
     * half. Returns the descriptors' parity.
     */
    int publishInput(Allocations.Slice where, long allocationOffsetDelta, MemorySegment in, long inOffset,
                     long bytes) {
        int parity = nextParity();
        if (where != null) {
            self.inputInAllocation(parity, where.id(), where.offset() + allocationOffsetDelta);
        } else {
            self.inputStaged(parity);
            MemorySegment.copy(in, inOffset, staging.segment(), half(), bytes);
        }
        return parity;
    }

    /** Peer {@code p}'s input as its descriptor of {@code parity} gives it (after the barrier): its allocation, or its staging. */
    MemorySegment peerInput(int p, int parity) {
        ControlBlockFlyweight c = peerControl[p];
        if (c.inputIsAllocation(parity)) {
            return mappedAllocation(p, c.inputAllocationId(parity), false);
        }
        return peerStaging[p];
    }

    /** Where peer {@code p}'s input starts in {@link #peerInput}'s segment. */
    long peerInputOffset(int p, int parity) {
        ControlBlockFlyweight c = peerControl[p];
        return c.inputIsAllocation(parity) ? c.inputOffset(parity) : half();
    }

    /** Whether every peer published its input of {@code parity} as an allocation. */
    boolean allPeersZeroCopy(int parity) {
        for (int j = 0; j < size; j++) {
            if (j != rank && !peerControl[j].inputIsAllocation(parity)) {
                return false;
            }
        }
        return true;
    }

    // ------------------------------------------------------------------------------------------------ allocations

    /** Publishes allocation {@code id} of this rank, so that peers can map it on first use. */
    public void publishAllocation(int id, MemoryRegion r) {
        store.setString("mr/" + rank + "/" + id, Long.toHexString(r.address()) + " " + Integer.toHexString(r.rkey())
            + " " + r.length(), timeoutNs);
    }

    /** Peer {@code p}'s allocation {@code id}, mapped once per kind (read-only or writable; looked up in the store). */
    MemorySegment mappedAllocation(int p, int id, boolean writable) {
        Map<Integer, MemorySegment> maps = writable ? mappedWritable[p] : mapped[p];
        MemorySegment m = maps.get(id);
        if (m == null) {
            long deadlineNs = waits.deadline();
            String[] f = store.getString("mr/" + p + "/" + id, Math.max(1, deadlineNs - System.nanoTime())).split(" ");
            Peer peer = messagePath.peer(p);
            try {
                m = peer.queuePair().mapRemote(Long.parseUnsignedLong(f[0], 16), Long.parseLong(f[2]),
                    Integer.parseUnsignedInt(f[1], 16), writable);
            } catch (RuntimeException e) {
                throw messagePath.peerFailed(peer, "cannot map rank " + p + "'s buffer: " + e.getMessage());
            }
            maps.put(id, m);
        }
        return m;
    }

    // ------------------------------------------------------------------------------------------------ health

    /** The direct part of a peer's health: its status word (and whether its memory is still there). */
    private void checkStatus(Peer p) {
        ControlBlockFlyweight c = peerControl[p.rank()];
        long status;
        try {
            status = c == null ? 0 : c.status();
        } catch (IllegalStateException e) {
            throw messagePath.peerFailed(p, "rank " + p.rank() + "'s shared memory went away (it closed, aborted or "
                + "died)");
        }
        if (status != 0) {
            int origin = ControlBlockFlyweight.abortOrigin(status);
            String reason = c.abortReason();
            if (ControlBlockFlyweight.revoked(status)) {
                throw new CollectiveException.Revoked(origin, reason, "rank " + rank + ": the communicator was revoked"
                    + " by rank " + origin + (origin != p.rank() ? " (status word of rank " + p.rank() + ")" : "")
                    + ": " + reason);
            }
            String message = "rank " + p.rank() + " aborted its communicator: " + reason;
            if (origin >= 0 && origin != p.rank() && origin < size) {
                messagePath.peerFailed(p, message); // recorded for p; the error names the origin
                throw new CollectiveException.PeerFailure(origin, "rank " + origin + " failed first;"
                    + " rank " + p.rank() + " gave up because of it: " + reason);
            }
            throw messagePath.peerFailed(p, message);
        }
        checkHeartbeat(p, c);
    }

    /**
     * Fails {@code p} when its heartbeat has stood still for the peer timeout while this process's own heartbeat
     * thread kept running (at least {@link #OWN_BEATS} beats): p's process is not running (stopped, frozen,
     * starved). A pause of this process, or of the whole host, stops both and blames nobody.
     */
    private void checkHeartbeat(Peer p, ControlBlockFlyweight c) {
        if (c == null) {
            return;
        }
        int r = p.rank();
        long beat = c.heartbeat();
        long own = self.heartbeat();
        long now = System.nanoTime();
        if (peerBeatMovedNs[r] == 0 || beat != peerBeat[r]) {
            peerBeat[r] = beat;
            peerBeatMovedNs[r] = now;
            ownBeatWhenMoved[r] = own;
        } else if (now - peerBeatMovedNs[r] > peerTimeoutNs && own - ownBeatWhenMoved[r] >= OWN_BEATS) {
            throw messagePath.peerFailed(p, "rank " + r + " has not run for " + (now - peerBeatMovedNs[r]) / 1_000_000
                + " ms (process stopped, frozen in a pause or starved of CPU; JCCL_PEER_TIMEOUT is "
                + peerTimeoutNs / 1_000_000 + " ms)");
        }
    }

    /** Beats of this process (half a peer timeout) that must be seen while a peer's heartbeat stands still. */
    static final int OWN_BEATS = 4;

    /** The revocation a peer's status word announces, as the error to throw, or null when none does. */
    public CollectiveException.Revoked revokedBy() {
        for (int r = 0; r < size; r++) {
            ControlBlockFlyweight c = peerControl[r];
            try {
                long status = c == null ? 0 : c.status();
                if (ControlBlockFlyweight.revoked(status)) {
                    int origin = ControlBlockFlyweight.abortOrigin(status);
                    String reason = c.abortReason();
                    return new CollectiveException.Revoked(origin, reason, "rank " + rank + ": the communicator was"
                        + " revoked by rank " + origin + ": " + reason);
                }
            } catch (IllegalStateException e) {
                // its memory went away: not a revocation this rank can read
            }
        }
        return null;
    }

    /** {@link #checkStatus} as a named class: a method reference would be spun into a class at start-up. */
    private final class StatusCheck implements MessagePath.PeerCheck {
        @Override
        public void check(Peer p) {
            checkStatus(p);
        }
    }

    /**
     * Marks this rank aborted for its peers, because of rank {@code originRank} (this rank, or the peer it lost)
     * and {@code reason}, before the message path breaks the links.
     */
    public void markAborted(int originRank, String reason) {
        markAborted(originRank, reason, false);
    }

    /** {@link #markAborted(int, String)}, as a revocation by {@code originRank} when {@code revoke}. */
    public void markAborted(int originRank, String reason, boolean revoke) {
        try {
            if (control.isValid()) {
                self.markAborted(originRank, reason, revoke);
            }
        } catch (RuntimeException ignored) {
            // already released
        }
    }

    @Override
    public void close() {
        Heartbeat.unregister(self);
        MessagePath.closeQuietly(control);
        MessagePath.closeQuietly(staging);
    }
}
