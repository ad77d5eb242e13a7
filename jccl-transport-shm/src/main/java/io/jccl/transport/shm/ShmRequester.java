package io.jccl.transport.shm;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.Counter;
import io.jccl.verbs.RnrTimer;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.WorkCompletionOpcode;
import io.jccl.verbs.WorkCompletionStatus;
import io.jccl.verbs.spi.CounterSet;
import io.jccl.verbs.spi.SendSlot;
import io.jccl.verbs.spi.SoftMemoryRegion;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;

import static io.jccl.transport.shm.QueuePairFile.*;

/**
 * The requester role of an shm queue pair, as rxe's {@code rxe_req} and UCX's shm put: executes send-queue slots
 * itself, in the thread that drives the queue pair, straight against the peer's memory. WRITE and READ are one copy
 * into or out of the peer's mapped region file (or a cross-memory-attach copy for private memory), atomics are
 * VarHandle CAS / getAndAdd on that mapping (or a locked read-modify-write by CMA), and SEND claims a receive
 * descriptor the peer published in its queue-pair file and copies the message straight into the described buffers.
 *
 * <p>It makes the responder's checks itself, against the peer's tables in shared memory: its rkey table (key valid,
 * range, permission), its qp_access_flags and its state word. Violations complete the request with the status an
 * RC responder's NAK produces and set the peer's state word to ERR. Requests that must wait (RNR, a peer not yet in
 * RTR) say so and stay at the head of the send queue.
 *
 * <p>It owns what it needs of the peer: the {@link PeerLink} (the peer's files, key table and the cache of its
 * region mappings), whether the peer process lives (its lock: the 1 ms probe on requests, the 100 ms check of
 * polls) and cross-memory attach, made at first use. The send-queue ring is the base class's,
 * driven by {@link ShmQueuePair}; everything here runs under the queue pair's lock.
 */
final class ShmRequester {
    private static final VarHandle LONG = ShmKeyTable.LONG;
    private static final long LIVENESS_INTERVAL_NS = 100_000_000L;
    private static final long SWEEP_INTERVAL_NS = 1_000_000_000L;
    private static final long PEER_WAIT_POLL_NS = 20_000L;
    /** How stale the request path's lock probe may be: a peer that died is noticed by the first request after. */
    private static final long FAST_LIVENESS_INTERVAL_NS = 1_000_000L;

    /** Request finished (completed successfully or with an error). */
    private static final long FINISHED = -2;
    /** Request must wait (RNR or peer not ready); retried later. */
    private static final long BLOCKED = -1;

    private final ShmQueuePair qp;
    private final int queuePairNumber;
    private final Arena arena;
    /** The queue pair's share of the context's counters (every update under the QP lock, so no atomics). */
    private final CounterSet.Local counters;
    /**
     * Cross-memory attach, made at first use: its FFM state (the errno capture layout) costs a rank milliseconds of
     * start-up, and a job on the direct path may never need it.
     */
    private volatile CrossMemoryAttach cma;
    private final Object lazyLock = new Object();
    private final ShmKeyTable.Entry remoteEntry = new ShmKeyTable.Entry();
    private final ShmKeyTable.Entry scratchEntry = new ShmKeyTable.Entry();
    /** Native scratch for the original value of an atomic on private memory (read by cross-memory attach). */
    private final MemorySegment atomicScratch;

    private PeerLink peer;
    private boolean peerDead;
    private long lastLivenessCheckNs;
    private long lastSweepNs;
    private long lastFastLivenessCheckNs;
    /** Resolved target of the current one-sided request: the peer's mapping (file kind) or null (private). */
    private MemorySegment targetMapping;
    private long targetOffset;
    private int targetSlot;
    private int targetRkey;
    /** Receive index claimed at the peer by the running request and not yet published, or -1. */
    private long claimedReceive = -1;
    /** Sink of {@link #prefetchDescriptor} loads. */
    private long prefetchSink;

    /**
     * Creates the requester of {@code qp} (allocates its atomic scratch word; nothing native yet).
     *
     * @param qp the queue pair whose send queue this executes
     * @param arena the queue pair's arena (the atomic scratch word, the native calls' state)
     * @param counters the queue pair's share of the context's counters
     */
    ShmRequester(ShmQueuePair qp, Arena arena, CounterSet.Local counters) {
        this.qp = qp;
        this.queuePairNumber = qp.queuePairNumber();
        this.arena = arena;
        this.counters = counters;
        this.atomicScratch = arena.allocate(8, 8);
    }

    // ------------------------------------------------------------------------------------------------ the peer

    /** The peer this QP is connected to, or null (before INIT→RTR, after RESET or destroy). */
    PeerLink peer() {
        return peer;
    }

    /** Takes over the link made at INIT→RTR (closing an earlier one) and restarts the liveness timer. */
    void connect(PeerLink link) {
        if (peer != null) {
            peer.close();
        }
        peer = link;
        peerDead = false;
        lastLivenessCheckNs = System.nanoTime();
    }

    /** Unmaps the peer's files (RESET, destroy). */
    void disconnect() {
        if (peer != null) {
            peer.close();
            peer = null;
        }
    }

    /**
     * The liveness timer of a poll: true when the 100 ms check is due and the peer is dead (found now, or
     * earlier), so that what waits on it fails instead of hanging.
     */
    boolean peerFoundDead(long now) {
        if (now - lastLivenessCheckNs >= LIVENESS_INTERVAL_NS) {
            checkLiveness(now);
            return peerDead;
        }
        return false;
    }

    /** Whether the sweep of the peer-region cache is due (about once a second); small enough to inline. */
    boolean sweepDue(long now) {
        return now - lastSweepNs >= SWEEP_INTERVAL_NS;
    }

    /** Unmaps the peer regions whose key-table entry was revoked (see docs, Revocation); restarts the timer. */
    void sweep(long now) {
        lastSweepNs = now;
        if (peer != null) {
            peer.regions.sweep(peer.keys, scratchEntry);
        }
    }

    /**
     * Whether the peer may still finish a receive it claimed: there is no link to judge by, or its process still
     * holds its lock (one {@code fcntl}, see {@link LockProbe}).
     */
    boolean peerMayBeAlive() {
        return peer == null || peerLives(peer);
    }

    /**
     * Whether the peer process lives, by its lock: the probe's answer, or when it cannot tell, the slower Java
     * check (a lock that cannot be judged at all counts as alive).
     */
    private static boolean peerLives(PeerLink link) {
        int answer = link.liveness.probe();
        return answer == LockProbe.ALIVE
            || answer == LockProbe.UNKNOWN && OwnerLock.check(ShmFiles.DIRECTORY, link.pid, link.ownerId)
            != OwnerLock.Owner.DEAD;
    }

    private boolean checkLiveness(long now) {
        if (peer == null) {
            return false;
        }
        if (!peerDead && now - lastLivenessCheckNs >= LIVENESS_INTERVAL_NS) {
            lastLivenessCheckNs = now;
            if (!peerLives(peer)) {
                peerFailed();
            }
        }
        return !peerDead;
    }

    /**
     * The peer's lock is free: it is dead. Its files go now (once per dead process, however many queue pairs
     * find it), rather than when some later process happens to open the device.
     */
    private void peerFailed() {
        peerDead = true;
        counters.increment(Counter.LINK_DOWNED);
        ShmFiles.reapOwner(peer.pid, peer.ownerId);
    }

    private CrossMemoryAttach cma() {
        CrossMemoryAttach c = cma;
        if (c == null) {
            synchronized (lazyLock) {
                c = cma;
                if (c == null) {
                    c = new CrossMemoryAttach(arena);
                    cma = c;
                }
            }
        }
        return c;
    }

    // ------------------------------------------------------------------------------------------------ execution

    /**
     * Runs the request at the head of the send queue (must hold the lock).
     *
     * @return false when it must wait (RNR, peer not ready): it stays at the head with its {@code notBeforeNs}
     */
    boolean run(SendSlot slot) {
        boolean finished;
        try {
            finished = execute(slot);
        } catch (IllegalStateException | IndexOutOfBoundsException e) {
            // A local region was deregistered (its mapping closed) while this request used it: the request
            // fails as a local protection error instead of leaving the queue half-updated. A receive it had
            // claimed at the peer is completed too (the peer goes to ERR), so the peer never waits on it.
            if (claimedReceive >= 0 && peer != null) {
                publishResult(claimedReceive, WorkCompletionStatus.WR_FLUSH_ERR, WorkCompletionOpcode.RECV, 0, 0,
                    false);
                peer.markError();
            }
            qp.completeRequest(WorkCompletionStatus.LOC_PROT_ERR, 0);
            finished = true;
        }
        claimedReceive = -1;
        return finished;
    }

    /** Runs the request at the head; false when it must wait. */
    private boolean execute(SendSlot slot) {
        PeerLink link = peer;
        int peerState = link.state();
        long now = System.nanoTime();
        if (now - lastFastLivenessCheckNs >= FAST_LIVENESS_INTERVAL_NS) {
            // One cheap syscall at most per millisecond: requests in a tight loop pay ~nothing, while the first
            // request after a pause (the usual case after a crash) sees a peer that is gone.
            lastFastLivenessCheckNs = now;
            if (!peerDead && link.liveness.probe() == LockProbe.DEAD) {
                peerFailed();
            }
        }
        if (peerDead || peerState == S_ERR || peerState == S_DESTROYED) {
            // As a hardware requester whose peer stopped answering: transport retries exhausted. What the peer sent
            // and saw complete before it went is ours first, as on a wire where its messages arrived before our
            // retries ran out: without this the failure reached the CQ before the peer's last message (its goodbye).
            qp.deliverPublishedReceives();
            counters.increment(Counter.LOCAL_ACK_TIMEOUT_ERR);
            qp.completeRequest(WorkCompletionStatus.RETRY_EXC_ERR, 0);
            return true;
        }
        if (!QueuePairFile.isResponding(peerState)) {
            return waitForPeer(slot);
        }
        return switch (slot.opcode) {
            case RDMA_WRITE -> write(slot, false);
            case RDMA_WRITE_WITH_IMM -> write(slot, true);
            case SEND, SEND_WITH_IMM -> send(slot);
            case RDMA_READ -> read(slot);
            case ATOMIC_CMP_AND_SWP, ATOMIC_FETCH_AND_ADD -> atomic(slot);
        };
    }

    /**
     * The peer QP exists but is not yet in RTR (RESET/INIT): a hardware requester retransmits until the local ACK
     * timeout × (retry_cnt + 1) passes, then fails with RETRY_EXC_ERR. Timeout code 0 waits as long as the peer
     * process lives.
     */
    private boolean waitForPeer(SendSlot slot) {
        long now = System.nanoTime();
        if (slot.progress == 0) {
            long timeoutNs = RnrTimer.ackTimeoutNs(qp.ackTimeout());
            slot.progress = timeoutNs == 0 ? Long.MAX_VALUE : now + timeoutNs * (qp.retryCount() + 1);
        } else if (slot.progress != Long.MAX_VALUE && now - slot.progress >= 0) {
            counters.increment(Counter.LOCAL_ACK_TIMEOUT_ERR);
            qp.completeRequest(WorkCompletionStatus.RETRY_EXC_ERR, 0);
            return true;
        }
        if (!checkLiveness(now)) {
            qp.completeRequest(WorkCompletionStatus.RETRY_EXC_ERR, 0);
            return true;
        }
        slot.notBeforeNs = now + PEER_WAIT_POLL_NS;
        return false;
    }

    private boolean finish(SendSlot slot, long byteLength) {
        counters.add(Counter.PORT_XMIT_DATA, slot.length);
        counters.increment(Counter.PORT_XMIT_PACKETS);
        qp.completeRequest(WorkCompletionStatus.SUCCESS, (int) byteLength);
        return true;
    }

    private boolean fail(WorkCompletionStatus status) {
        qp.completeRequest(status, 0);
        return true;
    }

    /** A responder-side violation: the requester completes with {@code status}, both QPs go to ERR. */
    private boolean remoteError(WorkCompletionStatus status) {
        if (status == WorkCompletionStatus.REM_ACCESS_ERR) {
            counters.increment(Counter.REQ_REMOTE_ACCESS_ERRORS);
            peer.keys.countForOwner(ShmKeyTable.COUNTER_REMOTE_ACCESS_ERRORS); // the responder "detected" it
        }
        peer.markError();
        qp.completeRequest(status, 0);
        return true;
    }

    private boolean peerAccepts(AccessFlag flag) {
        return flag.isSetIn(peer.accessFlags());
    }

    /**
     * Responder check and address translation of a one-sided request: fills {@link #targetMapping} and
     * {@link #targetOffset} (file kind) or sets targetMapping null and targetOffset to the owner's address
     * (private kind, reached by cross-memory attach).
     */
    private boolean resolveRemote(int rkey, long remoteAddress, long length, AccessFlag needed) {
        ShmKeyTable.Entry entry = remoteEntry;
        if (!peer.keys.lookup(rkey, entry) || entry.domainId != peer.domainId || !entry.contains(remoteAddress, length)
            || !needed.isSetIn(entry.access)) {
            return false;
        }
        if (entry.kind == ShmKeyTable.KIND_FILE) {
            MemorySegment mapping = peer.regions.map(entry.fileId, entry.fileSize(), entry.slot, entry.rkey);
            if (mapping == null) {
                return false; // revoked between the lookup and the open
            }
            targetMapping = mapping;
            targetOffset = entry.fileOffset + (remoteAddress - entry.address);
            return true;
        }
        if (entry.kind == ShmKeyTable.KIND_PRIVATE && privateMemoryReachable(peer)) {
            targetMapping = null;
            targetOffset = remoteAddress;
            targetSlot = entry.slot;
            targetRkey = entry.rkey;
            return true;
        }
        return false;
    }

    /**
     * Whether the peer's private (registered) memory can be reached: cross-memory attach is available and the peer
     * shares this PID namespace, so that its pid names it here. A peer in another PID namespace (another container
     * sharing /dev/shm) gets REM_ACCESS_ERR instead of a copy into whatever process has that pid here.
     */
    private static boolean privateMemoryReachable(PeerLink link) {
        return link.samePidNamespace && CrossMemoryAttach.unavailable() == null;
    }

    /** Status for a failed cross-memory-attach copy: a vanished process is a dead peer, anything else an access. */
    private boolean cmaFailure(int errno) {
        if (errno == CrossMemoryAttach.ESRCH) {
            peerDead = true;
            return fail(WorkCompletionStatus.RETRY_EXC_ERR);
        }
        return remoteError(WorkCompletionStatus.REM_ACCESS_ERR);
    }

    // ------------------------------------------------------------------------------------------------ operations

    private boolean write(SendSlot slot, boolean withImmediate) {
        if (!qp.localEntriesValid(slot, false)) {
            return fail(WorkCompletionStatus.LOC_PROT_ERR);
        }
        if (!peerAccepts(AccessFlag.REMOTE_WRITE)) {
            return remoteError(WorkCompletionStatus.REM_INV_REQ_ERR);
        }
        long length = slot.length;
        if (length > 0 && !resolveRemote(slot.rkey, slot.remoteAddress, length, AccessFlag.REMOTE_WRITE)) {
            return remoteError(WorkCompletionStatus.REM_ACCESS_ERR);
        }
        long index = 0;
        if (withImmediate) {
            // The receive is claimed before the data moves, so an RNR leaves the target untouched.
            index = claimReceive(slot);
            if (index < 0) {
                return index == FINISHED;
            }
        }
        if (length > 0) {
            if (targetMapping != null) {
                qp.gatherInto(slot, 0, targetMapping, targetOffset, length);
            } else {
                int errno = peer.keys.enter(targetSlot, targetRkey, scratchEntry)
                    ? gatherToPrivateAndExit(slot, 0, targetOffset, length, targetSlot) : CrossMemoryAttach.EFAULT;
                if (errno != 0) {
                    if (withImmediate) {
                        publishResult(index, WorkCompletionStatus.LOC_PROT_ERR, WorkCompletionOpcode.RECV, 0, 0,
                            false);
                    }
                    return cmaFailure(errno);
                }
            }
        }
        if (withImmediate) {
            // Release store of done: the data above (and of every earlier WRITE) is visible before the completion.
            publishResult(index, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV_RDMA_WITH_IMM, length,
                slot.immediateData, true);
        }
        return finish(slot, length);
    }

    private boolean read(SendSlot slot) {
        if (!qp.localEntriesValid(slot, true)) {
            return fail(WorkCompletionStatus.LOC_PROT_ERR);
        }
        if (!peerAccepts(AccessFlag.REMOTE_READ)) {
            return remoteError(WorkCompletionStatus.REM_INV_REQ_ERR);
        }
        long length = slot.length;
        if (length > 0) {
            if (!resolveRemote(slot.rkey, slot.remoteAddress, length, AccessFlag.REMOTE_READ)) {
                    return remoteError(WorkCompletionStatus.REM_ACCESS_ERR);
            }
            if (targetMapping != null) {
                if (!qp.scatterInto(slot.sgeAddress, slot.sgeLength, slot.sgeLkey, slot.sgeCount, 0, targetMapping,
                    targetOffset, length)) {
                    return fail(WorkCompletionStatus.LOC_PROT_ERR);
                }
            } else {
                if (!peer.keys.enter(targetSlot, targetRkey, scratchEntry)) {
                    return cmaFailure(CrossMemoryAttach.EFAULT);
                }
                int errno = 0;
                long done = 0;
                for (int i = 0; i < slot.sgeCount && done < length && errno == 0; i++) {
                    long n = Math.min(slot.sgeLength[i], length - done);
                    if (n > 0) {
                        errno = cma().read(peer.pid, slot.sgeAddress[i], targetOffset + done, n);
                    }
                    done += n;
                }
                peer.keys.exit(targetSlot);
                if (errno != 0) {
                    return cmaFailure(errno);
                }
            }
        }
        return finish(slot, length);
    }

    private boolean atomic(SendSlot slot) {
        if (!qp.localEntriesValid(slot, true)) {
            return fail(WorkCompletionStatus.LOC_PROT_ERR);
        }
        if (!peerAccepts(AccessFlag.REMOTE_ATOMIC)) {
            return remoteError(WorkCompletionStatus.REM_INV_REQ_ERR);
        }
        if (!resolveRemote(slot.rkey, slot.remoteAddress, 8, AccessFlag.REMOTE_ATOMIC) || (targetOffset & 7) != 0) {
            return remoteError(WorkCompletionStatus.REM_ACCESS_ERR);
        }
        long original;
        if (targetMapping != null) {
            original = slot.opcode == SendOpcode.ATOMIC_CMP_AND_SWP
                ? (long) LONG.compareAndExchange(targetMapping, targetOffset, slot.compareAdd, slot.swap)
                : (long) LONG.getAndAdd(targetMapping, targetOffset, slot.compareAdd);
        } else {
            // Private memory: read-modify-write by cross-memory attach under the region's atomic lock.
            ShmKeyTable keys = peer.keys;
            if (!keys.enter(targetSlot, targetRkey, scratchEntry)) {
                return cmaFailure(CrossMemoryAttach.EFAULT);
            }
            int errno;
            boolean locked = keys.lockAtomic(targetSlot, (int) ShmFiles.selfPid());
            if (locked) {
                errno = cma().read(peer.pid, atomicScratch.address(), targetOffset, 8);
                original = atomicScratch.get(ValueLayout.JAVA_LONG, 0);
                if (errno == 0) {
                    boolean store = slot.opcode != SendOpcode.ATOMIC_CMP_AND_SWP || original == slot.compareAdd;
                    if (store) {
                        atomicScratch.set(ValueLayout.JAVA_LONG, 0, slot.opcode == SendOpcode.ATOMIC_CMP_AND_SWP
                            ? slot.swap : original + slot.compareAdd);
                        errno = cma().write(peer.pid, atomicScratch.address(), targetOffset, 8);
                    }
                }
                keys.unlockAtomic(targetSlot);
            } else {
                errno = 0;
                original = 0;
            }
            keys.exit(targetSlot);
            if (!locked) {
                return remoteError(WorkCompletionStatus.REM_OP_ERR); // lock held for over a second by a live peer
            }
            if (errno != 0) {
                return cmaFailure(errno);
            }
        }
        SoftMemoryRegion local = qp.checkedLocalRegion(slot.sgeAddress[0], 8, slot.sgeLkey[0], true);
        local.segment().set(ValueLayout.JAVA_LONG_UNALIGNED, slot.sgeAddress[0] - local.address(), original);
        return finish(slot, 8);
    }

    private boolean send(SendSlot slot) {
        if (!qp.localEntriesValid(slot, false)) {
            return fail(WorkCompletionStatus.LOC_PROT_ERR);
        }
        long index = claimReceive(slot);
        if (index < 0) {
            return index == FINISHED;
        }
        PeerLink link = peer;
        MemorySegment q = link.queuePairFile;
        long e = link.entryOffset(index);
        long length = slot.length;
        long capacity = q.get(ValueLayout.JAVA_LONG, e + E_TOTAL);
        int flags = q.get(ValueLayout.JAVA_INT, e + E_FLAGS);
        if (length > capacity) {
            // Receiver: LOC_LEN_ERR; sender: the responder's invalid-request NAK. Both QPs go to ERR.
            publishResult(index, WorkCompletionStatus.LOC_LEN_ERR, WorkCompletionOpcode.RECV, 0, 0, false);
            return remoteError(WorkCompletionStatus.REM_INV_REQ_ERR);
        }
        if ((flags & FLAG_BAD_LKEY) != 0) {
            return receiverProtectionError(index);
        }
        int sgeCount = Math.min(q.get(ValueLayout.JAVA_INT, e + E_SGE_COUNT), link.maxSge);
        long done = 0;
        for (int j = 0; j < sgeCount && done < length; j++) {
            long s = e + E_SGES + (long) j * SGE_SIZE;
            int kind = q.get(ValueLayout.JAVA_INT, s + S_KIND);
            long n = Math.min(q.get(ValueLayout.JAVA_INT, s + S_LENGTH) & 0xFFFF_FFFFL, length - done);
            long offset = q.get(ValueLayout.JAVA_LONG, s + S_OFFSET);
            int keySlot = q.get(ValueLayout.JAVA_INT, s + S_SLOT);
            int rkey = q.get(ValueLayout.JAVA_INT, s + S_RKEY);
            if (n <= 0) {
                continue;
            }
            // The receive buffer's region may have been deregistered since the receive was posted.
            if (!link.keys.isValid(keySlot, rkey, scratchEntry) || scratchEntry.kind != kind) {
                return receiverProtectionError(index);
            }
            if (kind == ShmKeyTable.KIND_FILE) {
                long fileId = q.get(ValueLayout.JAVA_LONG, s + S_FILE_ID);
                MemorySegment mapping = link.regions.map(fileId, scratchEntry.fileSize(), keySlot, rkey);
                if (mapping == null || offset < 0 || offset > mapping.byteSize() - n) {
                    return receiverProtectionError(index);
                }
                qp.gatherInto(slot, done, mapping, offset, n);
            } else {
                if (!privateMemoryReachable(link)) {
                    return receiverProtectionError(index);
                }
                int errno = link.keys.enter(keySlot, rkey, scratchEntry)
                    ? gatherToPrivateAndExit(slot, done, offset, n, keySlot) : CrossMemoryAttach.EFAULT;
                if (errno != 0) {
                    if (errno == CrossMemoryAttach.ESRCH) {
                        return cmaFailure(errno);
                    }
                    return receiverProtectionError(index);
                }
            }
            done += n;
        }
        publishResult(index, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV, length, slot.immediateData,
            slot.opcode == SendOpcode.SEND_WITH_IMM);
        counters.increment(Counter.RDMA_SENDS);
        prefetchDescriptor(link, index + 1);
        return finish(slot, length);
    }

    /**
     * Reads the next posted descriptor now, after this message was published, so that the next SEND finds its
     * lines in this core's cache instead of waiting on a transfer from the receiver's core. Posted descriptors
     * below the TAIL seen stay unchanged until claimed, so the read is only a cache warm-up; its value is kept in
     * a field so the JIT cannot drop the loads.
     */
    private void prefetchDescriptor(PeerLink link, long next) {
        if (next < link.tailSeen) {
            MemorySegment q = link.queuePairFile;
            long e = link.entryOffset(next);
            prefetchSink += (long) LONG.getOpaque(q, e + E_TOTAL)
                + (link.entrySize > 64 ? (long) LONG.getOpaque(q, e + 64) : 0L);
        }
    }

    /** The receive's scatter list failed its checks: receiver LOC_PROT_ERR, sender REM_OP_ERR (as rxe). */
    private boolean receiverProtectionError(long index) {
        publishResult(index, WorkCompletionStatus.LOC_PROT_ERR, WorkCompletionOpcode.RECV, 0, 0, false);
        return remoteError(WorkCompletionStatus.REM_OP_ERR);
    }

    /**
     * Claims the peer's oldest unclaimed receive descriptor.
     *
     * @return its index, {@link #BLOCKED} after scheduling an RNR retry, or {@link #FINISHED} after completing the
     *     request with an error
     */
    private long claimReceive(SendSlot slot) {
        PeerLink link = peer;
        MemorySegment q = link.queuePairFile;
        while (true) {
            long head = (long) LONG.getVolatile(q, HEAD);
            long tail = link.tailSeen;
            if (head >= tail || head < link.headSeen) {
                // Only read the receiver's TAIL line (which it writes at every post) when the receives seen are
                // used up, or when HEAD went back (the peer was reset): one cross-core transfer saved per SEND.
                tail = (long) LONG.getAcquire(q, TAIL);
                link.tailSeen = tail;
            }
            if (head >= tail) {
                return receiverNotReady(slot);
            }
            if (tail - head > peer.depth) {
                remoteError(WorkCompletionStatus.REM_OP_ERR); // corrupt ring: never trust it further
                return FINISHED;
            }
            if (LONG.compareAndSet(q, HEAD, head, head + 1)) {
                claimedReceive = head;
                link.headSeen = head + 1;
                return head;
            }
            // Lost the race to the owner's flush: it is going to ERR.
            int s = peer.state();
            if (!QueuePairFile.isResponding(s)) {
                qp.completeRequest(WorkCompletionStatus.RETRY_EXC_ERR, 0);
                return FINISHED;
            }
        }
    }

    /** RNR NAK: wait the peer's min_rnr_timer and retry, up to rnr_retry times (7 = forever). */
    private long receiverNotReady(SendSlot slot) {
        long now = System.nanoTime();
        counters.increment(Counter.RCVD_RNR_ERR);
        peer.keys.countForOwner(ShmKeyTable.COUNTER_SEND_RNR); // the responder's RNR NAK, as it would count it
        int rnrRetry = qp.rnrRetry();
        if (!slot.started) {
            slot.started = true;
            slot.rnrRetriesLeft = rnrRetry;
        }
        if (rnrRetry != 7) {
            if (slot.rnrRetriesLeft <= 0) {
                counters.increment(Counter.RNR_NAK_RETRY_ERR);
                qp.completeRequest(WorkCompletionStatus.RNR_RETRY_EXC_ERR, 0);
                return FINISHED;
            }
            slot.rnrRetriesLeft--;
        }
        if (!checkLiveness(now)) {
            qp.completeRequest(WorkCompletionStatus.RETRY_EXC_ERR, 0);
            return FINISHED;
        }
        slot.notBeforeNs = now + RnrTimer.delayNs(peer.minRnrTimer());
        return BLOCKED;
    }

    private void publishResult(long index, WorkCompletionStatus status, WorkCompletionOpcode opcode, long byteLength,
                               int immediateData, boolean withImmediate) {
        MemorySegment q = peer.queuePairFile;
        long e = peer.entryOffset(index);
        q.set(ValueLayout.JAVA_INT, e + E_STATUS, status.ordinal());
        q.set(ValueLayout.JAVA_INT, e + E_OPCODE, opcode.ordinal());
        q.set(ValueLayout.JAVA_INT, e + E_BYTE_LEN, (int) byteLength);
        q.set(ValueLayout.JAVA_INT, e + E_IMM, immediateData);
        q.set(ValueLayout.JAVA_INT, e + E_WITH_IMM, withImmediate ? 1 : 0);
        q.set(ValueLayout.JAVA_INT, e + E_SRC_QPN, queuePairNumber);
        LONG.setRelease(q, e + E_DONE, index + 1);
        claimedReceive = -1;
        peer.doorbell.ring(); // the receiver may sleep in a blocking poll
    }

    /** {@link #gatherToPrivate}, then leaves the key-table entry entered before it. */
    private int gatherToPrivateAndExit(SendSlot slot, long skip, long remoteAddress, long length, int keySlot) {
        int errno = gatherToPrivate(slot, skip, remoteAddress, length);
        peer.keys.exit(keySlot);
        return errno;
    }

    /** Copies message bytes {@code [skip, skip + length)} into the peer's private memory by cross-memory attach. */
    private int gatherToPrivate(SendSlot slot, long skip, long remoteAddress, long length) {
        if (slot.inline) {
            return cma().write(peer.pid, slot.inlineData.address() + skip, remoteAddress, length);
        }
        long position = 0;
        long remaining = length;
        for (int i = 0; i < slot.sgeCount && remaining > 0; i++) {
            int len = slot.sgeLength[i];
            if (position + len <= skip) {
                position += len;
                continue;
            }
            long from = Math.max(0, skip - position);
            long n = Math.min(len - from, remaining);
            int errno = cma().write(peer.pid, slot.sgeAddress[i] + from, remoteAddress, n);
            if (errno != 0) {
                return errno;
            }
            remoteAddress += n;
            remaining -= n;
            position += len;
        }
        return 0;
    }
}
