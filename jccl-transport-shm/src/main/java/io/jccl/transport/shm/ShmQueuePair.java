package io.jccl.transport.shm;

import io.jccl.common.SecureIds;
import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.Counter;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.QueuePairState;
import io.jccl.verbs.RnrTimer;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.VerbsException;
import io.jccl.verbs.WorkCompletionOpcode;
import io.jccl.verbs.WorkCompletionStatus;
import io.jccl.verbs.spi.AbstractQueuePair;
import io.jccl.verbs.spi.CounterSet;
import io.jccl.verbs.spi.ReceiveSlot;
import io.jccl.verbs.spi.SendSlot;
import io.jccl.verbs.spi.SoftMemoryRegion;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;
import java.nio.file.Path;
import java.util.concurrent.locks.LockSupport;

import static io.jccl.transport.shm.QueuePairFile.*;

/**
 * An RC queue pair of the shm provider. The requester executes its requests itself, in the posting thread when
 * nothing older is pending (as UCX's shm put does): WRITE and READ are one copy into or out of the peer's mapped
 * region file, atomics are VarHandle CAS / getAndAdd on that mapping, and SEND claims a receive descriptor the
 * peer published in its queue-pair file and copies the message straight into the described buffers. No progress
 * thread exists: requests that must wait (RNR, a peer not yet in RTR) are retried by {@link #progress()}, which
 * completion-queue polls drive, and by the next post.
 *
 * <p>Responder checks read the peer's tables in shared memory: its rkey table (key valid, range, permission), its
 * qp_access_flags and its state word. Violations complete the request with the status an RC responder's NAK
 * produces and set the peer's state word to ERR.
 */
public final class ShmQueuePair extends AbstractQueuePair {
    private static final VarHandle LONG = ShmKeyTable.LONG;
    private static final VarHandle INT = ShmKeyTable.INT;
    private static final long LIVENESS_INTERVAL_NS = 100_000_000L;
    private static final long SWEEP_INTERVAL_NS = 1_000_000_000L;
    private static final long PEER_WAIT_POLL_NS = 20_000L;
    private static final long FLUSH_WAIT_NS = 500_000_000L;
    /** How stale the request path's pid probe may be: a peer that died is noticed by the first request after. */
    private static final long FAST_LIVENESS_INTERVAL_NS = 1_000_000L;
    /** One in this + 1 idle polls takes the full (locked, clock-reading) progress path. */
    private static final int IDLE_CHECK_MASK = 63;
    private static final WorkCompletionStatus[] STATUSES = WorkCompletionStatus.values();
    private static final WorkCompletionOpcode[] OPCODES = WorkCompletionOpcode.values();

    /** Request finished (completed successfully or with an error). */
    private static final long FINISHED = -2;
    /** Request must wait (RNR or peer not ready); retried later. */
    private static final long BLOCKED = -1;

    private final ShmContext shmContext;
    private final Arena fileArena = Arena.ofShared();
    private final String fileName;
    private final Path path;
    private final MemorySegment file;
    private final long token = SecureIds.nonce();
    private final int depth;
    private final int entrySize;
    /** This QP's share of the context's counters: every update happens under the QP lock, so no atomics. */
    private final CounterSet.Local counters;
    /**
     * Cross-memory attach and the process probe, made at first use: their FFM state (the errno capture layout)
     * costs a rank milliseconds of start-up, and a job on the direct path may never need them.
     */
    private volatile NativeCalls nativeCalls;
    private final ShmKeyTable.Entry remoteEntry = new ShmKeyTable.Entry();
    private final ShmKeyTable.Entry scratchEntry = new ShmKeyTable.Entry();

    private PeerLink peer;
    private boolean peerDead;
    private long lastLivenessCheckNs;
    private long lastSweepNs;
    private long lastFastLivenessCheckNs;
    private final Object lazyLock = new Object();
    /** Native scratch for the original value of an atomic on private memory (read by cross-memory attach). */
    private final MemorySegment atomicScratch;
    /** Resolved target of the current one-sided request: the peer's mapping (file kind) or null (private). */
    private MemorySegment targetMapping;
    private long targetOffset;
    private int targetSlot;
    private int targetRkey;
    /** Receive index claimed at the peer by the running request and not yet published, or -1. */
    private long claimedReceive = -1;
    /** Idle looks of pollers ({@link #nothingToDo}); a racy counter, only spreads the full checks out. */
    private int idleLooks;
    /** Sink of {@link #prefetchDescriptor} loads. */
    private long prefetchSink;

    ShmQueuePair(ShmProtectionDomain domain, ShmContext context, QueuePairInitAttributes init) {
        super(domain, init);
        this.shmContext = context;
        this.counters = context.counterSet().newLocal();
        this.depth = init.maxReceiveWorkRequests();
        this.entrySize = QueuePairFile.entrySize(init.maxReceiveSge());
        this.atomicScratch = arena.allocate(8, 8);
        this.fileName = ShmFiles.name(ShmFiles.newFileId(), ShmFiles.QUEUE_PAIR);
        this.path = ShmFiles.DIRECTORY.resolve(fileName);
        MemorySegment mapped;
        try {
            mapped = ShmFiles.createAndMap(path, QueuePairFile.fileSize(depth, init.maxReceiveSge()), fileArena);
        } catch (RuntimeException e) {
            fileArena.close();
            counters.close();
            context.queuePairs().remove(queuePairNumber);
            throw e;
        }
        file = mapped;
        file.set(ValueLayout.JAVA_INT, QPN, queuePairNumber);
        file.set(ValueLayout.JAVA_LONG, PID, ShmFiles.selfPid());
        file.set(ValueLayout.JAVA_LONG, TOKEN, token);
        file.set(ValueLayout.JAVA_INT, DEPTH, depth);
        file.set(ValueLayout.JAVA_INT, MAX_SGE, init.maxReceiveSge());
        file.set(ValueLayout.JAVA_INT, ENTRY_SIZE, entrySize);
        file.set(ValueLayout.JAVA_LONG, DOMAIN, domain.id());
        INT.setRelease(file, STATE, S_RESET);
        LONG.setRelease(file, 0L, QueuePairFile.MAGIC);
        if (sendQueue instanceof ShmCompletionQueue queue) {
            queue.register(this);
        }
        if (receiveQueue != sendQueue && receiveQueue instanceof ShmCompletionQueue queue) {
            queue.register(this);
        }
    }

    /**
     * Whether a request waits on a timer (RNR or a peer not yet ready): a sleeping poller must wake in time to
     * retry it. Read without the lock by pollers deciding how long to sleep; a stale answer only changes that.
     */
    boolean hasTimedWork() {
        return sendHead != sendTail;
    }

    @Override
    protected String localAddress() {
        return new ShmAddress(ShmFiles.bootId(), ShmFiles.selfPid(), shmContext.fileName(), fileName, token)
            .encode();
    }

    /** This QP's file (for tests and tools). */
    public Path path() {
        return path;
    }

    // ------------------------------------------------------------------------------------------------ state

    @Override
    protected void beforeTransition(QueuePairState from, QueuePairState to, QueuePairAttributes attributes) {
        if (from == QueuePairState.INIT && to == QueuePairState.READY_TO_RECEIVE) {
            // Throwing here rejects the modify call and changes nothing.
            PeerLink link = PeerLink.connect(attributes.remote(), attributes.destQpNumber());
            if (peer != null) {
                peer.close();
            }
            peer = link;
            peerDead = false;
            lastLivenessCheckNs = System.nanoTime();
        }
    }

    @Override
    protected void afterTransition(QueuePairState from, QueuePairState to) {
        INT.setRelease(file, ACCESS, accessFlags);
        INT.setRelease(file, MIN_RNR, minRnrTimer);
        if (to == QueuePairState.RESET) {
            // The base class restarts both rings at index 0: forget every descriptor and result.
            LONG.setVolatile(file, HEAD, 0L);
            LONG.setVolatile(file, TAIL, 0L);
            for (int i = 0; i < depth; i++) {
                LONG.setVolatile(file, ENTRIES + (long) i * entrySize + E_DONE, 0L);
            }
            if (peer != null) {
                peer.close();
                peer = null;
            }
        }
        INT.setRelease(file, STATE, sharedState(to));
    }

    private static int sharedState(QueuePairState state) {
        return switch (state) {
            case RESET -> S_RESET;
            case INIT -> S_INIT;
            case READY_TO_RECEIVE -> S_RTR;
            case READY_TO_SEND -> S_RTS;
            case SEND_QUEUE_DRAINED -> S_SQD;
            case SEND_QUEUE_ERROR, ERROR -> S_ERR;
        };
    }

    @Override
    protected void onError() {
        if (!isClosed() || (int) INT.getAcquire(file, STATE) != S_DESTROYED) {
            INT.setRelease(file, STATE, S_ERR);
        }
    }

    /** Enters ERR when the peer marked our state word (a responder-side violation it detected). */
    private void checkSharedState() {
        if (state != QueuePairState.ERROR && state != QueuePairState.RESET
            && (int) INT.getAcquire(file, STATE) == S_ERR) {
            enterError();
        }
    }

    @Override
    protected void destroy() {
        if (sendQueue instanceof ShmCompletionQueue queue) {
            queue.unregister(this);
        }
        if (receiveQueue instanceof ShmCompletionQueue queue) {
            queue.unregister(this);
        }
        INT.setRelease(file, STATE, S_DESTROYED);
        counters.close();
        if (peer != null) {
            peer.close();
            peer = null;
        }
        ShmFiles.delete(path);
        fileArena.close();
    }

    // ------------------------------------------------------------------------------------------------ progress

    @Override
    protected boolean executesSendsUnderPostLock() {
        return true;
    }

    @Override
    protected void onSendPostedLocked() {
        checkSharedState();
        executeSends();
    }

    @Override
    protected void onSendPosted() {
        lock.lock();
        try {
            if (!isClosed()) {
                checkSharedState();
                executeSends();
            }
        } finally {
            lock.unlock();
        }
    }

    @Override
    public int progress() {
        if (nothingToDo()) {
            return 0;
        }
        if (!lock.tryLock()) {
            return 0; // the holder (a poster or another poller) is making progress right now
        }
        try {
            if (isClosed()) {
                return 0;
            }
            checkSharedState();
            int work = drainReceives();
            if (sendHead < sendTail) {
                work += executeSends();
            }
            if (peer != null && state != QueuePairState.ERROR) {
                long now = System.nanoTime();
                if (now - lastLivenessCheckNs >= LIVENESS_INTERVAL_NS) {
                    checkLiveness(now);
                    if (peerDead && state != QueuePairState.RESET) {
                        // A dead peer never answers: fail what waits on it instead of hanging (see docs).
                        if (sendHead < sendTail) {
                            completeSend(WorkCompletionStatus.RETRY_EXC_ERR, 0, 0);
                        } else if (state != QueuePairState.INIT) {
                            enterError();
                        }
                        work++;
                    }
                }
                if (now - lastSweepNs >= SWEEP_INTERVAL_NS) {
                    lastSweepNs = now;
                    if (peer != null) {
                        peer.regions.sweep(peer.keys, scratchEntry);
                    }
                }
            }
            return work;
        } finally {
            lock.unlock();
        }
    }

    /**
     * Lock-free look, by a poller, whether {@link #progress} has anything to do: no send queued, no result
     * published for the oldest receive, our state word not marked ERR by the peer. Every {@link #IDLE_CHECK_MASK}
     * + 1 idle looks, and the first look after a blocking poller slept, go the full way anyway (liveness and
     * sweep timers). The lock-guarded indexes are read racily:
     * a stale "nothing" only moves the work to the next poll, anything else takes the lock and looks again. An
     * empty poll so costs a few cache-hit loads instead of a lock round trip and a clock read, which shortens the
     * time between a result landing and the poller seeing it.
     */
    private boolean nothingToDo() {
        if (sendHead != sendTail || (++idleLooks & IDLE_CHECK_MASK) == 0) {
            return false;
        }
        MemorySegment f = file;
        if (f == null) {
            return true; // still being constructed (a poller of a shared CQ may already see this QP)
        }
        try {
            long index = receiveHead;
            if (index < receiveTail && (long) LONG.getAcquire(f, ENTRIES + (index % depth) * entrySize + E_DONE)
                == index + 1) {
                return false;
            }
            return (int) INT.getAcquire(f, STATE) != S_ERR;
        } catch (IllegalStateException closed) {
            return false; // destroyed meanwhile: the locked path sees it
        }
    }

    /** Makes the next {@link #progress} take the full path (a blocking poller calls it after each sleep). */
    void lookFullyNextPoll() {
        idleLooks = -1;
    }

    private boolean checkLiveness(long now) {
        if (peer == null) {
            return false;
        }
        if (!peerDead && now - lastLivenessCheckNs >= LIVENESS_INTERVAL_NS) {
            lastLivenessCheckNs = now;
            if (!ShmFiles.isAlive(peer.pid, peer.startTime)) {
                peerDead = true;
                counters.increment(Counter.LINK_DOWNED);
            }
        }
        return !peerDead;
    }

    /** Executes queued sends in order until one must wait (must hold the lock). */
    private int executeSends() {
        int work = 0;
        while (sendHead < sendTail && state == QueuePairState.READY_TO_SEND) {
            SendSlot slot = sendSlot(sendHead);
            if (slot.notBeforeNs != 0 && System.nanoTime() - slot.notBeforeNs < 0) {
                break;
            }
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
                completeSend(WorkCompletionStatus.LOC_PROT_ERR, 0, 0);
                finished = true;
            }
            claimedReceive = -1;
            if (!finished) {
                break;
            }
            work++;
        }
        sendNext = sendHead;
        return work;
    }

    /** The downcall state this queue pair makes at first use (see {@link #nativeCalls}). */
    private record NativeCalls(CrossMemoryAttach cma, ProcessProbe probe) {
    }

    private NativeCalls nativeCalls() {
        NativeCalls n = nativeCalls;
        if (n == null) {
            synchronized (lazyLock) {
                n = nativeCalls;
                if (n == null) {
                    n = new NativeCalls(new CrossMemoryAttach(arena), new ProcessProbe(arena));
                    nativeCalls = n;
                }
            }
        }
        return n;
    }

    private CrossMemoryAttach cma() {
        return nativeCalls().cma();
    }

    private ProcessProbe processProbe() {
        return nativeCalls().probe();
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
            if (!peerDead && !processProbe().exists(link.pid)) {
                peerDead = true;
                counters.increment(Counter.LINK_DOWNED);
            }
        }
        if (peerDead || peerState == S_ERR || peerState == S_DESTROYED) {
            // As a hardware requester whose peer stopped answering: transport retries exhausted.
            counters.increment(Counter.LOCAL_ACK_TIMEOUT_ERR);
            completeSend(WorkCompletionStatus.RETRY_EXC_ERR, 0, 0);
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
            long timeoutNs = RnrTimer.ackTimeoutNs(timeout);
            slot.progress = timeoutNs == 0 ? Long.MAX_VALUE : now + timeoutNs * (retryCount + 1);
        } else if (slot.progress != Long.MAX_VALUE && now - slot.progress >= 0) {
            counters.increment(Counter.LOCAL_ACK_TIMEOUT_ERR);
            completeSend(WorkCompletionStatus.RETRY_EXC_ERR, 0, 0);
            return true;
        }
        if (!checkLiveness(now)) {
            completeSend(WorkCompletionStatus.RETRY_EXC_ERR, 0, 0);
            return true;
        }
        slot.notBeforeNs = now + PEER_WAIT_POLL_NS;
        return false;
    }

    private boolean finish(SendSlot slot, long byteLength) {
        counters.add(Counter.PORT_XMIT_DATA, slot.length);
        counters.increment(Counter.PORT_XMIT_PACKETS);
        completeSend(WorkCompletionStatus.SUCCESS, (int) byteLength, 0);
        return true;
    }

    private boolean fail(WorkCompletionStatus status) {
        completeSend(status, 0, 0);
        return true;
    }

    /** A responder-side violation: the requester completes with {@code status}, both QPs go to ERR. */
    private boolean remoteError(WorkCompletionStatus status) {
        if (status == WorkCompletionStatus.REM_ACCESS_ERR) {
            counters.increment(Counter.REQ_REMOTE_ACCESS_ERRORS);
            peer.keys.countForOwner(ShmKeyTable.COUNTER_REMOTE_ACCESS_ERRORS); // the responder "detected" it
        }
        peer.markError();
        completeSend(status, 0, 0);
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
        if (entry.kind == ShmKeyTable.KIND_PRIVATE && CrossMemoryAttach.unavailable() == null) {
            targetMapping = null;
            targetOffset = remoteAddress;
            targetSlot = entry.slot;
            targetRkey = entry.rkey;
            return true;
        }
        return false;
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
        if (!checkLocal(slot, false)) {
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
                gather(slot, 0, targetMapping, targetOffset, length);
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
        if (!checkLocal(slot, true)) {
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
                if (!scatter(slot.sgeAddress, slot.sgeLength, slot.sgeLkey, slot.sgeCount, 0, targetMapping,
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
        if (!checkLocal(slot, true)) {
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
        SoftMemoryRegion local = localRegion(slot.sgeAddress[0], 8, slot.sgeLkey[0], true);
        local.segment().set(ValueLayout.JAVA_LONG_UNALIGNED, slot.sgeAddress[0] - local.address(), original);
        return finish(slot, 8);
    }

    private boolean send(SendSlot slot) {
        if (!checkLocal(slot, false)) {
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
                gather(slot, done, mapping, offset, n);
            } else {
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
                completeSend(WorkCompletionStatus.RETRY_EXC_ERR, 0, 0);
                return FINISHED;
            }
        }
    }

    /** RNR NAK: wait the peer's min_rnr_timer and retry, up to rnr_retry times (7 = forever). */
    private long receiverNotReady(SendSlot slot) {
        long now = System.nanoTime();
        counters.increment(Counter.RCVD_RNR_ERR);
        peer.keys.countForOwner(ShmKeyTable.COUNTER_SEND_RNR); // the responder's RNR NAK, as it would count it
        if (!slot.started) {
            slot.started = true;
            slot.rnrRetriesLeft = rnrRetry;
        }
        if (rnrRetry != 7) {
            if (slot.rnrRetriesLeft <= 0) {
                counters.increment(Counter.RNR_NAK_RETRY_ERR);
                completeSend(WorkCompletionStatus.RNR_RETRY_EXC_ERR, 0, 0);
                return FINISHED;
            }
            slot.rnrRetriesLeft--;
        }
        if (!checkLiveness(now)) {
            completeSend(WorkCompletionStatus.RETRY_EXC_ERR, 0, 0);
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

    // ------------------------------------------------------------------------------------------------ receive side

    @Override
    protected void onReceivePosted(ReceiveSlot slot, long index) {
        long e = ENTRIES + (index % depth) * entrySize;
        LONG.set(file, e + E_DONE, 0L);
        int flags = 0;
        int count = 0;
        for (int i = 0; i < slot.sgeCount; i++) {
            int len = slot.sgeLength[i];
            if (len == 0) {
                continue;
            }
            SoftMemoryRegion found = localRegion(slot.sgeAddress[i], len, slot.sgeLkey[i], true);
            if (!(found instanceof ShmMemoryRegion region) || region.keySlot() < 0) {
                flags |= FLAG_BAD_LKEY;
                break;
            }
            long s = e + E_SGES + (long) count * SGE_SIZE;
            file.set(ValueLayout.JAVA_INT, s + S_KIND, region.kind());
            file.set(ValueLayout.JAVA_INT, s + S_LENGTH, len);
            file.set(ValueLayout.JAVA_LONG, s + S_FILE_ID, region.fileId());
            file.set(ValueLayout.JAVA_LONG, s + S_OFFSET, region.kind() == ShmKeyTable.KIND_FILE
                ? region.fileOffset() + (slot.sgeAddress[i] - region.address()) : slot.sgeAddress[i]);
            file.set(ValueLayout.JAVA_INT, s + S_SLOT, region.keySlot());
            file.set(ValueLayout.JAVA_INT, s + S_RKEY, region.rkey());
            count++;
        }
        file.set(ValueLayout.JAVA_INT, e + E_SGE_COUNT, count);
        file.set(ValueLayout.JAVA_INT, e + E_FLAGS, flags);
        file.set(ValueLayout.JAVA_LONG, e + E_TOTAL, slot.length);
        // Release: a sender that sees the new tail sees the whole descriptor.
        LONG.setRelease(file, TAIL, index + 1);
        checkSharedState();
    }

    /** Completes receives whose results the peer published, in order (must hold the lock). */
    private int drainReceives() {
        int work = 0;
        while (receiveHead < receiveTail) {
            long index = receiveHead;
            long e = ENTRIES + (index % depth) * entrySize;
            if ((long) LONG.getAcquire(file, e + E_DONE) != index + 1) {
                break;
            }
            int statusOrdinal = file.get(ValueLayout.JAVA_INT, e + E_STATUS);
            int opcodeOrdinal = file.get(ValueLayout.JAVA_INT, e + E_OPCODE);
            WorkCompletionStatus status = statusOrdinal >= 0 && statusOrdinal < STATUSES.length
                ? STATUSES[statusOrdinal] : WorkCompletionStatus.GENERAL_ERR;
            WorkCompletionOpcode opcode = opcodeOrdinal >= 0 && opcodeOrdinal < OPCODES.length
                && OPCODES[opcodeOrdinal].isReceive() ? OPCODES[opcodeOrdinal] : WorkCompletionOpcode.RECV;
            int byteLength = file.get(ValueLayout.JAVA_INT, e + E_BYTE_LEN);
            if (status == WorkCompletionStatus.SUCCESS) {
                counters.increment(Counter.RDMA_RECVS);
                counters.add(Counter.PORT_RCV_DATA, byteLength);
                counters.increment(Counter.PORT_RCV_PACKETS);
            }
            completeReceive(status, opcode, byteLength, file.get(ValueLayout.JAVA_INT, e + E_IMM),
                file.get(ValueLayout.JAVA_INT, e + E_WITH_IMM) != 0, file.get(ValueLayout.JAVA_INT, e + E_SRC_QPN));
            work++;
        }
        return work;
    }

    /**
     * Flushes receives without racing the sender: first the state word says ERR (senders stop), then the owner
     * claims every unclaimed descriptor with one CAS, waits (bounded) for descriptors a sender had already
     * claimed to be finished and completes those with their real result; only the rest flush.
     */
    @Override
    protected void flushReceives() {
        if (!isClosed() || (int) INT.getAcquire(file, STATE) != S_DESTROYED) {
            if (state == QueuePairState.ERROR) {
                INT.setRelease(file, STATE, S_ERR);
            }
            long head;
            do {
                head = (long) LONG.getVolatile(file, HEAD);
            } while (head < receiveTail && !LONG.compareAndSet(file, HEAD, head, receiveTail));
            long claimedBySender = Math.min(head, receiveTail);
            long deadline = System.nanoTime() + FLUSH_WAIT_NS;
            drainReceives();
            while (receiveHead < claimedBySender && System.nanoTime() - deadline < 0
                && (peer == null || processProbe().exists(peer.pid))) {
                LockSupport.parkNanos(50_000);
                drainReceives();
            }
        }
        super.flushReceives();
    }

    // ------------------------------------------------------------------------------------------------ direct access

    @Override
    public boolean supportsDirectAccess() {
        return true;
    }

    /**
     * A slice of the peer's region file mapping. Granted under the checks of a one-sided request: the peer QP's
     * qp_access_flags, a valid rkey, the range inside the region and REMOTE_WRITE (writable) or REMOTE_READ.
     * Read-only views are returned for {@code writable == false}. The view is unmapped when this QP is destroyed,
     * or (within about a second) after the peer deregisters the region; access afterwards throws
     * IllegalStateException instead of touching freed memory.
     */
    @Override
    public MemorySegment mapRemote(long remoteAddress, long length, int rkey, boolean writable) {
        lock.lock();
        try {
            ensureOpen();
            PeerLink link = peer;
            if (link == null || state == QueuePairState.RESET || state == QueuePairState.INIT) {
                throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT,
                    "mapRemote: QP is in " + state.shortName() + "; connect it (INIT -> RTR) first");
            }
            if (length <= 0) {
                throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT, "mapRemote: length must be > 0");
            }
            AccessFlag needed = writable ? AccessFlag.REMOTE_WRITE : AccessFlag.REMOTE_READ;
            if (!needed.isSetIn(link.accessFlags())) {
                throw denied("the peer QP's qp_access_flags do not grant " + needed);
            }
            ShmKeyTable.Entry entry = new ShmKeyTable.Entry();
            if (!link.keys.lookup(rkey, entry)) {
                throw denied("rkey 0x" + Integer.toHexString(rkey) + " is not registered at the peer (unknown or "
                    + "deregistered)");
            }
            if (entry.domainId != link.domainId) {
                throw denied("rkey 0x" + Integer.toHexString(rkey) + " belongs to another protection domain than "
                    + "the peer QP");
            }
            if (!entry.contains(remoteAddress, length)) {
                throw denied("range 0x" + Long.toHexString(remoteAddress) + "+" + length + " lies outside the "
                    + "region 0x" + Long.toHexString(entry.address) + "+" + entry.length);
            }
            if (!needed.isSetIn(entry.access)) {
                throw denied("the region grants " + AccessFlag.describe(entry.access) + ", not " + needed);
            }
            if (entry.kind != ShmKeyTable.KIND_FILE) {
                throw denied("the region is private memory the peer registered with registerMemory; only "
                    + "regions from allocateMemory can be mapped");
            }
            MemorySegment mapping = link.regions.map(entry.fileId, entry.fileSize(), entry.slot, entry.rkey);
            if (mapping == null) {
                throw denied("the region's file is gone (deregistered meanwhile)");
            }
            MemorySegment view = mapping.asSlice(entry.fileOffset + (remoteAddress - entry.address), length);
            return writable ? view : view.asReadOnly();
        } finally {
            lock.unlock();
        }
    }

    private static VerbsException denied(String why) {
        return new VerbsException(VerbsException.Reason.PERMISSION_DENIED, "mapRemote: " + why);
    }
}
