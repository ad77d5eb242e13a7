package io.jccl.transport.tcp;

import io.jccl.common.SecureIds;
import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.Counter;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.QueuePairState;
import io.jccl.verbs.RnrTimer;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.VerbsException;
import io.jccl.verbs.WorkCompletionOpcode;
import io.jccl.verbs.WorkCompletionStatus;
import io.jccl.verbs.spi.AbstractQueuePair;
import io.jccl.verbs.spi.CounterSet;
import io.jccl.verbs.spi.ReceiveSlot;
import io.jccl.verbs.spi.SendSlot;
import io.jccl.verbs.spi.SoftMemoryRegion;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.CancelledKeyException;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.SelectionKey;
import java.nio.channels.SocketChannel;

/**
 * A reliable-connected queue pair over one TCP connection. The same connection carries this QP's requests and
 * its responses to the peer's requests, in both directions, so one object runs the requester (send queue,
 * completion on ACK/response, RNR retries, READ/atomic limits) and the responder (checks, direct placement of
 * WRITE and SEND payloads from the socket into registered memory, READ responses written straight from memory,
 * atomics, ACK/NAK generation). All of it runs under the QP's {@link #lock}, taken by the progress thread, by
 * posting threads that transmit directly, and by completion-queue polls that drive I/O themselves.
 */
final class TcpQueuePair extends AbstractQueuePair implements TcpEngine.Handler {
    // Connection states.
    private static final int C_IDLE = 0;
    private static final int C_RETRY_WAIT = 1;
    private static final int C_CONNECTING = 2;
    private static final int C_HANDSHAKE = 3;
    private static final int C_WAIT_PEER = 4;
    private static final int C_UP = 5;
    private static final int C_CLOSING = 6;
    private static final int C_CLOSED = 7;

    // What to do when an incoming payload has been placed.
    private static final int A_NONE = 0;
    private static final int A_WRITE = 1;
    private static final int A_WRITE_IMM = 2;
    private static final int A_SEND = 3;
    private static final int A_READ_RESPONSE = 4;
    private static final int A_DISCARD = 5;

    /** Payloads up to this size are copied into the frame buffer: one write() per small message. */
    private static final int SMALL = 16 * 1024;
    private static final int STAGING = 32 * 1024;
    private static final long READ_BUDGET = 4L << 20;
    /**
     * Bytes one output pump writes before it lets go of the QP lock: a posting or polling thread that could keep
     * writing while the peer drains would otherwise hold the lock (and not poll) for tens of milliseconds, and the
     * progress thread would take over and contend with it. Not final only so that a test can make it small enough
     * to be hit whatever the socket buffers and the machine's load (at 4 MiB a busy reader fills the socket first).
     */
    static long writeBudget = 4L << 20;
    private static final long CLOSE_LINGER_NS = 2_000_000_000L;
    private static final long PARK_TIMEOUT_NS = 30_000_000_000L;
    private static final VarHandle LONG = ValueLayout.JAVA_LONG.varHandle();

    final TcpContext tcp;
    final TcpEngine engine;
    private final CounterSet counters;
    private final long secretHigh;
    private final long secretLow;
    private final String addressText;
    /** Why the last connection was dropped for bad input (diagnostics; shown by toString). */
    private volatile String lastProtocolError;
    /** Set by posting threads that could not take the lock; the progress thread picks the QP up. */
    volatile boolean kicked;
    /**
     * A CQ poll that did this QP's I/O less than this long ago means an application thread is driving it: the
     * progress thread stays out of the way (see {@link TcpEngine}'s standby). Longer than a scheduler time slice,
     * so a poller preempted for a moment does not hand the I/O to the progress thread.
     */
    static final long DRIVEN_NS = 1_000_000L;
    /** How long after the application's last poll a held-back ACK is left to it (see {@link #ackHeld}). */
    static final long ACK_HOLD_NS = 200_000L;
    /** When an application poll last drove this QP (or found the lock held by someone doing its I/O). */
    private volatile long drivenNs = System.nanoTime() - (1L << 62);

    // ------------------------------------------------------------------------------------------ connection
    private volatile int conn = C_IDLE;
    private SocketChannel channel;
    private SelectionKey key;
    private boolean connector;
    private EndpointAddress peer;
    private int peerMaxDestRdAtomic = 1;
    private long connectStartNs;
    private long nextAttemptNs;
    private long backoffNs;
    private long closeDeadlineNs;
    private boolean outputShut;
    /** How long after the last frame a CQ poll keeps reading an otherwise idle connection. */
    private static final long RECENT_ACTIVITY_NS = 10_000_000L;
    private long lastRxNs;
    private long lastTxNs;
    /** An incoming connection that arrived before this QP reached RTR. */
    private SocketChannel parked;
    private int parkedQpn;
    private long parkedHigh;
    private long parkedLow;
    private int parkedMaxDest;
    private long parkedDeadlineNs;

    // ------------------------------------------------------------------------------------------ input
    private final MemorySegment inSegment;
    /** Staging buffer, kept in read mode: position = next unparsed byte, limit = end of data. */
    private final ByteBuffer in;
    private final RegionViews inViews = new RegionViews();
    private boolean rxDrainAll;
    private boolean rxPaused;
    private int rxAction = A_NONE;
    private int rxLength;
    private int rxImmediate;
    private boolean rxHasImmediate;
    private final SoftMemoryRegion[] sinkRegion;
    private final long[] sinkOffset;
    private final long[] sinkLength;
    private int sinkCount;
    private int sinkIndex;
    private long sinkDone;
    private boolean rnrDiscarding;
    private int rnrDiscardPsn;

    // ------------------------------------------------------------------------------------------ output
    private final MemorySegment outSegment;
    private final ByteBuffer out;
    /** Bytes written by the current output pump. */
    private long pumpBytes;
    /** Output pumps that stopped at {@link #writeBudget} with more to write (tests, diagnostics). */
    private long budgetStops;
    /** Header + payload piece for gathering writes. */
    private final ByteBuffer[] gather = new ByteBuffer[2];
    private boolean outPending;
    private final RegionViews outViews = new RegionViews();
    private final SoftMemoryRegion[] sourceRegion;
    private final long[] sourceOffset;
    private final long[] sourceLength;
    private int sourceCount;
    private int sourceIndex;
    private long sourceDone;

    // ------------------------------------------------------------------------------------------ responder
    private int[] respType = new int[0];
    private int[] respPsn;
    private int[] respSyndrome;
    private SoftMemoryRegion[] respRegion;
    private long[] respOffset;
    private int[] respLength;
    private long[] respValue;
    private long respHead;
    private long respTail;
    /** ACK word for the next request header built (0: none); consumed, with the ring's last ACK, by header(). */
    private int carryAck;
    /**
     * A CQ poll just handed the application a message, which it will probably answer at once: the ACK for it
     * (the ring's only entry) waits for that answer to ride on, for at most one more poll or one standby tick.
     */
    private volatile boolean ackHeld;
    /** Receive completions produced (to tell whether a poll delivered a message). */
    private long receivesDelivered;
    /**
     * Messages above this size are not answered at once (the application first copies or reduces them), so a poll
     * that delivers one does not hold its ACK: the sender's completion, and the reuse of its buffer, wait for it.
     */
    static final int HOLD_MAX_BYTES = SMALL;
    /** Whether the current poll delivered a message above {@link #HOLD_MAX_BYTES}. */
    private boolean largeDelivered;
    /** ACK frames sent on their own, and ACKs carried in a request header (diagnostics and tests). */
    private long standaloneAcks;
    private long piggybackedAcks;

    // ------------------------------------------------------------------------------------------ requester
    private int inFlightReadAtomic;
    private long rnrResumeNs;
    private long localErrorIndex = -1;
    private WorkCompletionStatus localErrorStatus;

    TcpQueuePair(TcpProtectionDomain domain, TcpContext tcp, QueuePairInitAttributes init) {
        // Assigned before super(): the superclass publishes the QP in the context's QP table, where the
        // listener may look it up, and the secret must never be seen as zero.
        long high = SecureIds.nonce();
        long low = SecureIds.nonce();
        this.secretHigh = high;
        this.secretLow = low;
        this.tcp = tcp;
        this.counters = tcp.counterSet();
        this.engine = tcp.nextEngine();
        super(domain, init);
        this.addressText = new EndpointAddress(tcp.advertised, high, low).format();
        inSegment = arena.allocate(STAGING, 64);
        in = inSegment.asByteBuffer();
        in.limit(0);
        outSegment = arena.allocate(Wire.HEADER + Math.max(SMALL, TcpContext.MAX_INLINE), 64);
        out = outSegment.asByteBuffer();
        int sges = Math.max(init.maxSendSge(), init.maxReceiveSge()) + 1;
        sinkRegion = new SoftMemoryRegion[sges];
        sinkOffset = new long[sges];
        sinkLength = new long[sges];
        sourceRegion = new SoftMemoryRegion[sges];
        sourceOffset = new long[sges];
        sourceLength = new long[sges];
        engine.add(this);
    }

    @Override
    protected String localAddress() {
        return addressText;
    }

    /** Constant-time check of a presented secret. */
    boolean secretMatches(long high, long low) {
        return ((high ^ secretHigh) | (low ^ secretLow)) == 0;
    }

    // ================================================================================================ transitions

    @Override
    protected void beforeTransition(QueuePairState from, QueuePairState to, QueuePairAttributes attributes) {
        if (from == QueuePairState.INIT && to == QueuePairState.READY_TO_RECEIVE) {
            var remote = attributes.remote();
            if (!TcpProvider.NAME.equals(remote.provider())) {
                throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT, "ibv_modify_qp: remote endpoint "
                    + remote + " belongs to provider '" + remote.provider() + "'; a tcp QP connects only to tcp QPs");
            }
            EndpointAddress.parse(remote.address());
            if (remote.queuePairNumber() == queuePairNumber && remote.address().equals(addressText)) {
                throw new VerbsException(VerbsException.Reason.UNSUPPORTED, "ibv_modify_qp: a tcp QP cannot be "
                    + "connected to itself; create a second QP");
            }
        }
    }

    @Override
    protected void afterTransition(QueuePairState from, QueuePairState to) {
        if (to == QueuePairState.RESET) {
            hardClose();
            resetProtocol();
            conn = C_IDLE;
        } else if (from == QueuePairState.INIT && to == QueuePairState.READY_TO_RECEIVE) {
            startConnection();
        } else if (to == QueuePairState.READY_TO_SEND && conn == C_UP) {
            kickSelf();
        }
    }

    private void resetProtocol() {
        in.clear().limit(0);
        out.clear().limit(0);
        outPending = false;
        sourceCount = sourceIndex = 0;
        sourceDone = 0;
        sinkCount = sinkIndex = 0;
        sinkDone = 0;
        rxAction = A_NONE;
        rxDrainAll = false;
        rxPaused = false;
        rnrDiscarding = false;
        respHead = respTail = 0;
        carryAck = 0;
        ackHeld = false;
        inFlightReadAtomic = 0;
        rnrResumeNs = 0;
        localErrorIndex = -1;
        outputShut = false;
        inViews.clear();
        outViews.clear();
    }

    private void startConnection() {
        resetProtocol();
        peer = EndpointAddress.parse(remote.address());
        int cmp = Integer.compare(queuePairNumber, destQpNumber);
        if (cmp == 0) {
            cmp = Long.compareUnsigned(secretHigh, peer.secretHigh());
        }
        // Exactly one side connects: the one with the larger (QPN, secret). No extra round trip to agree.
        connector = cmp > 0;
        connectStartNs = System.nanoTime();
        backoffNs = 10_000_000L;
        int depth = Math.max(1, maxDestRdAtomic);
        if (respType.length != 2 * depth + 4) {
            int n = 2 * depth + 4;
            respType = new int[n];
            respPsn = new int[n];
            respSyndrome = new int[n];
            respRegion = new SoftMemoryRegion[n];
            respOffset = new long[n];
            respLength = new int[n];
            respValue = new long[n];
        }
        if (connector) {
            connectNow();
        } else {
            conn = C_WAIT_PEER;
            if (parked != null) {
                SocketChannel candidate = parked;
                parked = null;
                acceptIncoming(candidate, parkedQpn, parkedHigh, parkedLow, parkedMaxDest);
            }
        }
        engine.schedule(connectDeadlineNs());
    }

    private long connectDeadlineNs() {
        long budget = RnrTimer.ackTimeoutNs(timeout) * (retryCount + 1);
        return connectStartNs + Math.max(budget, tcp.settings.connectTimeoutMs() * 1_000_000L);
    }

    private void connectNow() {
        SocketChannel ch = null;
        try {
            ch = SocketChannel.open();
            tcp.configure(ch);
            boolean done = ch.connect(peer.socketAddress());
            channel = ch;
            conn = C_CONNECTING;
            SocketChannel registered = ch;
            int ops = done ? SelectionKey.OP_WRITE : SelectionKey.OP_CONNECT;
            engine.execute(() -> register(registered, ops));
        } catch (IOException | RuntimeException e) {
            TcpContext.closeQuietly(ch);
            channel = null;
            retryLater();
        }
    }

    /** Registers our channel with the engine's selector (on the engine thread). */
    private void register(SocketChannel ch, int ops) {
        lock.lock();
        try {
            if (channel != ch || conn == C_CLOSED || conn == C_IDLE || conn == C_RETRY_WAIT) {
                return;
            }
            key = ch.register(engine.selector, ops, this);
            if (conn == C_UP) {
                ioRound();
            }
        } catch (CancelledKeyException e) {
            // The channel's old key (from the listener's handshake) is deregistered at the next select.
            engine.execute(() -> register(ch, ops));
        } catch (ClosedChannelException e) {
            onLinkLost();
        } catch (IOException e) {
            onLinkLost();
        } finally {
            lock.unlock();
        }
    }

    private void retryLater() {
        closeChannel();
        long now = System.nanoTime();
        if (now - connectDeadlineNs() >= 0) {
            connectFailed();
            return;
        }
        conn = C_RETRY_WAIT;
        nextAttemptNs = now + backoffNs;
        backoffNs = Math.min(backoffNs * 2, 200_000_000L);
        engine.schedule(nextAttemptNs);
    }

    private void connectFailed() {
        counters.increment(Counter.LOCAL_ACK_TIMEOUT_ERR);
        closeChannel();
        conn = C_CLOSED;
        failQueuePair(WorkCompletionStatus.RETRY_EXC_ERR);
    }

    /** The oldest outstanding send completes with {@code status} (or, with none, the QP just enters ERR). */
    private void failQueuePair(WorkCompletionStatus status) {
        if (state == QueuePairState.ERROR || isClosed()) {
            return;
        }
        if (sendHead < sendTail) {
            completeSend(status, 0, 0);
        }
        enterError();
    }

    /** A connection that passed the listener's secret check arrives for this QP (engine thread). */
    void offerIncoming(SocketChannel ch, int srcQpn, long srcHigh, long srcLow, int peerMaxDest) {
        lock.lock();
        try {
            if (isClosed()) {
                TcpContext.closeQuietly(ch);
                return;
            }
            QueuePairState s = state;
            if (s == QueuePairState.RESET || s == QueuePairState.INIT) {
                // The peer reached RTR first: keep the connection until we get there.
                TcpContext.closeQuietly(parked);
                parked = ch;
                parkedQpn = srcQpn;
                parkedHigh = srcHigh;
                parkedLow = srcLow;
                parkedMaxDest = peerMaxDest;
                parkedDeadlineNs = System.nanoTime() + PARK_TIMEOUT_NS;
                engine.schedule(parkedDeadlineNs);
                return;
            }
            if (conn != C_WAIT_PEER || connector) {
                counters.increment(Counter.PORT_RCV_ERRORS);
                TcpContext.closeQuietly(ch);
                return;
            }
            acceptIncoming(ch, srcQpn, srcHigh, srcLow, peerMaxDest);
        } finally {
            lock.unlock();
        }
    }

    private void acceptIncoming(SocketChannel ch, int srcQpn, long srcHigh, long srcLow, int peerMaxDest) {
        if ((srcQpn ^ destQpNumber | (srcHigh ^ peer.secretHigh()) | (srcLow ^ peer.secretLow())) != 0) {
            // Knows our secret but is not the QP we were connected to.
            counters.increment(Counter.PORT_RCV_ERRORS);
            TcpContext.closeQuietly(ch);
            return;
        }
        channel = ch;
        peerMaxDestRdAtomic = Math.max(1, peerMaxDest);
        out.clear();
        writeHello(out, Wire.KIND_ACCEPT);
        out.flip();
        outPending = true;
        connectionUp();
        try {
            key = ch.register(engine.selector, SelectionKey.OP_READ | SelectionKey.OP_WRITE, this);
            if (Thread.currentThread() != engine.thread) {
                engine.wakeupIfSleeping();
            }
            ioRound();
        } catch (CancelledKeyException e) {
            engine.execute(() -> register(ch, SelectionKey.OP_READ | SelectionKey.OP_WRITE));
        } catch (IOException e) {
            onLinkLost();
        }
    }

    private void writeHello(ByteBuffer b, int kind) {
        b.putInt(Wire.MAGIC).put((byte) Wire.VERSION).put((byte) kind).putShort((short) 0);
        b.putInt(destQpNumber).putInt(queuePairNumber);
        b.putLong(peer.secretHigh()).putLong(peer.secretLow());
        b.putLong(secretHigh).putLong(secretLow);
        b.putInt(Math.max(1, maxDestRdAtomic)).putInt(0).putLong(0);
    }

    private void connectionUp() {
        conn = C_UP;
        SocketChannel ch = channel;
        if (tcp.notSentLowatBytes > 0 && ch != null) {
            try {
                if (ch.getRemoteAddress() instanceof java.net.InetSocketAddress remote
                    && !remote.getAddress().isLoopbackAddress()) {
                    SocketTuning.setNotSentLowatLater(ch, tcp.notSentLowatBytes);
                }
            } catch (IOException e) {
                // the connection is failing; its I/O reports that
            }
        }
        long now = System.nanoTime();
        lastRxNs = now;
        lastTxNs = now;
    }

    // ================================================================================================ engine entry

    /** Whether the connection is up (for the engine's standby decision). */
    boolean connected() {
        return conn == C_UP;
    }

    /** Whether an application poll drove this QP recently. */
    boolean drivenAt(long now) {
        return now - drivenNs < DRIVEN_NS;
    }

    @Override
    public void onSelected(SelectionKey selected) {
        long now = System.nanoTime();
        if (conn == C_UP && (engine.inStandby() ? drivenAt(now) : ackHeld && now - drivenNs < ACK_HOLD_NS)) {
            return; // an application thread is polling this QP and does its I/O; readiness is reported again
        }
        // Never park the progress thread behind an application thread: whoever holds the lock is doing this QP's
        // I/O already, and readiness is level-triggered, so anything left is reported again by the next select.
        // That holder drives the QP (as in progress()): without saying so, the progress thread would see the
        // still-ready key on every select and loop on it, taking the core from the holder (measured: 15-17 % of
        // a core per rank during 16 MiB all-reduces over tcp on 2 cores, while the application threads waited
        // for a core a third of the time).
        if (!lock.tryLock()) {
            drivenNs = now;
            return;
        }
        try {
            switch (conn) {
                case C_CONNECTING -> finishConnect();
                case C_HANDSHAKE -> readAccept();
                case C_UP, C_CLOSING -> ioRound();
                default -> selected.cancel();
            }
        } catch (IOException e) {
            onLinkLost();
        } catch (RuntimeException e) {
            onInternalError(e);
        } finally {
            lock.unlock();
        }
    }

    void onKick() {
        if (ackHeld && System.nanoTime() - drivenNs < ACK_HOLD_NS) {
            // The application polls this QP and will send the held ACK (on its answer or at its next poll).
            kicked = true;
            engine.kickLazily();
            return;
        }
        if (!lock.tryLock()) {
            // The holder may have missed the new request: look again on the next round. Lazily: the holder is
            // doing this QP's I/O (it drives the QP, as in onSelected), and a driven QP's next poll pumps its
            // output anyway; an urgent re-kick here kept the progress thread looping for as long as an
            // application thread held the lock.
            drivenNs = System.nanoTime();
            kicked = true;
            engine.kickLazily();
            return;
        }
        try {
            if (conn == C_UP || conn == C_CLOSING) {
                ioRound();
            }
        } catch (IOException e) {
            onLinkLost();
        } catch (RuntimeException e) {
            onInternalError(e);
        } finally {
            lock.unlock();
        }
    }

    /** Timers: connection retries and deadlines, RNR retry, peer liveness, close linger. */
    long onTimer(long now) {
        if (!lock.tryLock()) {
            return now + 200_000L; // busy: try again shortly
        }
        try {
            long next = Long.MAX_VALUE;
            if (parked != null) {
                if (now - parkedDeadlineNs >= 0) {
                    TcpContext.closeQuietly(parked);
                    parked = null;
                } else {
                    next = parkedDeadlineNs;
                }
            }
            switch (conn) {
                case C_RETRY_WAIT -> {
                    if (now - nextAttemptNs >= 0) {
                        connectNow();
                    }
                    next = Math.min(next, Math.min(nextAttemptNs, connectDeadlineNs()));
                }
                case C_CONNECTING, C_HANDSHAKE, C_WAIT_PEER -> {
                    long deadline = connectDeadlineNs();
                    if (now - deadline >= 0) {
                        connectFailed();
                    } else {
                        next = Math.min(next, deadline);
                    }
                }
                case C_UP -> {
                    if (rnrResumeNs != 0) {
                        if (now - rnrResumeNs >= 0) {
                            rnrResumeNs = 0;
                            ioRound();
                        } else {
                            next = Math.min(next, rnrResumeNs);
                        }
                    }
                    if (conn == C_UP && sendHead < sendNext && rnrResumeNs == 0) {
                        long quietSince = Math.max(lastRxNs, lastTxNs);
                        long limit = Math.max(tcp.settings.peerTimeoutMs() * 1_000_000L,
                            RnrTimer.ackTimeoutNs(timeout) * (retryCount + 1));
                        if (now - quietSince > limit) {
                            // Requests outstanding and nothing moved either way: the peer is gone or hung.
                            counters.increment(Counter.LOCAL_ACK_TIMEOUT_ERR);
                            onLinkLost();
                        } else {
                            next = Math.min(next, quietSince + limit + 1);
                        }
                    }
                }
                case C_CLOSING -> {
                    if (now - closeDeadlineNs >= 0) {
                        hardClose();
                    } else {
                        next = Math.min(next, closeDeadlineNs);
                    }
                }
                default -> {
                }
            }
            return next;
        } catch (IOException e) {
            onLinkLost();
            return Long.MAX_VALUE;
        } catch (RuntimeException e) {
            onInternalError(e);
            return Long.MAX_VALUE;
        } finally {
            lock.unlock();
        }
    }

    private void finishConnect() throws IOException {
        try {
            if (!channel.finishConnect()) {
                return;
            }
        } catch (IOException e) {
            retryLater();
            return;
        }
        conn = C_HANDSHAKE;
        out.clear();
        writeHello(out, Wire.KIND_HELLO);
        out.flip();
        // A fresh socket's send buffer always takes 64 bytes; anything else is a dead connection.
        channel.write(out);
        if (out.hasRemaining()) {
            retryLater();
            return;
        }
        out.clear().limit(0);
        key.interestOps(SelectionKey.OP_READ);
    }

    private void readAccept() throws IOException {
        in.compact();
        int n;
        try {
            n = channel.read(in);
        } catch (IOException e) {
            n = -1;
        } finally {
            in.flip();
        }
        if (n < 0) {
            // Refused after connecting (the peer QP is not there yet or is gone): try again until the deadline.
            in.clear().limit(0);
            retryLater();
            return;
        }
        if (in.remaining() < Wire.HELLO) {
            return;
        }
        int p = in.position();
        boolean ok = in.getInt(p) == Wire.MAGIC && in.get(p + 4) == Wire.VERSION && in.get(p + 5) == Wire.KIND_ACCEPT
            && in.getInt(p + 8) == queuePairNumber && in.getInt(p + 12) == destQpNumber
            && in.getLong(p + 16) == secretHigh && in.getLong(p + 24) == secretLow
            && in.getLong(p + 32) == peer.secretHigh() && in.getLong(p + 40) == peer.secretLow();
        if (!ok) {
            counters.increment(Counter.PORT_RCV_ERRORS);
            in.clear().limit(0);
            retryLater();
            return;
        }
        peerMaxDestRdAtomic = Math.max(1, in.getInt(p + 48));
        in.position(p + Wire.HELLO);
        connectionUp();
        key.interestOps(SelectionKey.OP_READ);
        ioRound();
    }

    // ================================================================================================ posting

    @Override
    protected void onSendPosted() {
        if (conn != C_UP) {
            return; // sent once the connection is up
        }
        drivenNs = System.nanoTime(); // a posting thread is active on this QP (and polls for the completion)
        if (lock.tryLock()) {
            try {
                if (conn == C_UP) {
                    pumpOutput();
                }
            } catch (IOException e) {
                onLinkLost();
            } catch (RuntimeException e) {
                onInternalError(e);
            } finally {
                lock.unlock();
            }
        } else {
            kickSelf();
        }
    }

    private void kickSelf() {
        kicked = true;
        engine.kick();
    }

    @Override
    public int progress() {
        // Completion-queue polls drive the socket too: a busy-polling application then sees ACKs and incoming
        // messages without waiting for the progress thread to wake up.
        if (conn != C_UP) {
            return 0;
        }
        long now = System.nanoTime();
        if (!lock.tryLock()) {
            drivenNs = now; // someone is doing this QP's I/O right now; we keep polling
            return 0;
        }
        try {
            // With nothing of ours outstanding, read only a recently active connection: a peer's one-sided
            // requests (a WRITE ping-pong polls memory, not receives) then land without waiting for the progress
            // thread to be scheduled, while a CQ with hundreds of idle QPs costs no syscalls per poll.
            if (sendHead == sendTail && receiveHead == receiveTail
                && now - Math.max(lastRxNs, lastTxNs) > RECENT_ACTIVITY_NS) {
                return 0;
            }
            if (conn != C_UP) {
                return 0;
            }
            drivenNs = now;
            // Hold back the ACK of a message this poll delivers, so the application's answer can carry it (one
            // write instead of two). Only while this QP is application-driven, and never twice in a row: the next
            // poll or the progress thread's next standby tick sends it on its own if nothing was posted.
            boolean mayHold = !ackHeld;
            ackHeld = false;
            long delivered = receivesDelivered;
            largeDelivered = false;
            int work = readInput();
            if (mayHold && receivesDelivered != delivered && !largeDelivered && conn == C_UP) {
                // The progress thread must look at us later in case the application goes quiet: it never blocks
                // in select with a kick pending (and a thread already blocked there would not look: no hold).
                kicked = true;
                engine.kickLazily();
                ackHeld = !engine.blockedInSelect();
            }
            work += pumpOutput();
            return work + resumeInput();
        } catch (IOException e) {
            onLinkLost();
            return 1;
        } catch (RuntimeException e) {
            onInternalError(e);
            return 1;
        } finally {
            lock.unlock();
        }
    }

    // ================================================================================================ I/O rounds

    private int ioRound() throws IOException {
        ackHeld = false;
        int work = readInput();
        work += pumpOutput();
        return work + resumeInput();
    }

    /** Reading requests was paused for a full response ring: resume once it drained. */
    private int resumeInput() throws IOException {
        int work = 0;
        if (rxPaused && respFree() >= 2 && (conn == C_UP)) {
            rxPaused = false;
            updateInterest();
            work += readInput();
            work += pumpOutput();
        }
        return work;
    }

    private void updateInterest() {
        SelectionKey k = key;
        if (k == null || !k.isValid()) {
            return;
        }
        boolean wantWrite = outPending || sourceIndex < sourceCount || (conn == C_UP && hasOutputWork());
        int ops = (rxPaused ? 0 : SelectionKey.OP_READ) | (wantWrite ? SelectionKey.OP_WRITE : 0);
        if (k.interestOps() != ops) {
            k.interestOps(ops);
            if (Thread.currentThread() != engine.thread) {
                engine.wakeupIfSelecting();
            }
        }
    }

    private boolean hasOutputWork() {
        return respTail > respHead;
    }

    // ------------------------------------------------------------------------------------------------ output

    private int pumpOutput() throws IOException {
        int frames = 0;
        if (channel == null) {
            return 0;
        }
        pumpBytes = 0;
        while (true) {
            if (outPending || sourceIndex < sourceCount) {
                if (!writeCurrent()) {
                    break;
                }
                frames++;
            }
            if (pumpBytes >= writeBudget) {
                if (respTail > respHead || sendNext < sendTail) {
                    budgetStops++;
                }
                break;
            }
            if (!nextFrame()) {
                break;
            }
        }
        if (conn == C_CLOSING && !outPending && sourceIndex >= sourceCount && respTail == respHead && !outputShut) {
            outputShut = true;
            try {
                channel.shutdownOutput();
            } catch (IOException e) {
                hardClose();
                return frames;
            }
        }
        updateInterest();
        return frames;
    }

    /** Writes the current frame; false when the socket is full. */
    private boolean writeCurrent() throws IOException {
        if (outPending && sourceIndex < sourceCount) {
            // Header and the first payload piece in one gathering write: one syscall and no lone 48-byte segment.
            ByteBuffer view = outViews.view(sourceRegion[sourceIndex], sourceOffset[sourceIndex] + sourceDone,
                sourceLength[sourceIndex] - sourceDone);
            int start = view.position();
            gather[0] = out;
            gather[1] = view;
            long n;
            try {
                n = channel.write(gather);
            } finally {
                gather[1] = null;
            }
            if (n > 0) {
                lastTxNs = System.nanoTime();
                pumpBytes += n;
            }
            sourceDone += view.position() - start;
            if (out.hasRemaining()) {
                return false;
            }
            outPending = false;
        }
        if (outPending) {
            int n = channel.write(out);
            if (n > 0) {
                lastTxNs = System.nanoTime();
                pumpBytes += n;
            }
            if (out.hasRemaining()) {
                return false;
            }
            outPending = false;
        }
        while (sourceIndex < sourceCount) {
            long remaining = sourceLength[sourceIndex] - sourceDone;
            if (remaining == 0) {
                sourceRegion[sourceIndex] = null;
                sourceIndex++;
                sourceDone = 0;
                continue;
            }
            ByteBuffer view = outViews.view(sourceRegion[sourceIndex], sourceOffset[sourceIndex] + sourceDone,
                remaining);
            int n = channel.write(view);
            if (n <= 0) {
                return false;
            }
            lastTxNs = System.nanoTime();
            sourceDone += n;
            pumpBytes += n;
            if (pumpBytes >= writeBudget && sourceDone < sourceLength[sourceIndex]) {
                budgetStops++;
                return false; // budget spent in the middle of a payload: the next pump goes on from here
            }
        }
        sourceCount = sourceIndex = 0;
        return true;
    }

    /** Builds the next frame into the output buffer: responses first, then this QP's next request. */
    private boolean nextFrame() {
        if (respTail > respHead) {
            int i = (int) (respHead % respType.length);
            if (respTail - respHead > 1 || respType[i] != Wire.ACK || conn != C_UP) {
                buildResponse();
                return true;
            }
            // Only a (cumulative) ACK is left: let our next request carry it, if there is one to send now.
            carryAck = Wire.ACK_PRESENT | respPsn[i];
            boolean built = nextRequest();
            if (carryAck == 0) {
                return built; // the request took it
            }
            carryAck = 0;
            if (built) {
                return true; // (a request is never built without taking it; kept for safety)
            }
            if (ackHeld) {
                return false;
            }
            buildResponse();
            return true;
        }
        return nextRequest();
    }

    /** Builds this QP's next request into the output buffer, if one may start now. */
    private boolean nextRequest() {
        if (conn != C_UP) {
            return false;
        }
        if (localErrorIndex >= 0) {
            if (sendHead == localErrorIndex) {
                localErrorIndex = -1;
                completeSend(localErrorStatus, 0, 0);
            }
            return false;
        }
        if (state != QueuePairState.READY_TO_SEND || sendNext >= sendTail) {
            return false;
        }
        if (rnrResumeNs != 0) {
            if (System.nanoTime() - rnrResumeNs < 0) {
                return false;
            }
            rnrResumeNs = 0;
        }
        SendSlot slot = sendSlot(sendNext);
        boolean readAtomic = slot.opcode == SendOpcode.RDMA_READ || slot.opcode.isAtomic();
        if (slot.fenced() && inFlightReadAtomic > 0) {
            return false;
        }
        if (readAtomic && inFlightReadAtomic >= Math.min(Math.max(1, maxRdAtomic), peerMaxDestRdAtomic)) {
            return false;
        }
        return buildRequest(slot, readAtomic);
    }

    private int psnOf(long index) {
        return (sqPsn + (int) index) & Wire.PSN_MASK;
    }

    private void header(int type, int flags, int syndrome, int timer, int psn, int length, int rkey, long va,
                        long operand1, long operand2, int imm) {
        ByteBuffer b = out;
        b.clear();
        b.put(Wire.OFF_TYPE, (byte) type);
        b.put(Wire.OFF_FLAGS, (byte) flags);
        b.put(Wire.OFF_SYNDROME, (byte) syndrome);
        b.put(Wire.OFF_TIMER, (byte) timer);
        b.putInt(Wire.OFF_PSN, psn);
        b.putInt(Wire.OFF_LENGTH, length);
        b.putInt(Wire.OFF_RKEY, rkey);
        b.putLong(Wire.OFF_VA, va);
        b.putLong(Wire.OFF_OPERAND1, operand1);
        b.putLong(Wire.OFF_OPERAND2, operand2);
        b.putInt(Wire.OFF_IMM, imm);
        int ack = 0;
        if (carryAck != 0 && Wire.isRequest(type)) {
            // The ring's only entry is an ACK: this request carries it instead of a frame of its own.
            ack = carryAck;
            carryAck = 0;
            respHead++;
            piggybackedAcks++;
            ackHeld = false;
        } else if (type == Wire.ACK) {
            standaloneAcks++;
            ackHeld = false;
        }
        b.putInt(Wire.OFF_ACK, ack);
        b.limit(Wire.HEADER);
        outPending = true;
        counters.increment(Counter.PORT_XMIT_PACKETS);
    }

    private boolean buildRequest(SendSlot slot, boolean readAtomic) {
        long index = sendNext;
        if (!slot.started) {
            slot.started = true;
            slot.rnrRetriesLeft = rnrRetry;
        }
        int psn = psnOf(index);
        int flags = ((slot.flags & SendFlag.SOLICITED) != 0 ? Wire.FLAG_SOLICITED : 0)
            | (slot.fenced() ? Wire.FLAG_FENCE : 0);
        int length = (int) slot.length;
        SendOpcode op = slot.opcode;
        if (readAtomic) {
            if (!checkLocal(slot, true)) {
                localErrorIndex = index;
                localErrorStatus = WorkCompletionStatus.LOC_PROT_ERR;
                return nextFrameAfterLocalError();
            }
            if (op == SendOpcode.RDMA_READ) {
                header(Wire.READ_REQUEST, flags, 0, 0, psn, length, slot.rkey, slot.remoteAddress, 0, 0, 0);
            } else {
                header(op == SendOpcode.ATOMIC_CMP_AND_SWP ? Wire.COMPARE_SWAP : Wire.FETCH_ADD, flags, 0, 0, psn, 8,
                    slot.rkey, slot.remoteAddress, slot.compareAdd, slot.swap, 0);
            }
            inFlightReadAtomic++;
            sendNext = index + 1;
            return true;
        }
        int type = switch (op) {
            case SEND -> Wire.SEND;
            case SEND_WITH_IMM -> Wire.SEND_IMM;
            case RDMA_WRITE -> Wire.WRITE;
            default -> Wire.WRITE_IMM;
        };
        boolean oneSided = type == Wire.WRITE || type == Wire.WRITE_IMM;
        if (length <= SMALL || slot.inline) {
            header(type, flags, 0, 0, psn, length, oneSided ? slot.rkey : 0, oneSided ? slot.remoteAddress : 0, 0,
                0, slot.immediateData);
            if (length > 0) {
                if (!gather(slot, 0, outSegment, Wire.HEADER, length)) {
                    outPending = false;
                    counters.add(Counter.PORT_XMIT_PACKETS, -1);
                    if (out.getInt(Wire.OFF_ACK) != 0) {
                        respHead--; // give the carried ACK back to the ring: no frame goes out
                        piggybackedAcks--;
                    }
                    localErrorIndex = index;
                    localErrorStatus = WorkCompletionStatus.LOC_PROT_ERR;
                    return nextFrameAfterLocalError();
                }
                out.limit(Wire.HEADER + length);
            }
        } else {
            int count = 0;
            for (int i = 0; i < slot.sgeCount; i++) {
                int len = slot.sgeLength[i];
                if (len == 0) {
                    continue;
                }
                SoftMemoryRegion region = localRegion(slot.sgeAddress[i], len, slot.sgeLkey[i], false);
                if (region == null) {
                    for (int k = 0; k < count; k++) {
                        sourceRegion[k] = null;
                    }
                    localErrorIndex = index;
                    localErrorStatus = WorkCompletionStatus.LOC_PROT_ERR;
                    return nextFrameAfterLocalError();
                }
                sourceRegion[count] = region;
                sourceOffset[count] = slot.sgeAddress[i] - region.address();
                sourceLength[count] = len;
                count++;
            }
            header(type, flags, 0, 0, psn, length, oneSided ? slot.rkey : 0, oneSided ? slot.remoteAddress : 0, 0,
                0, slot.immediateData);
            sourceCount = count;
            sourceIndex = 0;
            sourceDone = 0;
        }
        counters.add(Counter.PORT_XMIT_DATA, length);
        if (!oneSided) {
            counters.increment(Counter.RDMA_SENDS);
        }
        sendNext = index + 1;
        return true;
    }

    /** A request failed its local check: it completes in order, once everything before it has. */
    private boolean nextFrameAfterLocalError() {
        if (sendHead == localErrorIndex) {
            localErrorIndex = -1;
            completeSend(localErrorStatus, 0, 0);
        }
        return false;
    }

    private int respFree() {
        return respType.length - (int) (respTail - respHead);
    }

    private void buildResponse() {
        int i = (int) (respHead % respType.length);
        int type = respType[i];
        int psn = respPsn[i];
        switch (type) {
            case Wire.ACK -> header(Wire.ACK, 0, 0, 0, psn, 0, 0, 0, 0, 0, 0);
            case Wire.NAK -> header(Wire.NAK, 0, respSyndrome[i], (int) respValue[i], psn, 0, 0, 0, 0, 0, 0);
            case Wire.ATOMIC_RESPONSE -> header(Wire.ATOMIC_RESPONSE, 0, 0, 0, psn, 8, 0, 0, respValue[i], 0, 0);
            default -> {
                int length = respLength[i];
                header(Wire.READ_RESPONSE, 0, 0, 0, psn, length, 0, 0, 0, 0, 0);
                if (length > 0) {
                    SoftMemoryRegion region = respRegion[i];
                    if (length <= SMALL) {
                        MemorySegment.copy(region.segment(), respOffset[i], outSegment, Wire.HEADER, length);
                        out.limit(Wire.HEADER + length);
                    } else {
                        sourceRegion[0] = region;
                        sourceOffset[0] = respOffset[i];
                        sourceLength[0] = length;
                        sourceCount = 1;
                        sourceIndex = 0;
                        sourceDone = 0;
                    }
                    counters.add(Counter.PORT_XMIT_DATA, length);
                }
                respRegion[i] = null;
            }
        }
        respHead++;
    }

    private int enqueueResponse(int type, int psn) {
        int i = (int) (respTail % respType.length);
        respType[i] = type;
        respPsn[i] = psn;
        respTail++;
        return i;
    }

    private void enqueueAck(int psn) {
        if (respTail > respHead) {
            int last = (int) ((respTail - 1) % respType.length);
            if (respType[last] == Wire.ACK) {
                respPsn[last] = psn; // ACKs are cumulative: one covers every PSN up to its own
                return;
            }
        }
        enqueueResponse(Wire.ACK, psn);
    }

    private void enqueueNak(int syndrome, int psn, int timer) {
        int i = enqueueResponse(Wire.NAK, psn);
        respSyndrome[i] = syndrome;
        respValue[i] = timer;
    }

    // ------------------------------------------------------------------------------------------------ input

    private int readInput() throws IOException {
        int work = 0;
        long bytes = 0;
        while (channel != null) {
            if (rxDrainAll) {
                in.clear();
                int n = channel.read(in);
                in.clear().limit(0);
                if (n < 0) {
                    hardClose();
                    return work + 1;
                }
                if (n == 0) {
                    return work;
                }
                work++;
                continue;
            }
            if (conn != C_UP) {
                return work;
            }
            if (sinkIndex < sinkCount) {
                long n = fillSink();
                if (n < 0) {
                    counters.increment(Counter.PORT_RCV_ERRORS); // the stream ended inside a payload
                    onLinkLost();
                    return work + 1;
                }
                if (sinkIndex < sinkCount) {
                    if (n == 0) {
                        return work;
                    }
                    bytes += n;
                    if (bytes > READ_BUDGET) {
                        return work + 1;
                    }
                    continue;
                }
                sinkCount = sinkIndex = 0;
                onPayloadDone();
                work++;
                continue;
            }
            if (in.remaining() >= Wire.HEADER) {
                int type = in.get(in.position()) & 0xFF;
                if (Wire.isRequest(type) && respFree() < 2) {
                    // Our responses are backed up: stop reading requests until the peer drains them.
                    rxPaused = true;
                    updateInterest();
                    return work;
                }
                onFrame();
                work++;
                continue;
            }
            if (bytes > READ_BUDGET) {
                return work + 1;
            }
            in.compact();
            int n;
            try {
                n = channel.read(in);
            } finally {
                in.flip();
            }
            if (n < 0) {
                if (in.hasRemaining()) {
                    counters.increment(Counter.PORT_RCV_ERRORS); // the stream ended inside a frame header
                }
                onLinkLost();
                return work + 1;
            }
            if (n == 0) {
                return work;
            }
            lastRxNs = System.nanoTime();
            bytes += n;
        }
        return work;
    }

    /** Moves payload bytes from staging, then straight from the socket, into the sink. */
    private long fillSink() throws IOException {
        long moved = 0;
        while (sinkIndex < sinkCount) {
            long remaining = sinkLength[sinkIndex] - sinkDone;
            if (remaining == 0) {
                sinkRegion[sinkIndex] = null;
                sinkIndex++;
                sinkDone = 0;
                continue;
            }
            SoftMemoryRegion region = sinkRegion[sinkIndex];
            int staged = in.remaining();
            if (staged > 0) {
                int n = (int) Math.min(staged, remaining);
                if (region != null) {
                    MemorySegment.copy(inSegment, in.position(), region.segment(), sinkOffset[sinkIndex] + sinkDone,
                        n);
                }
                in.position(in.position() + n);
                sinkDone += n;
                moved += n;
                continue;
            }
            int n;
            if (region == null) {
                in.clear();
                in.limit((int) Math.min(in.capacity(), remaining));
                try {
                    n = channel.read(in);
                } finally {
                    in.clear().limit(0);
                }
            } else {
                ByteBuffer view = inViews.view(region, sinkOffset[sinkIndex] + sinkDone, remaining);
                n = channel.read(view);
            }
            if (n < 0) {
                return -1;
            }
            if (n == 0) {
                return moved;
            }
            lastRxNs = System.nanoTime();
            sinkDone += n;
            moved += n;
        }
        return moved == 0 ? 1 : moved;
    }

    private void sink(SoftMemoryRegion region, long offset, long length) {
        sinkRegion[sinkCount] = region;
        sinkOffset[sinkCount] = offset;
        sinkLength[sinkCount] = length;
        sinkCount++;
    }

    private void discardPayload(int length) {
        sinkCount = sinkIndex = 0;
        sinkDone = 0;
        if (length > 0) {
            sink(null, 0, length);
            rxAction = A_DISCARD;
        }
    }

    private void onFrame() {
        ByteBuffer b = in;
        int p = b.position();
        int type = b.get(p + Wire.OFF_TYPE) & 0xFF;
        int flags = b.get(p + Wire.OFF_FLAGS) & 0xFF;
        int syndrome = b.get(p + Wire.OFF_SYNDROME) & 0xFF;
        int timer = b.get(p + Wire.OFF_TIMER) & 0xFF;
        int psn = b.getInt(p + Wire.OFF_PSN);
        int length = b.getInt(p + Wire.OFF_LENGTH);
        int rkey = b.getInt(p + Wire.OFF_RKEY);
        long va = b.getLong(p + Wire.OFF_VA);
        long operand1 = b.getLong(p + Wire.OFF_OPERAND1);
        long operand2 = b.getLong(p + Wire.OFF_OPERAND2);
        int imm = b.getInt(p + Wire.OFF_IMM);
        int ack = b.getInt(p + Wire.OFF_ACK);
        b.position(p + Wire.HEADER);
        counters.increment(Counter.PORT_RCV_PACKETS);
        boolean ackValid = ack == 0
            || (Wire.isRequest(type) && (ack & ~(Wire.ACK_PRESENT | Wire.PSN_MASK)) == 0);
        if (!ackValid || (psn & ~Wire.PSN_MASK) != 0 || length < 0 || length > TcpContext.MAX_MESSAGE
            || (flags & ~(Wire.FLAG_SOLICITED | Wire.FLAG_FENCE)) != 0) {
            malformed("bad header fields", false);
            return;
        }
        if (ack != 0) {
            // An ACK riding on the peer's request: handled exactly like an ACK frame just before it.
            int ackPsn = ack & Wire.PSN_MASK;
            if (!acknowledge(ackPsn, true)) {
                malformed("piggybacked ACK for PSN " + ackPsn + " that is not outstanding", true);
                return;
            }
        }
        if (Wire.isRequest(type)) {
            onRequest(type, psn, length, rkey, va, operand1, operand2, imm);
        } else if (Wire.isResponse(type)) {
            onResponse(type, syndrome, timer, psn, length, operand1);
        } else {
            malformed("unknown opcode " + Wire.typeName(type), false);
        }
    }

    // ------------------------------------------------------------------------------------------------ responder

    private void onRequest(int type, int psn, int length, int rkey, long va, long operand1, long operand2,
                           int imm) {
        boolean payload = Wire.requestCarriesPayload(type);
        if ((type == Wire.COMPARE_SWAP || type == Wire.FETCH_ADD) && length != 8) {
            malformed("atomic with length " + length, false);
            return;
        }
        if (rnrDiscarding) {
            int distance = (psn - rnrDiscardPsn) & Wire.PSN_MASK;
            if (distance != 0) {
                if (distance >= Wire.PSN_HALF) {
                    malformed("PSN " + psn + " behind the RNR-NAKed " + rnrDiscardPsn, false);
                    return;
                }
                // Sent before the requester saw our RNR NAK: dropped, it will come again.
                discardPayload(payload ? length : 0);
                return;
            }
            rnrDiscarding = false;
        }
        if (psn != rqPsn) {
            counters.increment(Counter.OUT_OF_SEQUENCE);
            malformed("PSN " + psn + ", expected " + rqPsn, false);
            return;
        }
        SendOpcode op = switch (type) {
            case Wire.SEND -> SendOpcode.SEND;
            case Wire.SEND_IMM -> SendOpcode.SEND_WITH_IMM;
            case Wire.WRITE -> SendOpcode.RDMA_WRITE;
            case Wire.WRITE_IMM -> SendOpcode.RDMA_WRITE_WITH_IMM;
            case Wire.READ_REQUEST -> SendOpcode.RDMA_READ;
            case Wire.COMPARE_SWAP -> SendOpcode.ATOMIC_CMP_AND_SWP;
            default -> SendOpcode.ATOMIC_FETCH_AND_ADD;
        };
        // Every check happens here, on the header, before a single payload byte is placed.
        if (!acceptsIncoming(op)) {
            respondError(Wire.NAK_INVALID_REQUEST, psn);
            return;
        }
        SoftMemoryRegion region = null;
        if (op.isAtomic()) {
            if ((va & 7) != 0) {
                respondError(Wire.NAK_INVALID_REQUEST, psn);
                return;
            }
            region = remoteRegion(rkey, va, 8, AccessFlag.REMOTE_ATOMIC);
        } else if (op.isOneSided() && length > 0) {
            region = remoteRegion(rkey, va, length,
                op == SendOpcode.RDMA_READ ? AccessFlag.REMOTE_READ : AccessFlag.REMOTE_WRITE);
        }
        if (region == null && (op.isAtomic() || (op.isOneSided() && length > 0))) {
            counters.increment(Counter.REMOTE_ACCESS_ERRORS);
            respondError(Wire.NAK_REMOTE_ACCESS, psn);
            return;
        }
        if (op.consumesReceive() && receiveHead == receiveTail) {
            counters.increment(Counter.SEND_RNR_ERR);
            enqueueNak(Wire.NAK_RNR, psn, minRnrTimer);
            rnrDiscarding = true;
            rnrDiscardPsn = psn;
            discardPayload(payload ? length : 0);
            return;
        }
        rxLength = length;
        rxImmediate = imm;
        rxHasImmediate = op.hasImmediate();
        switch (op) {
            case SEND, SEND_WITH_IMM -> {
                ReceiveSlot receive = receiveSlot(receiveHead);
                if (length > receive.length) {
                    enqueueNak(Wire.NAK_INVALID_REQUEST, psn, 0);
                    completeReceive(WorkCompletionStatus.LOC_LEN_ERR, WorkCompletionOpcode.RECV, 0, 0, false,
                        destQpNumber);
                    return;
                }
                sinkCount = sinkIndex = 0;
                sinkDone = 0;
                long left = length;
                for (int i = 0; i < receive.sgeCount && left > 0; i++) {
                    int len = receive.sgeLength[i];
                    if (len == 0) {
                        continue;
                    }
                    SoftMemoryRegion target = localRegion(receive.sgeAddress[i], len, receive.sgeLkey[i], true);
                    if (target == null) {
                        for (int k = 0; k < sinkCount; k++) {
                            sinkRegion[k] = null;
                        }
                        sinkCount = 0;
                        enqueueNak(Wire.NAK_REMOTE_OPERATION, psn, 0);
                        completeReceive(WorkCompletionStatus.LOC_PROT_ERR, WorkCompletionOpcode.RECV, 0, 0, false,
                            destQpNumber);
                        return;
                    }
                    long n = Math.min(len, left);
                    sink(target, receive.sgeAddress[i] - target.address(), n);
                    left -= n;
                }
                advanceExpectedPsn();
                rxAction = A_SEND;
                respPsnPending = psn;
                if (sinkCount == 0) {
                    onPayloadDone();
                }
            }
            case RDMA_WRITE, RDMA_WRITE_WITH_IMM -> {
                advanceExpectedPsn();
                rxAction = op == SendOpcode.RDMA_WRITE ? A_WRITE : A_WRITE_IMM;
                respPsnPending = psn;
                sinkCount = sinkIndex = 0;
                sinkDone = 0;
                if (length > 0) {
                    sink(region, va - region.address(), length);
                } else {
                    onPayloadDone();
                }
            }
            case RDMA_READ -> {
                advanceExpectedPsn();
                int i = enqueueResponse(Wire.READ_RESPONSE, psn);
                respRegion[i] = region;
                respOffset[i] = region == null ? 0 : va - region.address();
                respLength[i] = length;
            }
            default -> {
                advanceExpectedPsn();
                long offset = va - region.address();
                MemorySegment segment = region.segment();
                long original = op == SendOpcode.ATOMIC_CMP_AND_SWP
                    ? (long) LONG.compareAndExchange(segment, offset, operand1, operand2)
                    : (long) LONG.getAndAdd(segment, offset, operand1);
                int i = enqueueResponse(Wire.ATOMIC_RESPONSE, psn);
                respValue[i] = original;
            }
        }
    }

    private int respPsnPending;

    private void advanceExpectedPsn() {
        rqPsn = (rqPsn + 1) & Wire.PSN_MASK;
    }

    /** A request failed a responder check: NAK it, move to ERR, close once the NAK is out. */
    private void respondError(int syndrome, int psn) {
        enqueueNak(syndrome, psn, 0);
        if (state != QueuePairState.ERROR) {
            enterError();
        }
    }

    private void onPayloadDone() {
        int action = rxAction;
        rxAction = A_NONE;
        switch (action) {
            case A_WRITE -> {
                counters.add(Counter.PORT_RCV_DATA, rxLength);
                enqueueAck(respPsnPending);
            }
            case A_WRITE_IMM -> {
                counters.add(Counter.PORT_RCV_DATA, rxLength);
                enqueueAck(respPsnPending);
                receivesDelivered++;
                largeDelivered |= rxLength > HOLD_MAX_BYTES;
                completeReceive(WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV_RDMA_WITH_IMM, rxLength,
                    rxImmediate, true, destQpNumber);
            }
            case A_SEND -> {
                counters.add(Counter.PORT_RCV_DATA, rxLength);
                counters.increment(Counter.RDMA_RECVS);
                enqueueAck(respPsnPending);
                receivesDelivered++;
                largeDelivered |= rxLength > HOLD_MAX_BYTES;
                completeReceive(WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV, rxLength, rxImmediate,
                    rxHasImmediate, destQpNumber);
            }
            case A_READ_RESPONSE -> {
                counters.add(Counter.PORT_RCV_DATA, rxLength);
                inFlightReadAtomic--;
                completeSend(WorkCompletionStatus.SUCCESS, rxLength, 0);
            }
            default -> {
            }
        }
    }

    // ------------------------------------------------------------------------------------------------ requester

    private void onResponse(int type, int syndrome, int timer, int psn, int length, long value) {
        if (type == Wire.ACK) {
            if (!acknowledge(psn, true)) {
                malformed("ACK for PSN " + psn + " that is not outstanding", true);
            }
            return;
        }
        if (!acknowledge(psn, false) || sendHead >= sendNext || psnOf(sendHead) != psn) {
            malformed(Wire.typeName(type) + " for PSN " + psn + " that is not outstanding", true);
            return;
        }
        SendSlot slot = sendSlot(sendHead);
        switch (type) {
            case Wire.READ_RESPONSE -> {
                if (slot.opcode != SendOpcode.RDMA_READ || length != slot.length) {
                    malformed("READ_RESPONSE does not match the READ", true);
                    return;
                }
                sinkCount = sinkIndex = 0;
                sinkDone = 0;
                for (int i = 0; i < slot.sgeCount; i++) {
                    int len = slot.sgeLength[i];
                    if (len == 0) {
                        continue;
                    }
                    SoftMemoryRegion target = localRegion(slot.sgeAddress[i], len, slot.sgeLkey[i], true);
                    if (target == null) {
                        for (int k = 0; k < sinkCount; k++) {
                            sinkRegion[k] = null;
                        }
                        sinkCount = 0;
                        completeSend(WorkCompletionStatus.LOC_PROT_ERR, 0, 0);
                        return;
                    }
                    sink(target, slot.sgeAddress[i] - target.address(), len);
                }
                rxLength = length;
                rxAction = A_READ_RESPONSE;
                if (sinkCount == 0) {
                    onPayloadDone();
                }
            }
            case Wire.ATOMIC_RESPONSE -> {
                if (!slot.opcode.isAtomic() || length != 8) {
                    malformed("ATOMIC_RESPONSE does not match the request", true);
                    return;
                }
                SoftMemoryRegion target = localRegion(slot.sgeAddress[0], 8, slot.sgeLkey[0], true);
                if (target == null) {
                    completeSend(WorkCompletionStatus.LOC_PROT_ERR, 0, 0);
                    return;
                }
                target.segment().set(ValueLayout.JAVA_LONG_UNALIGNED, slot.sgeAddress[0] - target.address(), value);
                inFlightReadAtomic--;
                completeSend(WorkCompletionStatus.SUCCESS, 8, 0);
            }
            case Wire.NAK -> onNak(slot, syndrome, timer);
            default -> malformed("unexpected " + Wire.typeName(type), true);
        }
    }

    /**
     * Completes outstanding WRITE/SEND requests before {@code psn} (and the one at {@code psn} when
     * {@code inclusive}): every response implicitly acknowledges the requests before it, as in RC.
     *
     * @return false when the PSN is not outstanding or the range holds a READ/atomic still waiting for its data
     */
    private boolean acknowledge(int psn, boolean inclusive) {
        long distance = (psn - psnOf(sendHead)) & Wire.PSN_MASK;
        long count = inclusive ? distance + 1 : distance;
        if (distance >= Wire.PSN_HALF || sendHead + distance >= sendNext) {
            return false;
        }
        for (long i = 0; i < count; i++) {
            SendOpcode op = sendSlot(sendHead + i).opcode;
            if (op == SendOpcode.RDMA_READ || op.isAtomic()) {
                return false;
            }
        }
        for (long i = 0; i < count; i++) {
            completeSend(WorkCompletionStatus.SUCCESS, (int) sendSlot(sendHead).length, 0);
        }
        return true;
    }

    private void onNak(SendSlot slot, int syndrome, int timer) {
        switch (syndrome) {
            case Wire.NAK_RNR -> {
                counters.increment(Counter.RCVD_RNR_ERR);
                if (rnrRetry != 7) {
                    if (slot.rnrRetriesLeft <= 0) {
                        counters.increment(Counter.RNR_NAK_RETRY_ERR);
                        completeSend(WorkCompletionStatus.RNR_RETRY_EXC_ERR, 0, 0);
                        return;
                    }
                    slot.rnrRetriesLeft--;
                }
                // Go back to the NAKed request; the responder drops everything after it until it comes again.
                sendNext = sendHead;
                inFlightReadAtomic = 0;
                rnrResumeNs = System.nanoTime() + Math.max(1, RnrTimer.delayNs(timer));
                engine.schedule(rnrResumeNs);
            }
            case Wire.NAK_REMOTE_ACCESS -> {
                counters.increment(Counter.REQ_REMOTE_ACCESS_ERRORS);
                completeSend(WorkCompletionStatus.REM_ACCESS_ERR, 0, 0);
            }
            case Wire.NAK_INVALID_REQUEST -> completeSend(WorkCompletionStatus.REM_INV_REQ_ERR, 0, 0);
            case Wire.NAK_REMOTE_OPERATION -> completeSend(WorkCompletionStatus.REM_OP_ERR, 0, 0);
            default -> malformed("NAK with unknown class " + syndrome, true);
        }
    }

    // ================================================================================================ errors

    /**
     * The peer sent something that is not the protocol: count it, fail the QP and drop the connection at once
     * (nothing more from this peer is read).
     */
    private void malformed(String what, boolean response) {
        counters.increment(Counter.PORT_RCV_ERRORS);
        lastProtocolError = what;
        hardClose();
        if (state != QueuePairState.ERROR && !isClosed()) {
            if (response && sendHead < sendNext) {
                completeSend(WorkCompletionStatus.BAD_RESP_ERR, 0, 0);
            }
            enterError();
        }
    }

    private void onLinkLost() {
        if (conn == C_CLOSING || conn == C_CLOSED || conn == C_IDLE) {
            hardClose();
            return;
        }
        if (conn == C_CONNECTING || conn == C_HANDSHAKE) {
            retryLater();
            return;
        }
        counters.increment(Counter.LINK_DOWNED);
        hardClose();
        failQueuePair(WorkCompletionStatus.RETRY_EXC_ERR);
    }

    private void onInternalError(RuntimeException e) {
        // For example a region's memory freed under a transfer. Contained to this QP.
        System.err.println("jccl tcp: QP 0x" + Integer.toHexString(queuePairNumber) + ": " + e);
        hardClose();
        if (state != QueuePairState.ERROR && !isClosed()) {
            failQueuePair(WorkCompletionStatus.GENERAL_ERR);
        }
    }

    @Override
    protected void onError() {
        ackHeld = false;
        localErrorIndex = -1;
        inFlightReadAtomic = 0;
        rnrResumeNs = 0;
        sinkCount = sinkIndex = 0;
        rxAction = A_NONE;
        switch (conn) {
            case C_UP -> {
                // Graceful: send what is queued (a NAK explaining why), FIN, then drain until the peer closes too.
                // Closing with unread input would send an RST, which can destroy the NAK before it is read.
                conn = C_CLOSING;
                rxDrainAll = true;
                rxPaused = false;
                closeDeadlineNs = System.nanoTime() + CLOSE_LINGER_NS;
                engine.schedule(closeDeadlineNs);
                if (key != null && key.isValid()) {
                    key.interestOps(SelectionKey.OP_READ | SelectionKey.OP_WRITE);
                }
                kickSelf();
            }
            case C_CLOSING, C_CLOSED -> {
            }
            default -> {
                hardClose();
            }
        }
    }

    /**
     * Sends what this QP still owes the peer before its socket closes: above all the ACK of the last message it
     * took, which may be held back to ride on an answer that will now never be posted (an RC NIC has sent it by the
     * time the receive completes; without this the peer's request failed with RETRY_EXC_ERR at the end of a job).
     * Responses only, never a new request; best effort and non-blocking. Then FIN, and input already here is read
     * away so the close does not become a reset that could destroy those last bytes before the peer reads them.
     */
    private void flushResponsesBeforeClose() {
        if ((conn != C_UP && conn != C_CLOSING) || channel == null) {
            return;
        }
        ackHeld = false;
        carryAck = 0;
        try {
            if ((outPending || sourceIndex < sourceCount) && !writeCurrent()) {
                return;
            }
            while (respTail > respHead) {
                buildResponse();
                if (!writeCurrent()) {
                    return;
                }
            }
            if (!outputShut) {
                outputShut = true;
                channel.shutdownOutput();
            }
            in.clear();
            while (channel.read(in) > 0) {
                in.clear();
            }
        } catch (IOException ignored) {
            // the peer is gone already: nothing left to deliver
        }
    }

    private void closeChannel() {
        if (key != null) {
            key.cancel();
            key = null;
        }
        TcpContext.closeQuietly(channel);
        channel = null;
    }

    private void hardClose() {
        closeChannel();
        if (conn != C_IDLE) {
            conn = C_CLOSED;
        }
        sinkCount = sinkIndex = 0;
        sourceCount = sourceIndex = 0;
        for (int i = 0; i < sinkRegion.length; i++) {
            sinkRegion[i] = null;
            sourceRegion[i] = null;
        }
        outPending = false;
        rxDrainAll = false;
    }

    @Override
    protected void destroy() {
        lock.lock();
        try {
            flushResponsesBeforeClose();
            hardClose();
            TcpContext.closeQuietly(parked);
            parked = null;
        } finally {
            lock.unlock();
        }
        engine.remove(this);
    }

    /** Output pumps that let go of the lock at the 4 MiB budget with more to write (tests, diagnostics). */
    long budgetStops() {
        lock.lock();
        try {
            return budgetStops;
        } finally {
            lock.unlock();
        }
    }

    /** {standalone ACK frames sent, ACKs carried on requests} so far (tests, diagnostics). */
    long[] ackCounts() {
        lock.lock();
        try {
            return new long[] {standaloneAcks, piggybackedAcks};
        } finally {
            lock.unlock();
        }
    }

    @Override
    public String toString() {
        String[] names = {"idle", "retry-wait", "connecting", "handshake", "waiting-for-peer", "up", "closing",
            "closed"};
        String error = lastProtocolError;
        return "TcpQueuePair{qpn=0x" + Integer.toHexString(queuePairNumber) + ", " + state.shortName() + ", "
            + names[conn] + (error == null ? "" : ", last bad input: " + error) + "}";
    }
}
