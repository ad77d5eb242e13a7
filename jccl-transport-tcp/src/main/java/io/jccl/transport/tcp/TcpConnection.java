package io.jccl.transport.tcp;

import io.jccl.verbs.Counter;
import io.jccl.verbs.QueuePairState;
import io.jccl.verbs.RnrTimer;
import io.jccl.verbs.WorkCompletionStatus;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.CancelledKeyException;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.SelectionKey;
import java.nio.channels.SocketChannel;
import java.util.concurrent.locks.ReentrantLock;

/**
 * The connection of one tcp QP, kept apart from the data path as soft-iWARP keeps {@code siw_cm.c} apart: which side
 * connects (the QP with the larger (QPN, secret), decided by both without talking), connecting and retrying with
 * backoff until the QP's deadline, the HELLO/ACCEPT handshake, a peer's connection that arrives before this QP
 * reached RTR (parked until it does), and the connection's life after that (up, closing gracefully, closed), with
 * its traffic timestamps. Runs under the QP's lock; the listener side of the handshake is {@link TcpContext}'s.
 */
final class TcpConnection {
    static final int IDLE = 0;
    static final int RETRY_WAIT = 1;
    static final int CONNECTING = 2;
    static final int HANDSHAKE = 3;
    static final int WAIT_PEER = 4;
    static final int UP = 5;
    static final int CLOSING = 6;
    static final int CLOSED = 7;
    private static final String[] STATE_NAMES = {"idle", "retry-wait", "connecting", "handshake",
        "waiting-for-peer", "up", "closing", "closed"};

    private static final long FIRST_BACKOFF_NS = 10_000_000L;
    private static final long MAX_BACKOFF_NS = 200_000_000L;
    /** How long a connection that arrived before this QP reached RTR is kept. */
    private static final long PARK_TIMEOUT_NS = 30_000_000_000L;
    /** How long a closing connection drains input before it is closed hard. */
    private static final long CLOSE_LINGER_NS = 2_000_000_000L;

    private final TcpQueuePair qp;
    private final HelloFlyweight hello = new HelloFlyweight();
    private volatile int state = IDLE;
    private SocketChannel channel;
    private SelectionKey key;
    private boolean connector;
    private EndpointAddress peer;
    private int peerMaxDestRdAtomic = 1;
    private long connectStartNs;
    private long nextAttemptNs;
    private long backoffNs;
    private long closeDeadlineNs;
    private long lastRxNs;
    private long lastTxNs;
    /** An incoming connection that arrived before this QP reached RTR. */
    private SocketChannel parked;
    private int parkedQpn;
    private long parkedHigh;
    private long parkedLow;
    private int parkedMaxDest;
    private long parkedDeadlineNs;

    TcpConnection(TcpQueuePair qp) {
        this.qp = qp;
    }

    int state() {
        return state;
    }

    boolean up() {
        return state == UP;
    }

    String stateName() {
        return STATE_NAMES[state];
    }

    /** The socket, or null when there is none. */
    SocketChannel channel() {
        return channel;
    }

    /** The channel's selection key, or null before registration. */
    SelectionKey key() {
        return key;
    }

    /** The peer's max_dest_rd_atomic from its HELLO or ACCEPT (at least 1). */
    int peerMaxDestRdAtomic() {
        return peerMaxDestRdAtomic;
    }

    /** Bytes arrived at {@code nowNs}. */
    void received(long nowNs) {
        lastRxNs = nowNs;
    }

    /** Bytes left at {@code nowNs}. */
    void sent(long nowNs) {
        lastTxNs = nowNs;
    }

    /** When anything last moved in either direction. */
    long quietSinceNs() {
        return Math.max(lastRxNs, lastTxNs);
    }

    // ================================================================================================ establishment

    /** INIT→RTR: elect the connecting side, then connect or wait for the peer (with a parked connection, take it). */
    void start() {
        peer = EndpointAddress.parse(qp.remoteEndpoint().address());
        int cmp = Integer.compare(qp.queuePairNumber(), qp.destQpNumber());
        if (cmp == 0) {
            cmp = Long.compareUnsigned(qp.secretHigh, peer.secretHigh());
        }
        // Exactly one side connects: the one with the larger (QPN, secret). No extra round trip to agree.
        connector = cmp > 0;
        connectStartNs = System.nanoTime();
        backoffNs = FIRST_BACKOFF_NS;
        if (connector) {
            connectNow();
        } else {
            state = WAIT_PEER;
            if (parked != null) {
                SocketChannel candidate = parked;
                parked = null;
                acceptIncoming(candidate, parkedQpn, parkedHigh, parkedLow, parkedMaxDest);
            }
        }
        qp.engine.schedule(connectDeadlineNs());
    }

    /** Back to RESET: no connection until the next INIT→RTR. */
    void reset() {
        state = IDLE;
    }

    private long connectDeadlineNs() {
        long budget = RnrTimer.ackTimeoutNs(qp.timeout()) * (qp.retryCount() + 1);
        return connectStartNs + Math.max(budget, qp.tcp.settings.connectTimeoutMs() * 1_000_000L);
    }

    private void connectNow() {
        SocketChannel ch = null;
        try {
            ch = SocketChannel.open();
            qp.tcp.configure(ch);
            boolean done = ch.connect(peer.socketAddress());
            channel = ch;
            state = CONNECTING;
            SocketChannel registered = ch;
            int ops = done ? SelectionKey.OP_WRITE : SelectionKey.OP_CONNECT;
            qp.engine.execute(() -> register(registered, ops));
        } catch (IOException | RuntimeException e) {
            TcpContext.closeQuietly(ch);
            channel = null;
            retryLater();
        }
    }

    /** Registers our channel with the engine's selector (on the engine thread). */
    private void register(SocketChannel ch, int ops) {
        ReentrantLock lock = qp.lock();
        lock.lock();
        try {
            if (channel != ch || state == CLOSED || state == IDLE || state == RETRY_WAIT) {
                return;
            }
            key = ch.register(qp.engine.selector, ops, qp);
            if (state == UP) {
                qp.ioRound();
            }
        } catch (CancelledKeyException e) {
            // The channel's old key (from the listener's handshake) is deregistered at the next select.
            qp.engine.execute(() -> register(ch, ops));
        } catch (ClosedChannelException e) {
            qp.onLinkLost();
        } catch (IOException e) {
            qp.onLinkLost();
        } finally {
            lock.unlock();
        }
    }

    /** A connection attempt failed or was refused: try again after a backoff, until the deadline. */
    void retryLater() {
        closeChannel();
        long now = System.nanoTime();
        if (now - connectDeadlineNs() >= 0) {
            connectFailed();
            return;
        }
        state = RETRY_WAIT;
        nextAttemptNs = now + backoffNs;
        backoffNs = Math.min(backoffNs * 2, MAX_BACKOFF_NS);
        qp.engine.schedule(nextAttemptNs);
    }

    private void connectFailed() {
        qp.counters.increment(Counter.LOCAL_ACK_TIMEOUT_ERR);
        closeChannel();
        state = CLOSED;
        qp.failQueuePair(WorkCompletionStatus.RETRY_EXC_ERR);
    }

    /** A connection that passed the listener's HELLO checks arrives for this QP (engine thread). */
    void offerIncoming(SocketChannel ch, int srcQpn, long srcHigh, long srcLow, int peerMaxDest) {
        ReentrantLock lock = qp.lock();
        lock.lock();
        try {
            if (qp.closed()) {
                TcpContext.closeQuietly(ch);
                return;
            }
            QueuePairState s = qp.state();
            if (s == QueuePairState.RESET || s == QueuePairState.INIT) {
                // The peer reached RTR first: keep the connection until we get there.
                TcpContext.closeQuietly(parked);
                parked = ch;
                parkedQpn = srcQpn;
                parkedHigh = srcHigh;
                parkedLow = srcLow;
                parkedMaxDest = peerMaxDest;
                parkedDeadlineNs = System.nanoTime() + PARK_TIMEOUT_NS;
                qp.engine.schedule(parkedDeadlineNs);
                return;
            }
            if (state != WAIT_PEER || connector) {
                qp.counters.increment(Counter.PORT_RCV_ERRORS);
                TcpContext.closeQuietly(ch);
                return;
            }
            acceptIncoming(ch, srcQpn, srcHigh, srcLow, peerMaxDest);
        } finally {
            lock.unlock();
        }
    }

    private void acceptIncoming(SocketChannel ch, int srcQpn, long srcHigh, long srcLow, int peerMaxDest) {
        if ((srcQpn ^ qp.destQpNumber() | (srcHigh ^ peer.secretHigh()) | (srcLow ^ peer.secretLow())) != 0) {
            // Knows our secret but is not the QP we were connected to.
            qp.counters.increment(Counter.PORT_RCV_ERRORS);
            TcpContext.closeQuietly(ch);
            return;
        }
        channel = ch;
        peerMaxDestRdAtomic = Math.max(1, peerMaxDest);
        ByteBuffer out = qp.output.frameBuffer();
        out.clear();
        writeHello(out, Wire.KIND_ACCEPT);
        qp.output.markPending();
        connectionUp();
        try {
            key = ch.register(qp.engine.selector, SelectionKey.OP_READ | SelectionKey.OP_WRITE, qp);
            if (Thread.currentThread() != qp.engine.thread) {
                qp.engine.wakeupIfSleeping();
            }
            qp.ioRound();
        } catch (CancelledKeyException e) {
            qp.engine.execute(() -> register(ch, SelectionKey.OP_READ | SelectionKey.OP_WRITE));
        } catch (IOException e) {
            qp.onLinkLost();
        }
    }

    /** Writes our HELLO or ACCEPT at the start of {@code b} and limits {@code b} to it. */
    private void writeHello(ByteBuffer b, int kind) {
        hello.wrap(b, 0).write(kind, qp.destQpNumber(), qp.queuePairNumber(), peer.secretHigh(), peer.secretLow(),
            qp.secretHigh, qp.secretLow, Math.max(1, qp.maxDestRdAtomic()));
        b.position(0).limit(Wire.HELLO);
    }

    private void connectionUp() {
        state = UP;
        SocketChannel ch = channel;
        int lowat = qp.tcp.notSentLowatBytes;
        if (lowat > 0 && ch != null) {
            try {
                if (ch.getRemoteAddress() instanceof InetSocketAddress remote
                    && !remote.getAddress().isLoopbackAddress()) {
                    SocketTuning.setNotSentLowatLater(ch, lowat);
                }
            } catch (IOException e) {
                // the connection is failing; its I/O reports that
            }
        }
        long now = System.nanoTime();
        lastRxNs = now;
        lastTxNs = now;
    }

    /** The connector's socket became connectable: send the HELLO. */
    void finishConnect() throws IOException {
        try {
            if (!channel.finishConnect()) {
                return;
            }
        } catch (IOException e) {
            retryLater();
            return;
        }
        state = HANDSHAKE;
        ByteBuffer out = qp.output.frameBuffer();
        out.clear();
        writeHello(out, Wire.KIND_HELLO);
        // A fresh socket's send buffer always takes 64 bytes; anything else is a dead connection.
        channel.write(out);
        if (out.hasRemaining()) {
            retryLater();
            return;
        }
        out.clear().limit(0);
        key.interestOps(SelectionKey.OP_READ);
    }

    /** The connector reads the peer's ACCEPT; bytes after it stay in the input's staging buffer as frames. */
    void readAccept() throws IOException {
        ByteBuffer in = qp.input.staging();
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
        HelloFlyweight h = hello.wrap(in, p);
        boolean ok = h.is(Wire.KIND_ACCEPT) && h.destinationQpn() == qp.queuePairNumber()
            && h.sourceQpn() == qp.destQpNumber()
            && h.destinationSecretHigh() == qp.secretHigh && h.destinationSecretLow() == qp.secretLow
            && h.sourceSecretHigh() == peer.secretHigh() && h.sourceSecretLow() == peer.secretLow();
        if (!ok) {
            qp.counters.increment(Counter.PORT_RCV_ERRORS);
            in.clear().limit(0);
            retryLater();
            return;
        }
        peerMaxDestRdAtomic = Math.max(1, h.maxDestRdAtomic());
        in.position(p + Wire.HELLO);
        connectionUp();
        key.interestOps(SelectionKey.OP_READ);
        qp.ioRound();
    }

    // ================================================================================================ timers, close

    /**
     * The connection's timers: a parked connection's deadline, the next connection attempt, the establishment
     * deadline, the close linger. Returns when to look again (Long.MAX_VALUE: nothing pending here).
     */
    long onTimer(long nowNs) {
        long next = Long.MAX_VALUE;
        if (parked != null) {
            if (nowNs - parkedDeadlineNs >= 0) {
                TcpContext.closeQuietly(parked);
                parked = null;
            } else {
                next = parkedDeadlineNs;
            }
        }
        switch (state) {
            case RETRY_WAIT -> {
                if (nowNs - nextAttemptNs >= 0) {
                    connectNow();
                }
                next = Math.min(next, Math.min(nextAttemptNs, connectDeadlineNs()));
            }
            case CONNECTING, HANDSHAKE, WAIT_PEER -> {
                long deadline = connectDeadlineNs();
                if (nowNs - deadline >= 0) {
                    connectFailed();
                } else {
                    next = Math.min(next, deadline);
                }
            }
            case CLOSING -> {
                if (nowNs - closeDeadlineNs >= 0) {
                    qp.hardClose();
                } else {
                    next = Math.min(next, closeDeadlineNs);
                }
            }
            default -> {
            }
        }
        return next;
    }

    /**
     * The QP entered ERR with the connection up: close gracefully. What is queued (typically the NAK that explains
     * the error) is still sent, then FIN; input is drained until the peer closes too or the linger ends.
     */
    void beginClose() {
        state = CLOSING;
        closeDeadlineNs = System.nanoTime() + CLOSE_LINGER_NS;
        qp.engine.schedule(closeDeadlineNs);
        if (key != null && key.isValid()) {
            key.interestOps(SelectionKey.OP_READ | SelectionKey.OP_WRITE);
        }
    }

    /** Closes the socket at once; the connection is closed unless it never started. */
    void close() {
        closeChannel();
        if (state != IDLE) {
            state = CLOSED;
        }
    }

    /** Closes a connection parked for this QP (the QP is being destroyed). */
    void closeParked() {
        TcpContext.closeQuietly(parked);
        parked = null;
    }

    private void closeChannel() {
        if (key != null) {
            key.cancel();
            key = null;
        }
        TcpContext.closeQuietly(channel);
        channel = null;
    }
}
