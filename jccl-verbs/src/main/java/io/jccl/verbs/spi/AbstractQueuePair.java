package io.jccl.verbs.spi;

import io.jccl.common.SecureIds;
import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.Endpoint;
import io.jccl.verbs.PathMtu;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairAttribute;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.QueuePairState;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.VerbsException;
import io.jccl.verbs.WorkCompletionOpcode;
import io.jccl.verbs.WorkCompletionStatus;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.concurrent.locks.ReentrantLock;

/**
 * What every software provider's reliable-connected queue pair shares: the state machine, attribute storage, the
 * send and receive queues as rings of preallocated slots, in-order completion, error handling (first error →
 * completion → ERR → flush everything else) and the local and responder-side memory checks.
 *
 * <p>Providers implement how requests reach the peer: {@link #onSendPosted()} starts execution,
 * {@link #beforeTransition} connects on INIT→RTR, {@link #onError()} tells the peer. All queue state is guarded
 * by {@link #lock}.
 */
public abstract class AbstractQueuePair implements QueuePair, Progressable {
    /** The domain. */
    protected final AbstractProtectionDomain domain;
    /** The context. */
    protected final AbstractContext context;
    /** Creation attributes. */
    protected final QueuePairInitAttributes init;
    /** Send completion queue. */
    protected final SoftCompletionQueue sendQueue;
    /** Receive completion queue. */
    protected final SoftCompletionQueue receiveQueue;
    /** QP number. */
    protected final int queuePairNumber;
    /** Initial send PSN proposed to the peer. */
    protected final int initialPsn;
    /** Guards queues, state and attributes. */
    protected final ReentrantLock lock = new ReentrantLock();
    /** Off-heap memory of this QP's slots (inline buffers). */
    protected final Arena arena = Arena.ofShared();

    /** Current state. */
    protected volatile QueuePairState state = QueuePairState.RESET;
    /** qp_access_flags: which incoming one-sided operations are accepted. */
    protected int accessFlags;
    /** P_Key index. */
    protected int pkeyIndex;
    /** Port. */
    protected int port = 1;
    /** Local ACK timeout code. */
    protected int timeout;
    /** Transport retry count. */
    protected int retryCount;
    /** RNR retry count (7 = infinite). */
    protected int rnrRetry;
    /** Expected receive PSN. */
    protected int rqPsn;
    /** Send PSN. */
    protected int sqPsn;
    /** Outstanding READs/atomics we may initiate. */
    protected int maxRdAtomic;
    /** Incoming READs/atomics we accept. */
    protected int maxDestRdAtomic;
    /** RNR timer code we ask peers to wait. */
    protected int minRnrTimer;
    /** Remote QP number. */
    protected int destQpNumber;
    /** Path MTU. */
    protected PathMtu pathMtu = PathMtu.MTU_4096;
    /** The remote endpoint. */
    protected Endpoint remote;

    /** Send slots. */
    protected final SendSlot[] sendSlots;
    /** Oldest send not yet completed. */
    protected long sendHead;
    /** Next send to start (providers advance it; sendHead ≤ sendNext ≤ sendTail). */
    protected long sendNext;
    /** Next free send slot. */
    protected long sendTail;
    /** Receive slots. */
    protected final ReceiveSlot[] receiveSlots;
    /** Oldest receive not yet completed. */
    protected long receiveHead;
    /** Next free receive slot. */
    protected long receiveTail;
    private boolean closed;

    /** Creates the queue pair, draws a free random QP number and attaches to the completion queues. */
    protected AbstractQueuePair(AbstractProtectionDomain domain, QueuePairInitAttributes init) {
        this.domain = domain;
        this.context = domain.context();
        this.init = init;
        this.sendQueue = (SoftCompletionQueue) init.sendCompletionQueue();
        this.receiveQueue = (SoftCompletionQueue) init.receiveCompletionQueue();
        sendSlots = new SendSlot[init.maxSendWorkRequests()];
        for (int i = 0; i < sendSlots.length; i++) {
            sendSlots[i] = new SendSlot(init.maxSendSge(), init.maxInlineData(), arena);
        }
        receiveSlots = new ReceiveSlot[init.maxReceiveWorkRequests()];
        for (int i = 0; i < receiveSlots.length; i++) {
            receiveSlots[i] = new ReceiveSlot(init.maxReceiveSge());
        }
        int qpn;
        do {
            qpn = SecureIds.queuePairNumber();
        } while (!context.queuePairs().putIfAbsent(qpn, this));
        queuePairNumber = qpn;
        initialPsn = SecureIds.packetSequenceNumber();
        sendQueue.addUser();
        receiveQueue.addUser();
        sendQueue.attach(this);
        if (receiveQueue != sendQueue) {
            receiveQueue.attach(this);
        }
    }

    @Override
    public int queuePairNumber() {
        return queuePairNumber;
    }

    @Override
    public QueuePairState state() {
        return state;
    }

    @Override
    public ProtectionDomain protectionDomain() {
        return domain;
    }

    @Override
    public QueuePairInitAttributes initAttributes() {
        return init;
    }

    @Override
    public int initialPsn() {
        return initialPsn;
    }

    @Override
    public Endpoint localEndpoint() {
        return new Endpoint(context.device().providerName(), context.device().name(), queuePairNumber, initialPsn,
            localAddress());
    }

    /** The provider-specific address placed in {@link #localEndpoint()}. */
    protected abstract String localAddress();

    // ------------------------------------------------------------------------------------------------ state

    @Override
    public void modify(QueuePairAttributes attributes) {
        lock.lock();
        try {
            ensureOpen();
            QueuePairState from = state;
            QueuePairState to = QueuePairStateMachine.validate(from, attributes);
            beforeTransition(from, to, attributes);
            apply(attributes);
            if (to == QueuePairState.ERROR) {
                if (from != QueuePairState.ERROR) {
                    enterError("modified to ERROR");
                }
                return;
            }
            state = to;
            if (to == QueuePairState.RESET) {
                // Moving to RESET empties both queues without completions (ibv_modify_qp semantics).
                sendHead = sendNext = sendTail = 0;
                receiveHead = receiveTail = 0;
            }
            afterTransition(from, to);
        } finally {
            lock.unlock();
        }
    }

    private void apply(QueuePairAttributes a) {
        if (a.has(QueuePairAttribute.ACCESS_FLAGS)) {
            accessFlags = a.accessFlags();
        }
        if (a.has(QueuePairAttribute.PKEY_INDEX)) {
            pkeyIndex = a.pkeyIndex();
        }
        if (a.has(QueuePairAttribute.PORT)) {
            port = a.port();
        }
        if (a.has(QueuePairAttribute.TIMEOUT)) {
            timeout = a.timeout();
        }
        if (a.has(QueuePairAttribute.RETRY_COUNT)) {
            retryCount = a.retryCount();
        }
        if (a.has(QueuePairAttribute.RNR_RETRY)) {
            rnrRetry = a.rnrRetry();
        }
        if (a.has(QueuePairAttribute.RQ_PSN)) {
            rqPsn = a.rqPsn();
        }
        if (a.has(QueuePairAttribute.SQ_PSN)) {
            sqPsn = a.sqPsn();
        }
        if (a.has(QueuePairAttribute.MAX_QP_RD_ATOMIC)) {
            maxRdAtomic = a.maxRdAtomic();
        }
        if (a.has(QueuePairAttribute.MAX_DEST_RD_ATOMIC)) {
            maxDestRdAtomic = a.maxDestRdAtomic();
        }
        if (a.has(QueuePairAttribute.MIN_RNR_TIMER)) {
            minRnrTimer = a.minRnrTimer();
        }
        if (a.has(QueuePairAttribute.DEST_QPN)) {
            destQpNumber = a.destQpNumber();
        }
        if (a.has(QueuePairAttribute.PATH_MTU)) {
            pathMtu = a.pathMtu();
        }
        if (a.has(QueuePairAttribute.ADDRESS_VECTOR)) {
            remote = a.remote();
        }
    }

    /**
     * Called under the lock after validation and before anything changes; throwing rejects the modify call and
     * changes nothing (for example when the peer named by the address vector cannot be reached).
     */
    protected void beforeTransition(QueuePairState from, QueuePairState to, QueuePairAttributes attributes) {
    }

    /** Called under the lock after a successful transition (not for →ERR, see {@link #onError()}). */
    protected void afterTransition(QueuePairState from, QueuePairState to) {
    }

    @Override
    public QueuePairAttributes query() {
        lock.lock();
        try {
            QueuePairAttributes a = new QueuePairAttributes().state(state).accessFlags(accessFlags)
                .pkeyIndex(pkeyIndex).port(port).timeout(timeout).retryCount(retryCount).rnrRetry(rnrRetry)
                .rqPsn(rqPsn).sqPsn(sqPsn).maxRdAtomic(maxRdAtomic).maxDestRdAtomic(maxDestRdAtomic)
                .minRnrTimer(minRnrTimer).destQpNumber(destQpNumber).pathMtu(pathMtu);
            if (remote != null) {
                a.remote(remote);
            }
            return a;
        } finally {
            lock.unlock();
        }
    }

    // ------------------------------------------------------------------------------------------------ posting

    @Override
    public void postSend(SendWorkRequest request) {
        validateSend(request);
        boolean kick;
        lock.lock();
        try {
            kick = enqueueSend(request);
        } finally {
            lock.unlock();
        }
        if (kick) {
            onSendPosted();
        }
    }

    /**
     * Posts a list under one lock and starts it with one {@link #onSendListPosted()} (tcp: one output pump, so one
     * {@code write()} for a list of small requests); providers that execute under the post lock run each request as
     * it is queued, exactly as single posts do.
     */
    @Override
    public int postSend(SendWorkRequest[] requests, int count) {
        if (count < 0 || count > requests.length) {
            throw new IllegalArgumentException("post list of " + count + " requests, array holds "
                + requests.length);
        }
        int posted = 0;
        boolean kick = false;
        try {
            lock.lock();
            try {
                for (; posted < count; posted++) {
                    SendWorkRequest request = requests[posted];
                    validateSend(request);
                    kick |= enqueueSend(request);
                }
            } finally {
                lock.unlock();
            }
        } catch (VerbsException e) {
            if (posted == 0) {
                throw e;
            }
        } finally {
            if (kick) {
                onSendListPosted();
            }
        }
        return posted;
    }

    /** Queues one validated send under the lock; returns whether {@link #onSendPosted()} is due after unlocking. */
    private boolean enqueueSend(SendWorkRequest request) {
        ensureOpen();
        QueuePairState current = state;
        if (current == QueuePairState.RESET || current == QueuePairState.INIT
            || current == QueuePairState.READY_TO_RECEIVE) {
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT,
                "ibv_post_send: QP 0x" + Integer.toHexString(queuePairNumber) + " is in " + current.shortName()
                    + "; sends need RTS (drive it INIT -> RTR -> RTS first)");
        }
        if (sendTail - sendHead >= sendSlots.length) {
            throw new VerbsException(VerbsException.Reason.NO_RESOURCES, "ibv_post_send: send queue full ("
                + sendSlots.length + " outstanding); poll the completion queue, or signal more often");
        }
        SendSlot slot = sendSlots[(int) (sendTail % sendSlots.length)];
        slot.copyFrom(request, init.signalAll());
        if ((request.flags() & SendFlag.INLINE) != 0 && slot.length > 0) {
            copyInline(slot);
        }
        sendTail++;
        if (current == QueuePairState.ERROR) {
            flushSends();
            return false;
        }
        if (executesSendsUnderPostLock()) {
            onSendPostedLocked(); // saves a second lock round trip per post
            return false;
        }
        return true;
    }

    /**
     * Whether {@link #postSend} should start execution with {@link #onSendPostedLocked()} while it still holds the
     * lock, instead of calling {@link #onSendPosted()} after releasing it. For providers whose execution runs under
     * the lock anyway (a memory copy, no blocking I/O). Default false.
     */
    protected boolean executesSendsUnderPostLock() {
        return false;
    }

    /**
     * Called by {@link #postSend} under the lock, on an open QP not in ERR, after a send was queued, when
     * {@link #executesSendsUnderPostLock()} is true.
     */
    protected void onSendPostedLocked() {
        throw new UnsupportedOperationException("onSendPostedLocked");
    }

    private void validateSend(SendWorkRequest request) {
        SendOpcode opcode = request.opcode();
        if (opcode == null) {
            throw invalidRequest("opcode is null");
        }
        if (request.sgeCount() > init.maxSendSge()) {
            throw invalidRequest(request.sgeCount() + " sges, the QP allows " + init.maxSendSge());
        }
        long length = request.totalLength();
        for (int i = 0; i < request.sgeCount(); i++) {
            if (request.sge(i).length() < 0) {
                throw invalidRequest("negative sge length");
            }
        }
        if ((request.flags() & SendFlag.INLINE) != 0) {
            if (opcode != SendOpcode.SEND && opcode != SendOpcode.SEND_WITH_IMM && opcode != SendOpcode.RDMA_WRITE
                && opcode != SendOpcode.RDMA_WRITE_WITH_IMM) {
                throw invalidRequest("INLINE is valid only for SEND and RDMA WRITE, not " + opcode);
            }
            if (length > init.maxInlineData()) {
                throw invalidRequest("inline payload of " + length + " bytes above max_inline_data "
                    + init.maxInlineData());
            }
        }
        if (opcode.isAtomic()) {
            if (request.sgeCount() != 1 || request.sge(0).length() != 8) {
                throw invalidRequest("atomics need exactly one 8-byte local sge");
            }
            if ((request.remoteAddress() & 7) != 0) {
                throw invalidRequest("atomic remote address 0x" + Long.toHexString(request.remoteAddress())
                    + " is not 8-byte aligned");
            }
        }
        if (length > context.query().maxMessageSize()) {
            throw invalidRequest("message of " + length + " bytes above max_msg_sz " + context.query().maxMessageSize());
        }
    }

    private static VerbsException invalidRequest(String message) {
        return new VerbsException(VerbsException.Reason.INVALID_ARGUMENT, "ibv_post_send: " + message);
    }

    private void copyInline(SendSlot slot) {
        long offset = 0;
        for (int i = 0; i < slot.sgeCount; i++) {
            int len = slot.sgeLength[i];
            if (len == 0) {
                continue;
            }
            // The lkey is not checked for inline data (ibv_post_send(3)); use the region when it matches.
            SoftMemoryRegion region = context.localKeys().get(slot.sgeLkey[i]);
            MemorySegment source;
            long sourceOffset;
            if (region != null && region.isValid() && region.contains(slot.sgeAddress[i], len)) {
                source = region.segment();
                sourceOffset = slot.sgeAddress[i] - region.address();
            } else {
                source = MemorySegment.ofAddress(slot.sgeAddress[i]).reinterpret(len);
                sourceOffset = 0;
            }
            MemorySegment.copy(source, sourceOffset, slot.inlineData, offset, len);
            offset += len;
        }
        slot.inline = true;
    }

    @Override
    public void postReceive(ReceiveWorkRequest request) {
        if (request.sgeCount() > init.maxReceiveSge()) {
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT,
                "ibv_post_recv: " + request.sgeCount() + " sges, the QP allows " + init.maxReceiveSge());
        }
        lock.lock();
        try {
            ensureOpen();
            QueuePairState current = state;
            if (current == QueuePairState.RESET) {
                throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT,
                    "ibv_post_recv: QP is in RESET; receives can be posted from INIT on");
            }
            if (receiveTail - receiveHead >= receiveSlots.length) {
                throw new VerbsException(VerbsException.Reason.NO_RESOURCES,
                    "ibv_post_recv: receive queue full (" + receiveSlots.length + " outstanding)");
            }
            ReceiveSlot slot = receiveSlots[(int) (receiveTail % receiveSlots.length)];
            slot.copyFrom(request);
            receiveTail++;
            if (current == QueuePairState.ERROR) {
                flushReceives();
            } else {
                onReceivePosted(slot, receiveTail - 1);
            }
        } finally {
            lock.unlock();
        }
    }

    /** Called (without the lock) after a send was queued in a state that executes it. */
    protected abstract void onSendPosted();

    /**
     * Called (without the lock) after a post list queued sends in a state that executes them, instead of
     * {@link #onSendPosted()}; by default the same. A provider whose poster does the I/O may share a long list's work
     * with its own threads (tcp).
     */
    protected void onSendListPosted() {
        onSendPosted();
    }

    /** Called under the lock after a receive was queued; {@code index} is its position in the ring sequence. */
    protected void onReceivePosted(ReceiveSlot slot, long index) {
    }

    // ------------------------------------------------------------------------------------------------ completion

    /** The send slot at ring position {@code index}. */
    protected final SendSlot sendSlot(long index) {
        return sendSlots[(int) (index % sendSlots.length)];
    }

    /** The receive slot at ring position {@code index}. */
    protected final ReceiveSlot receiveSlot(long index) {
        return receiveSlots[(int) (index % receiveSlots.length)];
    }

    /**
     * Completes the oldest send (must hold the lock). A completion is generated when the request was signaled or
     * failed; a failure other than a flush moves the QP to ERR and flushes everything else.
     */
    protected final void completeSend(WorkCompletionStatus status, int byteLength, int vendorError) {
        SendSlot slot = sendSlot(sendHead);
        QueuePairState before = failsQueuePair(status) ? markError() : null;
        if (slot.signaled || status != WorkCompletionStatus.SUCCESS) {
            sendQueue.push(slot.wrId, status, slot.opcode.completionOpcode(), byteLength, 0, false,
                queuePairNumber, 0, vendorError);
        }
        sendHead++;
        if (sendNext < sendHead) {
            sendNext = sendHead;
        }
        if (before != null) {
            finishError(before, status.name());
        }
    }

    /** Completes the oldest receive (must hold the lock); an error status moves the QP to ERR. */
    protected final void completeReceive(WorkCompletionStatus status, WorkCompletionOpcode opcode, int byteLength,
                                         int immediateData, boolean withImmediate, int sourceQpNumber) {
        ReceiveSlot slot = receiveSlot(receiveHead);
        QueuePairState before = failsQueuePair(status) ? markError() : null;
        receiveQueue.push(slot.wrId, status, opcode, byteLength, immediateData, withImmediate, queuePairNumber,
            sourceQpNumber, 0);
        receiveHead++;
        if (before != null) {
            finishError(before, status.name());
        }
    }

    /** Whether a completion with {@code status} moves this QP to ERR (an error, not a flush, while not in ERR). */
    private boolean failsQueuePair(WorkCompletionStatus status) {
        return status != WorkCompletionStatus.SUCCESS && status != WorkCompletionStatus.WR_FLUSH_ERR
            && state != QueuePairState.ERROR;
    }

    /**
     * Sets the state to ERR before an error completion is pushed, so that a poller that sees the completion finds
     * the QP in ERR (ibv_poll_cq(3): the QP is in the error state once an error completion is generated); the
     * flushes follow the error completion ({@link #finishError}). Returns the state before.
     */
    private QueuePairState markError() {
        QueuePairState previous = state;
        state = QueuePairState.ERROR;
        return previous;
    }

    /**
     * Moves the QP to ERR (must hold the lock): flushes every outstanding send and receive with WR_FLUSH_ERR and
     * tells the provider, which tells the peer.
     */
    protected final void enterError() {
        enterError("link or peer failure");
    }

    /** {@link #enterError()}, saying why in the {@code io.jccl.QueuePairError} JFR event. */
    protected final void enterError(String reason) {
        if (state == QueuePairState.ERROR) {
            return;
        }
        QueuePairState previous = state;
        state = QueuePairState.ERROR;
        finishError(previous, reason);
    }

    /** The rest of entering ERR once the state says so: the JFR event, the flushes, the provider's part. */
    private void finishError(QueuePairState previous, String reason) {
        QueuePairErrorEvent.emit(context.device().name(), queuePairNumber, destQpNumber, reason, previous.name());
        flushSends();
        flushReceives();
        onError();
    }

    /** Completes every outstanding send with WR_FLUSH_ERR (must hold the lock). */
    protected void flushSends() {
        while (sendHead < sendTail) {
            completeSend(WorkCompletionStatus.WR_FLUSH_ERR, 0, 0);
        }
        sendNext = sendHead;
    }

    /** Completes every outstanding receive with WR_FLUSH_ERR (must hold the lock). */
    protected void flushReceives() {
        while (receiveHead < receiveTail) {
            completeReceive(WorkCompletionStatus.WR_FLUSH_ERR, WorkCompletionOpcode.RECV, 0, 0, false, 0);
        }
    }

    /** Called under the lock when the QP entered ERR; providers tell the peer and release in-flight state. */
    protected abstract void onError();

    /** Moves the QP to ERR from a provider thread (takes the lock). */
    public final void fail() {
        lock.lock();
        try {
            enterError();
        } finally {
            lock.unlock();
        }
    }

    // ------------------------------------------------------------------------------------------------ memory checks

    /**
     * The local region for a scatter/gather entry, or null when the lkey is unknown or deregistered, the region
     * is in another protection domain, the range is outside it, or {@code write} is needed and LOCAL_WRITE is not
     * granted (→ LOC_PROT_ERR).
     */
    protected final SoftMemoryRegion localRegion(long address, long length, int lkey, boolean write) {
        SoftMemoryRegion region = context.localKeys().get(lkey);
        if (region == null || !region.isValid() || region.domain() != domain || !region.contains(address, length)) {
            return null;
        }
        if (write && !region.allows(AccessFlag.LOCAL_WRITE)) {
            return null;
        }
        return region;
    }

    /**
     * Responder check of a one-sided request against this QP's domain: the rkey names a live region of this
     * domain, the range lies inside it and the region grants {@code needed}. Null means REM_ACCESS_ERR.
     */
    protected final SoftMemoryRegion remoteRegion(int rkey, long address, long length, AccessFlag needed) {
        SoftMemoryRegion region = context.remoteKeys().get(rkey);
        if (region == null || !region.isValid() || region.domain() != domain || !region.contains(address, length)
            || !region.allows(needed)) {
            return null;
        }
        return region;
    }

    /** Whether this QP's qp_access_flags accept an incoming {@code opcode} (else REM_INV_REQ_ERR, as rxe). */
    protected final boolean acceptsIncoming(SendOpcode opcode) {
        return switch (opcode) {
            case RDMA_WRITE, RDMA_WRITE_WITH_IMM -> AccessFlag.REMOTE_WRITE.isSetIn(accessFlags);
            case RDMA_READ -> AccessFlag.REMOTE_READ.isSetIn(accessFlags);
            case ATOMIC_CMP_AND_SWP, ATOMIC_FETCH_AND_ADD -> AccessFlag.REMOTE_ATOMIC.isSetIn(accessFlags);
            case SEND, SEND_WITH_IMM -> true;
        };
    }

    /**
     * Copies a send's payload (inline copy or scatter/gather list) into {@code target} at {@code targetOffset}.
     *
     * @return false when a local entry fails its lkey/range check (→ LOC_PROT_ERR)
     */
    protected final boolean gather(SendSlot slot, long skip, MemorySegment target, long targetOffset, long length) {
        if (slot.inline) {
            MemorySegment.copy(slot.inlineData, skip, target, targetOffset, length);
            return true;
        }
        long position = 0;
        long remaining = length;
        for (int i = 0; i < slot.sgeCount && remaining > 0; i++) {
            int len = slot.sgeLength[i];
            if (position + len <= skip) {
                position += len;
                continue;
            }
            SoftMemoryRegion region = localRegion(slot.sgeAddress[i], len, slot.sgeLkey[i], false);
            if (region == null) {
                return false;
            }
            long from = Math.max(0, skip - position);
            long n = Math.min(len - from, remaining);
            MemorySegment.copy(region.segment(), slot.sgeAddress[i] - region.address() + from, target, targetOffset,
                n);
            targetOffset += n;
            remaining -= n;
            position += len;
        }
        return true;
    }

    /** Checks every local entry of a send (for providers that gather later). */
    protected final boolean checkLocal(SendSlot slot, boolean write) {
        if (slot.inline) {
            return true;
        }
        for (int i = 0; i < slot.sgeCount; i++) {
            if (slot.sgeLength[i] > 0
                && localRegion(slot.sgeAddress[i], slot.sgeLength[i], slot.sgeLkey[i], write) == null) {
                return false;
            }
        }
        return true;
    }

    /**
     * Copies {@code length} bytes from {@code source} at {@code sourceOffset} into a receive's (or READ's)
     * scatter list, starting {@code skip} bytes into it.
     *
     * @return false when a local entry fails its lkey/range/LOCAL_WRITE check
     */
    protected final boolean scatter(long[] sgeAddress, int[] sgeLength, int[] sgeLkey, int sgeCount, long skip,
                                    MemorySegment source, long sourceOffset, long length) {
        long position = 0;
        long remaining = length;
        for (int i = 0; i < sgeCount && remaining > 0; i++) {
            int len = sgeLength[i];
            if (position + len <= skip) {
                position += len;
                continue;
            }
            SoftMemoryRegion region = localRegion(sgeAddress[i], len, sgeLkey[i], true);
            if (region == null) {
                return false;
            }
            long from = Math.max(0, skip - position);
            long n = Math.min(len - from, remaining);
            MemorySegment.copy(source, sourceOffset, region.segment(), sgeAddress[i] - region.address() + from, n);
            sourceOffset += n;
            remaining -= n;
            position += len;
        }
        return remaining == 0;
    }

    // ------------------------------------------------------------------------------------------------ lifecycle

    /** Throws CLOSED after {@link #close()}. */
    protected final void ensureOpen() {
        if (closed) {
            throw new VerbsException(VerbsException.Reason.CLOSED, "queue pair 0x" + Integer.toHexString(queuePairNumber)
                + " is destroyed");
        }
    }

    /** Whether the QP was destroyed. */
    protected final boolean isClosed() {
        return closed;
    }

    @Override
    public void close() {
        lock.lock();
        try {
            if (closed) {
                return;
            }
            closed = true;
            if (state != QueuePairState.ERROR && state != QueuePairState.RESET) {
                // Tell the peer, as a destroyed hardware QP stops answering and the peer's requests fail.
                state = QueuePairState.ERROR;
                onError();
            }
            state = QueuePairState.RESET;
        } finally {
            lock.unlock();
        }
        sendQueue.detach(this);
        if (receiveQueue != sendQueue) {
            receiveQueue.detach(this);
        }
        sendQueue.removeUser();
        receiveQueue.removeUser();
        context.queuePairs().remove(queuePairNumber);
        domain.queuePairClosed(this);
        destroy();
        arena.close();
    }

    /** Releases provider resources (called once, after the QP left every table). */
    protected abstract void destroy();

    @Override
    public String toString() {
        return getClass().getSimpleName() + "{qpn=0x" + Integer.toHexString(queuePairNumber) + ", " + state.shortName()
            + "}";
    }
}
