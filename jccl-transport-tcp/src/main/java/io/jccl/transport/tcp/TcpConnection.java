package io.jccl.transport.tcp;

import io.jccl.common.SecureIds;
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
import java.util.Arrays;
import java.util.concurrent.locks.ReentrantLock;

/**
 * The connection of one tcp QP, kept apart from the data path as soft-iWARP keeps {@code siw_cm.c} apart: which side
 * connects (the QP with the larger (QPN, secret), decided by both without talking), connecting and retrying with
 * backoff until the QP's deadline, the handshake (version 3: HELLO, CHALLENGE, PROOF under the pair key, see
 * {@link HelloFlyweight}), peers' connections that arrive before this QP reached RTR (parked, a few at most, never
 * displaced) and the connection's life after that (up, closing gracefully, closed), with its traffic timestamps.
 * Runs under the QP's lock; the listener's first checks of a HELLO are {@link TcpContext}'s.
 *
 * <p>Acceptor: a HELLO that passed the listener is a <em>candidate</em>. Before RTR it is parked unread (the pair
 * key needs the peer's endpoint record). At RTR each candidate's HELLO MAC is checked (a wrong one, a peer other
 * than the configured one or a HELLO nonce seen before: closed and counted), then it gets a CHALLENGE; the first
 * to return a valid PROOF becomes the connection and the others are closed. Until then nothing read from a
 * candidate reaches the QP: its bytes go into its own 96-byte buffer. Connector: HELLO, then the CHALLENGE must
 * carry the acceptor's MAC over our fresh nonce (else counted, closed, retried), then PROOF and frames.
 */
final class TcpConnection {
    static final int IDLE = 0;
    static final int RETRY_WAIT = 1;
    static final int CONNECTING = 2;
    /** Connector: HELLO sent, waiting for the CHALLENGE. */
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
    /** Incoming connections one QP holds at once (parked or challenged); more are closed and counted. */
    static final int MAX_CANDIDATES = 4;
    /** HELLO nonces this QP verified, kept so that a replayed HELLO is refused before it gets a challenge. */
    private static final int SEEN_NONCES = 16;

    private final TcpQueuePair qp;
    private final HelloFlyweight hello = new HelloFlyweight();
    /** Keyed with the pair key from RTR until the connection is up (or fails); created at the first RTR. */
    private HmacSha256 mac;
    private boolean keyed;
    /** The connector's nonce of the current attempt. */
    private long nonceHigh;
    private long nonceLow;
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
    /** Incoming connections, oldest first: parked (before RTR) or challenged (at RTR). */
    private final Candidate[] candidates = new Candidate[MAX_CANDIDATES];
    private int candidateCount;
    /** Ring of verified HELLO nonces (high, low), created on first use. */
    private long[] seenNonces;
    private int seenNext;

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

    /** The peer's max_dest_rd_atomic from its HELLO or CHALLENGE (at least 1). */
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

    /** When bytes last arrived (the liveness check's evidence: {@link TcpLiveness}). */
    long lastRxNs() {
        return lastRxNs;
    }

    /** When bytes last left. */
    long lastTxNs() {
        return lastTxNs;
    }

    /** When anything last moved in either direction. */
    long quietSinceNs() {
        return Math.max(lastRxNs, lastTxNs);
    }

    // ================================================================================================ establishment

    /**
     * INIT→RTR: elect the connecting side, derive the pair key, then connect, or wait for the peer and challenge
     * the connections parked so far.
     */
    void start() {
        peer = EndpointAddress.parse(qp.remoteEndpoint().address());
        int cmp = Integer.compare(qp.queuePairNumber(), qp.destQpNumber());
        if (cmp == 0) {
            cmp = Long.compareUnsigned(qp.secretHigh, peer.secretHigh());
        }
        // Exactly one side connects: the one with the larger (QPN, secret). No extra round trip to agree.
        connector = cmp > 0;
        deriveKey();
        connectStartNs = System.nanoTime();
        backoffNs = FIRST_BACKOFF_NS;
        if (connector) {
            // Nobody may connect to the connecting side: whatever was parked is not our peer.
            dropCandidates(true);
            connectNow();
        } else {
            state = WAIT_PEER;
            challengeParked();
        }
        qp.engine.schedule(connectDeadlineNs());
    }

    /** The pair key from both endpoint records, connector first; keys {@link #mac}. */
    private void deriveKey() {
        if (mac == null) {
            mac = new HmacSha256();
        }
        byte[] k = new byte[HmacSha256.MAC_BYTES];
        if (connector) {
            HelloFlyweight.pairKey(mac, qp.queuePairNumber(), qp.secretHigh, qp.secretLow, qp.destQpNumber(),
                peer.secretHigh(), peer.secretLow(), k);
        } else {
            HelloFlyweight.pairKey(mac, qp.destQpNumber(), peer.secretHigh(), peer.secretLow(),
                qp.queuePairNumber(), qp.secretHigh, qp.secretLow, k);
        }
        Arrays.fill(k, (byte) 0);
        keyed = true;
    }

    /** No more handshakes until the next RTR: the key is dropped. */
    private void forgetKey() {
        if (keyed) {
            mac.clear();
            keyed = false;
        }
    }

    /** Back to RESET: no connection until the next INIT→RTR. */
    void reset() {
        state = IDLE;
        dropChallenged();
        forgetKey();
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
            // A cancelled key of this channel is deregistered at the selector's next select.
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
        dropCandidates(false);
        forgetKey();
        state = CLOSED;
        qp.failQueuePair(WorkCompletionStatus.RETRY_EXC_ERR);
    }

    // ================================================================================================ acceptor

    /**
     * A connection whose HELLO (in {@code message}, 96 bytes) passed the listener's checks arrives for this QP
     * (engine thread). Before RTR it is parked, at RTR checked and challenged; never does it displace another.
     */
    void offerIncoming(SocketChannel ch, ByteBuffer message) {
        ReentrantLock lock = qp.lock();
        lock.lock();
        try {
            if (qp.closed()) {
                TcpContext.closeQuietly(ch);
                return;
            }
            QueuePairState s = qp.state();
            boolean early = s == QueuePairState.RESET || s == QueuePairState.INIT;
            if (!early && (state != WAIT_PEER || connector)) {
                refuse(ch); // connected already, failed, or we are the side that connects
                return;
            }
            Candidate c = new Candidate(ch, message);
            if (!early && !helloAuthentic(c)) {
                refuse(ch);
                return;
            }
            if (candidateCount == MAX_CANDIDATES || !qp.tcp.takeCandidateSlot()) {
                refuse(ch); // excess: dropped, not queued, and nobody is displaced
                return;
            }
            candidates[candidateCount++] = c;
            if (early) {
                // The peer reached RTR first (or someone who knows our QP number): keep it, unread, until ours.
                c.deadlineNs = System.nanoTime() + PARK_TIMEOUT_NS;
                qp.engine.schedule(c.deadlineNs);
            } else {
                challenge(c);
            }
        } finally {
            lock.unlock();
        }
    }

    private void refuse(SocketChannel ch) {
        qp.counters.increment(Counter.PORT_RCV_ERRORS);
        TcpContext.closeQuietly(ch);
    }

    /** At RTR: each parked connection, oldest first, is checked and challenged. */
    private void challengeParked() {
        for (int i = 0; i < candidateCount; ) {
            Candidate c = candidates[i];
            if (c.challenged) {
                i++;
            } else if (!helloAuthentic(c)) {
                removeCandidate(c, true);
            } else {
                int before = candidateCount;
                challenge(c);
                if (candidateCount == before) {
                    i++;
                }
            }
        }
    }

    /**
     * Whether a candidate's HELLO comes from the configured peer with the pair key: source QPN, MAC in constant
     * time, and a nonce this QP has not verified before (a replay is refused here, before it gets a challenge).
     */
    private boolean helloAuthentic(Candidate c) {
        HelloFlyweight h = hello.wrap(c.buffer, 0);
        if (h.sourceQpn() != qp.destQpNumber() || !h.macMatches(mac, 0, 0, 0, 0)) {
            return false;
        }
        if (seenNonces == null) {
            seenNonces = new long[2 * SEEN_NONCES];
        }
        for (int i = 0; i < seenNonces.length; i += 2) {
            if (seenNonces[i] == c.nonceHigh && seenNonces[i + 1] == c.nonceLow) {
                return false;
            }
        }
        seenNonces[2 * seenNext] = c.nonceHigh;
        seenNonces[2 * seenNext + 1] = c.nonceLow;
        seenNext = (seenNext + 1) % SEEN_NONCES;
        return true;
    }

    /** Sends a candidate our CHALLENGE (fresh nonce, MAC over the connector's nonce) and waits for its PROOF. */
    private void challenge(Candidate c) {
        c.acceptorNonceHigh = SecureIds.nonce();
        c.acceptorNonceLow = SecureIds.nonce();
        ByteBuffer b = c.buffer;
        hello.wrap(b, 0).write(Wire.KIND_CHALLENGE, qp.destQpNumber(), qp.queuePairNumber(), c.acceptorNonceHigh,
            c.acceptorNonceLow, advertisedMaxDest()).sign(mac, c.nonceHigh, c.nonceLow, 0, 0);
        b.clear();
        try {
            c.channel.write(b);
        } catch (IOException e) {
            removeCandidate(c, false); // gone (a connector that gave up on this attempt)
            return;
        }
        if (b.hasRemaining()) {
            removeCandidate(c, true); // a fresh socket takes 96 bytes; anything else is not a peer
            return;
        }
        b.clear(); // now receives the PROOF, and nothing after it
        c.challenged = true;
        c.deadlineNs = System.nanoTime() + TcpContext.HANDSHAKE_TIMEOUT_NS;
        qp.engine.schedule(c.deadlineNs);
        registerCandidate(c);
    }

    /** Registers a challenged candidate for its PROOF (lock held). */
    private void registerCandidate(Candidate c) {
        if (!holds(c)) {
            return;
        }
        try {
            c.key = c.channel.register(qp.engine.selector, SelectionKey.OP_READ, c);
            if (Thread.currentThread() != qp.engine.thread) {
                qp.engine.wakeupIfSleeping();
            }
        } catch (CancelledKeyException e) {
            // Its key from the listener (same selector) is deregistered at the next select: register after it.
            qp.engine.execute(() -> {
                ReentrantLock lock = qp.lock();
                lock.lock();
                try {
                    registerCandidate(c);
                } finally {
                    lock.unlock();
                }
            });
        } catch (IOException e) {
            removeCandidate(c, false);
        }
    }

    /** A challenged candidate's bytes arrived: once its whole PROOF is here, accept it or close it. */
    private void readProof(Candidate c, SelectionKey selected) {
        ReentrantLock lock = qp.lock();
        lock.lock();
        try {
            if (!holds(c) || !c.challenged) {
                selected.cancel();
                return;
            }
            int n;
            try {
                n = c.channel.read(c.buffer);
            } catch (IOException e) {
                n = -1;
            }
            if (n < 0) {
                removeCandidate(c, true); // closed without a PROOF, or inside it
                return;
            }
            if (c.buffer.hasRemaining()) {
                return;
            }
            HelloFlyweight h = hello.wrap(c.buffer, 0);
            if (state != WAIT_PEER || connector || !h.wellFormed(Wire.KIND_PROOF)
                || h.destinationQpn() != qp.queuePairNumber() || h.sourceQpn() != qp.destQpNumber()
                || !h.macMatches(mac, c.nonceHigh, c.nonceLow, c.acceptorNonceHigh, c.acceptorNonceLow)) {
                removeCandidate(c, true);
                return;
            }
            // The peer proved the pair key over our fresh nonce: this is the connection, the others go.
            detachCandidate(c);
            channel = c.channel;
            key = c.key;
            key.attach(qp);
            peerMaxDestRdAtomic = Math.max(1, c.peerMaxDest);
            connectionUp();
            qp.ioRoundOrFail();
        } finally {
            lock.unlock();
        }
    }

    /** max_dest_rd_atomic as sent in a handshake (at least 1). */
    private int advertisedMaxDest() {
        return Math.min(Wire.HS_MAX_DEST_RD_ATOMIC, Math.max(1, qp.maxDestRdAtomic()));
    }

    private boolean holds(Candidate c) {
        for (int i = 0; i < candidateCount; i++) {
            if (candidates[i] == c) {
                return true;
            }
        }
        return false;
    }

    /** Takes {@code c} out of the candidates (its slot is free again), leaving its socket open. */
    private void detachCandidate(Candidate c) {
        for (int i = 0; i < candidateCount; i++) {
            if (candidates[i] == c) {
                System.arraycopy(candidates, i + 1, candidates, i, candidateCount - i - 1);
                candidates[--candidateCount] = null;
                qp.tcp.releaseCandidateSlot();
                return;
            }
        }
    }

    /** Closes a candidate; {@code bad}: it failed a check or a deadline (port_rcv_errors). */
    private void removeCandidate(Candidate c, boolean bad) {
        if (!holds(c)) {
            return;
        }
        detachCandidate(c);
        if (c.key != null) {
            c.key.cancel();
        }
        TcpContext.closeQuietly(c.channel);
        if (bad) {
            qp.counters.increment(Counter.PORT_RCV_ERRORS);
        }
    }

    private void dropCandidates(boolean bad) {
        while (candidateCount > 0) {
            removeCandidate(candidates[candidateCount - 1], bad);
        }
    }

    /** Closes the challenged candidates (their challenge was made under a key that is going away). */
    private void dropChallenged() {
        for (int i = candidateCount - 1; i >= 0; i--) {
            if (candidates[i].challenged) {
                removeCandidate(candidates[i], false);
            }
        }
    }

    /** Incoming connections held now (tests, diagnostics). */
    int candidates() {
        ReentrantLock lock = qp.lock();
        lock.lock();
        try {
            return candidateCount;
        } finally {
            lock.unlock();
        }
    }

    /** An incoming connection of this QP that has not authenticated yet. */
    private final class Candidate implements TcpEngine.Handler {
        final SocketChannel channel;
        /** Its HELLO; then our CHALLENGE; then its PROOF: never more than 96 bytes of it are read. */
        final ByteBuffer buffer;
        final long nonceHigh;
        final long nonceLow;
        final int peerMaxDest;
        long acceptorNonceHigh;
        long acceptorNonceLow;
        boolean challenged;
        long deadlineNs;
        SelectionKey key;

        Candidate(SocketChannel channel, ByteBuffer message) {
            this.channel = channel;
            this.buffer = message;
            HelloFlyweight h = new HelloFlyweight().wrap(message, 0);
            this.nonceHigh = h.nonceHigh();
            this.nonceLow = h.nonceLow();
            this.peerMaxDest = h.maxDestRdAtomic();
        }

        @Override
        public void onSelected(SelectionKey selected) {
            readProof(this, selected);
        }
    }

    // ================================================================================================ both

    private void connectionUp() {
        state = UP;
        dropCandidates(false);
        forgetKey();
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
        qp.engine.schedule(now); // the liveness timer starts with the connection (TcpLiveness)
    }

    /** The connector's socket became connectable: send the HELLO with a fresh nonce. */
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
        nonceHigh = SecureIds.nonce();
        nonceLow = SecureIds.nonce();
        ByteBuffer out = qp.output.frameBuffer();
        out.clear();
        hello.wrap(out, 0).write(Wire.KIND_HELLO, qp.destQpNumber(), qp.queuePairNumber(), nonceHigh, nonceLow,
            advertisedMaxDest()).sign(mac, 0, 0, 0, 0);
        out.position(0).limit(Wire.HANDSHAKE);
        // A fresh socket's send buffer always takes 96 bytes; anything else is a dead connection.
        channel.write(out);
        if (out.hasRemaining()) {
            retryLater();
            return;
        }
        out.clear().limit(0);
        key.interestOps(SelectionKey.OP_READ);
    }

    /**
     * The connector reads the acceptor's CHALLENGE: its MAC over our nonce proves it holds the pair key. Then our
     * PROOF goes out ahead of any frame and the connection is up; bytes after the CHALLENGE stay in the input's
     * staging buffer as frames. A wrong acceptor is counted and the attempt retried until the deadline.
     */
    void readChallenge() throws IOException {
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
            // Refused after connecting (the peer QP is not there yet, is gone, or had no room): try again.
            in.clear().limit(0);
            retryLater();
            return;
        }
        if (in.remaining() < Wire.HANDSHAKE) {
            return;
        }
        int p = in.position();
        HelloFlyweight h = hello.wrap(in, p);
        if (!h.wellFormed(Wire.KIND_CHALLENGE) || h.destinationQpn() != qp.queuePairNumber()
            || h.sourceQpn() != qp.destQpNumber() || !h.macMatches(mac, nonceHigh, nonceLow, 0, 0)) {
            qp.counters.increment(Counter.PORT_RCV_ERRORS);
            in.clear().limit(0);
            retryLater();
            return;
        }
        long acceptorHigh = h.nonceHigh();
        long acceptorLow = h.nonceLow();
        peerMaxDestRdAtomic = Math.max(1, h.maxDestRdAtomic());
        in.position(p + Wire.HANDSHAKE);
        ByteBuffer out = qp.output.frameBuffer();
        out.clear();
        hello.wrap(out, 0).write(Wire.KIND_PROOF, qp.destQpNumber(), qp.queuePairNumber(), 0, 0, 0)
            .sign(mac, nonceHigh, nonceLow, acceptorHigh, acceptorLow);
        out.position(0).limit(Wire.HANDSHAKE);
        qp.output.markPending();
        connectionUp();
        key.interestOps(SelectionKey.OP_READ | SelectionKey.OP_WRITE);
        qp.ioRound();
    }

    // ================================================================================================ timers, close

    /**
     * The connection's timers: parked and challenged connections' deadlines, the next connection attempt, the
     * establishment deadline, the close linger. Returns when to look again (Long.MAX_VALUE: nothing pending here).
     */
    long onTimer(long nowNs) {
        long next = Long.MAX_VALUE;
        for (int i = candidateCount - 1; i >= 0; i--) {
            Candidate c = candidates[i];
            if (nowNs - c.deadlineNs >= 0) {
                // A parked one expired (not an error), or a challenged one never proved itself (counted).
                removeCandidate(c, c.challenged);
            } else {
                next = Math.min(next, c.deadlineNs);
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
        dropChallenged();
        if (state != IDLE) {
            state = CLOSED;
        }
    }

    /** Closes every incoming connection held for this QP (the QP is being destroyed). */
    void closeCandidates() {
        dropCandidates(false);
        forgetKey();
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
