package io.jccl.transport.shm;

import io.jccl.common.SecureIds;
import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.QueuePairState;
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
 *
 * <p>This class is the {@link AbstractQueuePair} that wires the roles together under its lock: it owns the
 * queue-pair file and its state word, the transitions, progress (the pollers' lock-free look, the liveness and
 * sweep timers) and direct access ({@link #mapRemote}). {@link ShmRequester} executes send-queue slots against the
 * peer and holds the peer link; {@link ShmReceiver} serves the receive ring in this QP's file.
 */
public final class ShmQueuePair extends AbstractQueuePair {
    private static final VarHandle INT = ShmKeyTable.INT;
    /** One in this + 1 idle polls takes the full (locked, clock-reading) progress path. */
    private static final int IDLE_CHECK_MASK = 63;

    private final ShmContext shmContext;
    private final Arena fileArena = Arena.ofShared();
    private final String fileName;
    private final Path path;
    private final MemorySegment file;
    private final long token = SecureIds.nonce();
    /** This QP's share of the context's counters: every update happens under the QP lock, so no atomics. */
    private final CounterSet.Local counters;
    /** The send side: executes requests against the peer, holds the peer link and the native calls. */
    private final ShmRequester requester;
    /** The receive side: the receive ring in {@link #file}. */
    private final ShmReceiver receiver;
    /** Idle looks of pollers ({@link #nothingToDo}); a racy counter, only spreads the full checks out. */
    private int idleLooks;

    ShmQueuePair(ShmProtectionDomain domain, ShmContext context, QueuePairInitAttributes init) {
        super(domain, init);
        this.shmContext = context;
        this.counters = context.counterSet().newLocal();
        int depth = init.maxReceiveWorkRequests();
        int entrySize = QueuePairFile.entrySize(init.maxReceiveSge());
        this.requester = new ShmRequester(this, arena, counters);
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
        ShmKeyTable.LONG.setRelease(file, 0L, QueuePairFile.MAGIC);
        this.receiver = new ShmReceiver(this, requester, file, depth, entrySize, counters);
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
            requester.connect(PeerLink.connect(attributes.remote(), attributes.destQpNumber()));
        }
    }

    @Override
    protected void afterTransition(QueuePairState from, QueuePairState to) {
        INT.setRelease(file, ACCESS, accessFlags);
        INT.setRelease(file, MIN_RNR, minRnrTimer);
        if (to == QueuePairState.RESET) {
            receiver.reset();
            requester.disconnect();
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
        requester.disconnect();
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
            ShmRequester req = requester;
            ShmReceiver rec = receiver;
            if (isClosed() || req == null || rec == null) {
                return 0; // destroyed, or still being constructed (see nothingToDo)
            }
            checkSharedState();
            int work = rec.drain();
            if (sendHead < sendTail) {
                work += executeSends();
            }
            if (req.peer() != null && state != QueuePairState.ERROR) {
                long now = System.nanoTime();
                if (req.peerFoundDead(now) && state != QueuePairState.RESET) {
                    // A dead peer never answers: fail what waits on it instead of hanging (see docs).
                    if (sendHead < sendTail) {
                        completeSend(WorkCompletionStatus.RETRY_EXC_ERR, 0, 0);
                    } else if (state != QueuePairState.INIT) {
                        enterError();
                    }
                    work++;
                }
                if (req.sweepDue(now)) {
                    req.sweep(now);
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
        ShmReceiver r = receiver;
        if (f == null || r == null) {
            return true; // still being constructed (a poller of a shared CQ may already see this QP)
        }
        try {
            long index = receiveHead;
            if (index < receiveTail && r.resultPublished(index)) {
                return false;
            }
            return (int) INT.getAcquire(f, STATE) != S_ERR;
        } catch (IllegalStateException closed) {
            return false; // destroyed meanwhile: the locked path sees it
        }
    }

    /**
     * Completes the receives whose results the peer already published, before a request to that peer fails: the
     * CQ then shows its messages before the failure (must hold the lock).
     */
    void deliverPublishedReceives() {
        receiver.drain();
    }

    /** Makes the next {@link #progress} take the full path (a blocking poller calls it after each sleep). */
    void lookFullyNextPoll() {
        idleLooks = -1;
    }

    /** Executes queued sends in order until one must wait (must hold the lock). */
    private int executeSends() {
        int work = 0;
        while (sendHead < sendTail && state == QueuePairState.READY_TO_SEND) {
            SendSlot slot = sendSlot(sendHead);
            if (slot.notBeforeNs != 0 && System.nanoTime() - slot.notBeforeNs < 0) {
                break;
            }
            if (!requester.run(slot)) {
                break;
            }
            work++;
        }
        sendNext = sendHead;
        return work;
    }

    // ------------------------------------------------------------------------------------------------ receive side

    @Override
    protected void onReceivePosted(ReceiveSlot slot, long index) {
        receiver.post(slot, index);
        checkSharedState();
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
            receiver.reclaimBeforeFlush();
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
            PeerLink link = requester.peer();
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

    // ------------------------------------------------------------------------------------------------ for the roles
    // The base class keeps the queues and the checks protected; ShmRequester and ShmReceiver reach them through
    // these (all called under the lock). Trivial and in a final class, so the JIT inlines them.

    /** Oldest receive not yet completed. */
    long receiveHead() {
        return receiveHead;
    }

    /** Next free receive slot. */
    long receiveTail() {
        return receiveTail;
    }

    /** RNR retry count (7 = infinite). */
    int rnrRetry() {
        return rnrRetry;
    }

    /** Local ACK timeout code. */
    int ackTimeout() {
        return timeout;
    }

    /** Transport retry count. */
    int retryCount() {
        return retryCount;
    }

    /** Completes the oldest send ({@link #completeSend} without a vendor error). */
    void completeRequest(WorkCompletionStatus status, int byteLength) {
        completeSend(status, byteLength, 0);
    }

    /** Completes the oldest receive ({@link #completeReceive}). */
    void completeReceived(WorkCompletionStatus status, WorkCompletionOpcode opcode, int byteLength, int immediateData,
                          boolean withImmediate, int sourceQpNumber) {
        completeReceive(status, opcode, byteLength, immediateData, withImmediate, sourceQpNumber);
    }

    /** {@link #localRegion}: the local region of an sge, or null (→ LOC_PROT_ERR). */
    SoftMemoryRegion checkedLocalRegion(long address, long length, int lkey, boolean write) {
        return localRegion(address, length, lkey, write);
    }

    /** {@link #checkLocal}: every local entry of a send passes its lkey/range (and LOCAL_WRITE) check. */
    boolean localEntriesValid(SendSlot slot, boolean write) {
        return checkLocal(slot, write);
    }

    /** {@link #gather}: a send's payload into {@code target}. */
    boolean gatherInto(SendSlot slot, long skip, MemorySegment target, long targetOffset, long length) {
        return gather(slot, skip, target, targetOffset, length);
    }

    /** {@link #scatter}: bytes from {@code source} into a READ's scatter list. */
    boolean scatterInto(long[] sgeAddress, int[] sgeLength, int[] sgeLkey, int sgeCount, long skip,
                        MemorySegment source, long sourceOffset, long length) {
        return scatter(sgeAddress, sgeLength, sgeLkey, sgeCount, skip, source, sourceOffset, length);
    }
}
