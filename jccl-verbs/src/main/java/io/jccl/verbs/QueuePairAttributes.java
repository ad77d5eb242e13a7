package io.jccl.verbs;

import java.util.EnumSet;
import java.util.Set;

/**
 * Attributes for {@link QueuePair#modify(QueuePairAttributes)} ({@code struct ibv_qp_attr} plus its mask): every
 * setter also marks its attribute in {@link #mask()}, so only what was set is applied. Which attributes a state
 * transition requires and allows follows ibv_modify_qp(3) exactly; anything else makes the call fail and change
 * nothing.
 */
public final class QueuePairAttributes {
    private final EnumSet<QueuePairAttribute> mask = EnumSet.noneOf(QueuePairAttribute.class);
    private QueuePairState state;
    private QueuePairState currentState;
    private int accessFlags;
    private int pkeyIndex;
    private int port = 1;
    private Endpoint remote;
    private PathMtu pathMtu = PathMtu.MTU_4096;
    private int timeout;
    private int retryCount;
    private int rnrRetry;
    private int rqPsn;
    private int sqPsn;
    private int maxRdAtomic;
    private int maxDestRdAtomic;
    private int minRnrTimer;
    private int destQpNumber;
    private int qkey;
    private boolean enableSqdAsyncNotify;

    private QueuePairAttributes mark(QueuePairAttribute attribute) {
        mask.add(attribute);
        return this;
    }

    /** Attributes for RESET→INIT: state, pkey index 0, port 1 and the given remote access rights. */
    public static QueuePairAttributes toInit(AccessFlag... remoteAccess) {
        return new QueuePairAttributes().state(QueuePairState.INIT).pkeyIndex(0).port(1)
            .accessFlags(AccessFlag.toMask(remoteAccess));
    }

    /**
     * Attributes for INIT→RTR towards {@code remote}: its QPN, its initial PSN as our receive PSN, MTU 4096,
     * 16 incoming READs/atomics and an RNR timer of 0.01 ms (code 1).
     */
    public static QueuePairAttributes toReadyToReceive(Endpoint remote) {
        return new QueuePairAttributes().state(QueuePairState.READY_TO_RECEIVE).remote(remote)
            .pathMtu(PathMtu.MTU_4096).destQpNumber(remote.queuePairNumber()).rqPsn(remote.packetSequenceNumber())
            .maxDestRdAtomic(16).minRnrTimer(1);
    }

    /**
     * Attributes for RTR→RTS with our initial PSN: timeout 14 (67 ms, perftest's default), retry count 7,
     * RNR retry 7 (infinite) and 16 outstanding READs/atomics.
     */
    public static QueuePairAttributes toReadyToSend(int sqPsn) {
        return new QueuePairAttributes().state(QueuePairState.READY_TO_SEND).sqPsn(sqPsn).timeout(14).retryCount(7)
            .rnrRetry(7).maxRdAtomic(16);
    }

    /** Which attributes are set. */
    public Set<QueuePairAttribute> mask() {
        return mask;
    }

    /** Whether {@code attribute} is set. */
    public boolean has(QueuePairAttribute attribute) {
        return mask.contains(attribute);
    }

    /** Target state. */
    public QueuePairState state() {
        return state;
    }

    /** Sets the target state. */
    public QueuePairAttributes state(QueuePairState state) {
        this.state = state;
        return mark(QueuePairAttribute.STATE);
    }

    /** The state the caller believes the QP is in. */
    public QueuePairState currentState() {
        return currentState;
    }

    /** Sets the state the caller believes the QP is in (checked). */
    public QueuePairAttributes currentState(QueuePairState currentState) {
        this.currentState = currentState;
        return mark(QueuePairAttribute.CURRENT_STATE);
    }

    /** Remote access rights the QP grants ({@link AccessFlag} mask). */
    public int accessFlags() {
        return accessFlags;
    }

    /** Sets the remote access rights ({@link AccessFlag} mask). */
    public QueuePairAttributes accessFlags(int accessFlags) {
        this.accessFlags = accessFlags;
        return mark(QueuePairAttribute.ACCESS_FLAGS);
    }

    /** P_Key index. */
    public int pkeyIndex() {
        return pkeyIndex;
    }

    /** Sets the P_Key index. */
    public QueuePairAttributes pkeyIndex(int pkeyIndex) {
        this.pkeyIndex = pkeyIndex;
        return mark(QueuePairAttribute.PKEY_INDEX);
    }

    /** Port number (1-based). */
    public int port() {
        return port;
    }

    /** Sets the port number. */
    public QueuePairAttributes port(int port) {
        this.port = port;
        return mark(QueuePairAttribute.PORT);
    }

    /** The remote endpoint (address vector). */
    public Endpoint remote() {
        return remote;
    }

    /** Sets the remote endpoint (address vector). */
    public QueuePairAttributes remote(Endpoint remote) {
        this.remote = remote;
        return mark(QueuePairAttribute.ADDRESS_VECTOR);
    }

    /** Path MTU. */
    public PathMtu pathMtu() {
        return pathMtu;
    }

    /** Sets the path MTU. */
    public QueuePairAttributes pathMtu(PathMtu pathMtu) {
        this.pathMtu = pathMtu;
        return mark(QueuePairAttribute.PATH_MTU);
    }

    /** Local ACK timeout code: 4.096 µs × 2^timeout, 0 = infinite. */
    public int timeout() {
        return timeout;
    }

    /** Sets the local ACK timeout code (0..31). */
    public QueuePairAttributes timeout(int timeout) {
        this.timeout = timeout;
        return mark(QueuePairAttribute.TIMEOUT);
    }

    /** Transport retry count (0..7). */
    public int retryCount() {
        return retryCount;
    }

    /** Sets the transport retry count (0..7). */
    public QueuePairAttributes retryCount(int retryCount) {
        this.retryCount = retryCount;
        return mark(QueuePairAttribute.RETRY_COUNT);
    }

    /**
     * How long a request may go unanswered before the QP moves to ERROR with {@code RETRY_EXC_ERR}, for the given
     * codes: 4.096 µs × 2^timeout × (retryCount + 1); {@link Long#MAX_VALUE} for timeout 0 (infinite).
     */
    public static long linkTimeoutNs(int timeout, int retryCount) {
        if (timeout == 0) {
            return Long.MAX_VALUE;
        }
        return (4096L << timeout) * (retryCount + 1);
    }

    /**
     * Sets {@link #timeout(int)} and {@link #retryCount(int)} to the smallest pair whose {@link #linkTimeoutNs(int,
     * int) link timeout} is at least {@code ns} (within 25 %: the retry count refines the power of two); 0 or
     * {@link Long#MAX_VALUE} means infinite (timeout 0). Beyond the largest code (about 9.8 h × 8) it saturates.
     */
    public QueuePairAttributes linkTimeoutNs(long ns) {
        if (ns <= 0 || ns == Long.MAX_VALUE) {
            timeout(0);
            return retryCount(7);
        }
        int bestTimeout = 31;
        int bestRetry = 7;
        long best = Long.MAX_VALUE;
        for (int t = 1; t <= 31; t++) {
            for (int r = 0; r <= 7; r++) {
                long total = linkTimeoutNs(t, r);
                if (total >= ns && total < best) {
                    best = total;
                    bestTimeout = t;
                    bestRetry = r;
                }
            }
        }
        timeout(bestTimeout);
        return retryCount(bestRetry);
    }

    /** RNR retry count (0..7, 7 = infinite). */
    public int rnrRetry() {
        return rnrRetry;
    }

    /** Sets the RNR retry count (0..7, 7 = infinite). */
    public QueuePairAttributes rnrRetry(int rnrRetry) {
        this.rnrRetry = rnrRetry;
        return mark(QueuePairAttribute.RNR_RETRY);
    }

    /** Expected PSN of the first incoming request. */
    public int rqPsn() {
        return rqPsn;
    }

    /** Sets the expected PSN of the first incoming request (24 bits). */
    public QueuePairAttributes rqPsn(int rqPsn) {
        this.rqPsn = rqPsn;
        return mark(QueuePairAttribute.RQ_PSN);
    }

    /** PSN of our first request. */
    public int sqPsn() {
        return sqPsn;
    }

    /** Sets the PSN of our first request (24 bits). */
    public QueuePairAttributes sqPsn(int sqPsn) {
        this.sqPsn = sqPsn;
        return mark(QueuePairAttribute.SQ_PSN);
    }

    /** Outstanding READs/atomics this QP may initiate. */
    public int maxRdAtomic() {
        return maxRdAtomic;
    }

    /** Sets the outstanding READs/atomics this QP may initiate. */
    public QueuePairAttributes maxRdAtomic(int maxRdAtomic) {
        this.maxRdAtomic = maxRdAtomic;
        return mark(QueuePairAttribute.MAX_QP_RD_ATOMIC);
    }

    /** Incoming READs/atomics this QP accepts at once. */
    public int maxDestRdAtomic() {
        return maxDestRdAtomic;
    }

    /** Sets the incoming READs/atomics this QP accepts at once. */
    public QueuePairAttributes maxDestRdAtomic(int maxDestRdAtomic) {
        this.maxDestRdAtomic = maxDestRdAtomic;
        return mark(QueuePairAttribute.MAX_DEST_RD_ATOMIC);
    }

    /** Minimum RNR NAK timer code (0..31, see {@link RnrTimer}). */
    public int minRnrTimer() {
        return minRnrTimer;
    }

    /** Sets the minimum RNR NAK timer code (0..31). */
    public QueuePairAttributes minRnrTimer(int minRnrTimer) {
        this.minRnrTimer = minRnrTimer;
        return mark(QueuePairAttribute.MIN_RNR_TIMER);
    }

    /** Remote QP number. */
    public int destQpNumber() {
        return destQpNumber;
    }

    /** Sets the remote QP number. */
    public QueuePairAttributes destQpNumber(int destQpNumber) {
        this.destQpNumber = destQpNumber;
        return mark(QueuePairAttribute.DEST_QPN);
    }

    /** Q_Key (UD only). */
    public int qkey() {
        return qkey;
    }

    /** Sets the Q_Key (UD only: invalid for reliable-connected QPs). */
    public QueuePairAttributes qkey(int qkey) {
        this.qkey = qkey;
        return mark(QueuePairAttribute.QKEY);
    }

    /** Whether an async event is requested when the SQ drains. */
    public boolean enableSqdAsyncNotify() {
        return enableSqdAsyncNotify;
    }

    /** Requests an async event when the SQ drains (RTS→SQD). */
    public QueuePairAttributes enableSqdAsyncNotify(boolean enable) {
        this.enableSqdAsyncNotify = enable;
        return mark(QueuePairAttribute.ENABLE_SQD_ASYNC_NOTIFY);
    }

    @Override
    public String toString() {
        return "QueuePairAttributes" + mask;
    }
}
