package io.jccl.verbs;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import java.io.ByteArrayInputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.net.StandardSocketOptions;
import java.nio.channels.ClosedSelectorException;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;

/**
 * Connection setup over a TCP side channel, like librdmacm: a server {@link #listen listens}, a client
 * {@link #connect connects}, and the manager creates the queue pairs and drives both through INIT→RTR→RTS.
 *
 * <p>The handshake is REQ (client endpoint, parameters, private data) → REP (server endpoint) → RTU →
 * ESTABLISHED, so the server's QP is ready to receive before the client may send, and the client returns a
 * connection only once the listener has taken it (an accept call whose deadline passed before the RTU arrived closes
 * the server's QP; the client then fails instead of holding a QP connected to nothing). When a shared secret is configured, both sides
 * first prove they know it (HMAC-SHA256 over fresh nonces from both sides) before any endpoint is revealed; the
 * client proves it first, and the server answers with its own proof only after checking the client's. A mismatch is
 * refused with {@link VerbsException.Reason#REJECTED} on both sides.
 *
 * <p>The listener treats every client as hostile until it has proved the secret and sent a well-formed request: see
 * {@link ConnectionListener} for the bounds it keeps.
 */
public final class ConnectionManager {
    static final int MAGIC = 0x4A434D31; // "JCM1"
    static final int REQUEST = 1;
    static final int REPLY = 2;
    static final int READY_TO_USE = 3;
    static final int REJECT = 4;
    /**
     * The listener's last word: it took the connection (its accept call returns it). Without it a client whose RTU
     * reached the listener just after that accept call's deadline returned a queue pair connected to one the
     * listener had already closed, and its first request failed with RETRY_EXC_ERR.
     */
    static final int ESTABLISHED = 5;
    static final int NONCE_LENGTH = 16;
    static final int HELLO_LENGTH = 4 + 1 + NONCE_LENGTH;
    static final int MAC_LENGTH = 32;
    /** Longest encoded endpoint either side reads (shm and tcp endpoints are 100-300 bytes). */
    static final int MAX_ENDPOINT_LENGTH = 1024;
    /** Longest reason a REJECT carries. */
    static final int MAX_REJECT_LENGTH = 1024;
    /** Largest READ/atomic depth a request may ask for (the range ibv_modify_qp accepts). */
    static final int MAX_RD_ATOMIC = 255;
    private static final SecureRandom RANDOM = new SecureRandom();

    private ConnectionManager() {
    }

    /** A connected queue pair and the peer's private data. */
    public record Connection(QueuePair queuePair, Endpoint remote, byte[] remotePrivateData) {
    }

    /**
     * Starts listening on {@code bindAddress} (port 0 picks a free port). Accepted connections get queue pairs of
     * {@code domain}.
     */
    public static ConnectionListener listen(ProtectionDomain domain, InetSocketAddress bindAddress) {
        ServerSocketChannel server = null;
        Selector selector = null;
        try {
            server = ServerSocketChannel.open();
            server.setOption(StandardSocketOptions.SO_REUSEADDR, true);
            server.bind(bindAddress, ConnectionListener.BACKLOG);
            server.configureBlocking(false);
            selector = Selector.open();
            return new ConnectionListener(domain, server, selector);
        } catch (IOException e) {
            closeQuietly(selector);
            closeQuietly(server);
            throw new VerbsException(VerbsException.Reason.CONNECTION, "cannot listen on " + bindAddress + ": "
                + e.getMessage(), e);
        }
    }

    /**
     * Connects to a listener: creates a QP with {@code init}, runs the handshake and returns the QP in RTS.
     *
     * @throws VerbsException CONNECTION when the server cannot be reached in time, REJECTED when it refuses us
     */
    public static Connection connect(ProtectionDomain domain, QueuePairInitAttributes init, InetSocketAddress server,
                                     ConnectionParameters parameters) {
        long deadlineNs = System.nanoTime() + parameters.handshakeTimeout().toNanos();
        QueuePair queuePair = null;
        try (Socket socket = new Socket()) {
            socket.setTcpNoDelay(true);
            socket.connect(server, remainingMs(deadlineNs, server));
            socket.setSoTimeout(remainingMs(deadlineNs, server));
            DataInputStream in = new DataInputStream(socket.getInputStream());
            DataOutputStream out = new DataOutputStream(socket.getOutputStream());
            authenticate(in, out, parameters.secret());
            queuePair = domain.createQueuePair(init);
            queuePair.modify(QueuePairAttributes.toInit().accessFlags(parameters.accessFlags()));
            out.writeInt(REQUEST);
            out.writeUTF(queuePair.localEndpoint().encode());
            out.writeInt(parameters.responderResources());
            out.writeInt(parameters.initiatorDepth());
            out.writeShort(parameters.privateData().length);
            out.write(parameters.privateData());
            out.flush();
            int type = in.readInt();
            if (type == REJECT) {
                throw new VerbsException(VerbsException.Reason.REJECTED, "connection to " + server
                    + " rejected: " + readBoundedUtf(in, MAX_REJECT_LENGTH, "reject reason"));
            }
            if (type != REPLY) {
                throw new VerbsException(VerbsException.Reason.CONNECTION,
                    "unexpected handshake message " + type + " (expected " + REPLY + ")");
            }
            Endpoint remote = readEndpoint(in);
            int peerResponder = in.readInt();
            byte[] peerPrivate = readPrivateData(in);
            queuePair.modify(QueuePairAttributes.toReadyToReceive(remote)
                .maxDestRdAtomic(parameters.responderResources()).minRnrTimer(parameters.minRnrTimer()));
            queuePair.modify(QueuePairAttributes.toReadyToSend(queuePair.initialPsn())
                .maxRdAtomic(Math.min(parameters.initiatorDepth(), peerResponder)).retryCount(parameters.retryCount())
                .rnrRetry(parameters.rnrRetryCount()).timeout(parameters.ackTimeout()));
            out.writeInt(READY_TO_USE);
            out.flush();
            int confirmation;
            try {
                confirmation = in.readInt();
            } catch (java.io.EOFException e) {
                throw new VerbsException(VerbsException.Reason.CONNECTION, "connecting to " + server + " failed: the "
                    + "listener closed the handshake after our RTU (its accept call ended first); try again", e);
            }
            if (confirmation != ESTABLISHED) {
                throw new VerbsException(VerbsException.Reason.CONNECTION,
                    "unexpected handshake message " + confirmation + " (expected " + ESTABLISHED + ")");
            }
            return new Connection(queuePair, remote, peerPrivate);
        } catch (IOException | RuntimeException e) {
            if (queuePair != null) {
                queuePair.close();
            }
            if (e instanceof VerbsException verbs) {
                throw verbs;
            }
            throw new VerbsException(e instanceof SocketTimeoutException ? VerbsException.Reason.TIMEOUT
                : VerbsException.Reason.CONNECTION, "connecting to " + server + " failed: " + e.getMessage(), e);
        }
    }

    /**
     * A listening side channel. {@link #accept} returns one connection per call, but runs every pending handshake
     * at once on the calling thread (non-blocking sockets, one selector), so a client that connects and never
     * speaks, or speaks one byte a second, delays nobody and never holds the call past its deadline. The listener
     * keeps no thread of its own.
     *
     * <p>Bounds, whatever clients do: at most {@value #MAX_PENDING} handshakes are held (when full, the one that has
     * sent least, oldest first, is closed to make room; a client that has sent a complete request is never
     * dropped); each must finish within the handshake timeout of the call that took it in; every length read from
     * the wire is checked before anything is allocated for it; a failing {@code accept()} of the server socket
     * (out of descriptors) backs off instead of spinning. Nothing a client sends ends the call: a bad client is
     * closed (or, once authenticated, sent a REJECT saying why) and the call goes on with the others.
     *
     * <p>Handshakes still in progress when a call returns stay with the listener and continue in the next call (a
     * request that arrived then gets that call's queue pair attributes); {@link #close} closes them.
     */
    public static final class ConnectionListener implements AutoCloseable {
        /** Handshakes held at once; beyond it the least advanced is evicted. */
        static final int MAX_PENDING = 64;
        static final int BACKLOG = 256;
        /** New connections taken in per selector round, so that reading those already in is never starved. */
        private static final int ACCEPT_BATCH = 16;
        private static final long ACCEPT_BACKOFF_MIN_NS = TimeUnit.MILLISECONDS.toNanos(10);
        private static final long ACCEPT_BACKOFF_MAX_NS = TimeUnit.MILLISECONDS.toNanos(500);

        private final ProtectionDomain domain;
        private final ServerSocketChannel server;
        private final Selector selector;
        private final SelectionKey acceptKey;
        private final InetSocketAddress localAddress;
        private final ReentrantLock lock = new ReentrantLock();
        /** Handshakes in progress, oldest first. */
        private final List<PendingConnection> pending = new ArrayList<>();
        private volatile boolean closed;
        private long acceptBackoffNs;
        private long acceptResumeNs;
        /** Within one accept call: clients refused or dropped, and why the last one was. */
        private int refused;
        private String lastFailure;

        private ConnectionListener(ProtectionDomain domain, ServerSocketChannel server, Selector selector)
            throws IOException {
            this.domain = domain;
            this.server = server;
            this.selector = selector;
            this.acceptKey = server.register(selector, SelectionKey.OP_ACCEPT);
            this.localAddress = (InetSocketAddress) server.getLocalAddress();
        }

        /** The address clients connect to. */
        public InetSocketAddress localAddress() {
            return localAddress;
        }

        /**
         * Waits for one client to complete the handshake, creates a QP with {@code init}, drives it to RTS and
         * returns once the client confirmed (RTU). Clients that fail authentication or send malformed requests are
         * closed and the wait goes on until the deadline. One thread accepts at a time; another caller waits its
         * turn (within its own deadline).
         *
         * @throws VerbsException TIMEOUT when no client completed the handshake within the parameters' deadline
         *     (the message counts the clients refused and says why the last one was); CLOSED when the listener is
         *     or gets closed; the domain's own exception when it cannot create or initialise a queue pair (the
         *     client stays pending for the next call)
         */
        public Connection accept(QueuePairInitAttributes init, ConnectionParameters parameters) {
            long deadlineNs = System.nanoTime() + parameters.handshakeTimeout().toNanos();
            try {
                if (!lock.tryLock(Math.max(0, deadlineNs - System.nanoTime()), TimeUnit.NANOSECONDS)) {
                    throw new VerbsException(VerbsException.Reason.TIMEOUT, "another thread was accepting on "
                        + localAddress + " for all of " + parameters.handshakeTimeout());
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new VerbsException(VerbsException.Reason.CONNECTION, "interrupted while accepting", e);
            }
            PendingConnection inProgress = null;
            try {
                ensureOpen();
                refused = 0;
                lastFailure = null;
                for (PendingConnection c : List.copyOf(pending)) {
                    if (!MessageDigest.isEqual(c.secret, parameters.secret())) {
                        drop(c, "the shared secret changed");
                    }
                }
                while (true) {
                    ensureOpen();
                    if (Thread.interrupted()) {
                        Thread.currentThread().interrupt();
                        throw new VerbsException(VerbsException.Reason.CONNECTION, "interrupted while accepting");
                    }
                    long nowNs = System.nanoTime();
                    expire(nowNs);
                    if (inProgress != null && !pending.contains(inProgress)) {
                        inProgress = null; // dropped: its client is gone, broke the protocol or ran out of time
                    }
                    if (inProgress == null) {
                        inProgress = startNext(init, parameters);
                    } else if (inProgress.stage() == PendingConnection.Stage.DONE) {
                        Connection connection = complete(inProgress);
                        inProgress = null;
                        if (connection != null) {
                            return connection;
                        }
                        continue; // the client left between its RTU and our confirmation: next one
                    }
                    if (nowNs - deadlineNs >= 0) {
                        break;
                    }
                    selector.select(Math.max(1, TimeUnit.NANOSECONDS.toMillis(wakeNs(deadlineNs) - nowNs) + 1));
                    onSelected(parameters);
                }
                if (inProgress != null) {
                    drop(inProgress, "no RTU before the deadline");
                }
                throw new VerbsException(VerbsException.Reason.TIMEOUT, "no client completed a connection on "
                    + localAddress + " within " + parameters.handshakeTimeout()
                    + (refused > 0 ? " (" + refused + " refused or dropped, the last because: " + lastFailure + ")"
                    : ""));
            } catch (IOException | ClosedSelectorException e) {
                ensureOpen();
                throw new VerbsException(VerbsException.Reason.CONNECTION, "listener on " + localAddress
                    + " failed: " + e.getMessage(), e);
            } finally {
                if (inProgress != null && inProgress.stage() != PendingConnection.Stage.DONE
                    && pending.contains(inProgress)) {
                    drop(inProgress, "the accept call ended"); // never leave a queue pair behind
                }
                if (!closed) {
                    try {
                        selector.selectNow(); // releases the descriptors of the channels closed in this call
                        selector.selectedKeys().clear();
                    } catch (IOException | ClosedSelectorException ignored) {
                        // closing anyway
                    }
                }
                lock.unlock();
            }
        }

        private void ensureOpen() {
            if (closed) {
                throw new VerbsException(VerbsException.Reason.CLOSED, "listener on " + localAddress + " is closed");
            }
        }

        /**
         * The oldest complete request gets a queue pair in RTS and the reply; returns it, or null when no request is
         * complete (requests that cannot be applied are refused on the way).
         */
        private PendingConnection startNext(QueuePairInitAttributes init, ConnectionParameters parameters) {
            while (true) {
                PendingConnection next = null;
                for (PendingConnection c : pending) {
                    if (c.stage() == PendingConnection.Stage.READY) {
                        next = c;
                        break;
                    }
                }
                if (next == null) {
                    return null;
                }
                if (start(next, init, parameters)) {
                    return next;
                }
            }
        }

        private boolean start(PendingConnection next, QueuePairInitAttributes init, ConnectionParameters parameters) {
            // Creating and initialising the QP uses only our own attributes: a failure is ours to report, and the
            // client stays pending for the next call.
            QueuePair queuePair = domain.createQueuePair(init);
            try {
                queuePair.modify(QueuePairAttributes.toInit().accessFlags(parameters.accessFlags()));
            } catch (RuntimeException e) {
                queuePair.close();
                throw e;
            }
            try {
                // What the client asked for is bounded by what we offer (librdmacm's rdma_accept: min of the two).
                queuePair.modify(QueuePairAttributes.toReadyToReceive(next.remote())
                    .maxDestRdAtomic(Math.min(parameters.responderResources(), next.peerInitiator()))
                    .minRnrTimer(parameters.minRnrTimer()));
                queuePair.modify(QueuePairAttributes.toReadyToSend(queuePair.initialPsn())
                    .maxRdAtomic(Math.min(parameters.initiatorDepth(), next.peerResponder()))
                    .retryCount(parameters.retryCount()).rnrRetry(parameters.rnrRetryCount())
                    .timeout(parameters.ackTimeout()));
            } catch (RuntimeException e) {
                queuePair.close();
                String reason = describe(e);
                next.reject(reason);
                drop(next, "its request could not be applied: " + reason);
                return false;
            }
            try {
                next.reply(queuePair, parameters.responderResources(), parameters.privateData());
            } catch (IOException | RuntimeException e) {
                drop(next, "the reply could not be sent: " + describe(e)); // closes the queue pair it now holds
                return false;
            }
            return true;
        }

        /** Confirms the connection to its client and hands it over; null (all released) when that fails. */
        private Connection complete(PendingConnection done) {
            try {
                done.confirm();
            } catch (IOException | RuntimeException e) {
                drop(done, "the confirmation could not be sent: " + describe(e)); // closes its queue pair
                return null;
            }
            pending.remove(done);
            QueuePair queuePair = done.takeQueuePair();
            done.close();
            return new Connection(queuePair, done.remote(), done.privateData());
        }

        /** When the selector must wake at the latest: the call's deadline, a handshake's, or the end of a backoff. */
        private long wakeNs(long deadlineNs) {
            long wakeNs = deadlineNs;
            for (PendingConnection c : pending) {
                if (c.deadlineNs - wakeNs < 0) {
                    wakeNs = c.deadlineNs;
                }
            }
            if (acceptBackoffNs > 0 && acceptResumeNs - wakeNs < 0) {
                wakeNs = acceptResumeNs;
            }
            return wakeNs;
        }

        private void onSelected(ConnectionParameters parameters) {
            boolean acceptable = false;
            Iterator<SelectionKey> keys = selector.selectedKeys().iterator();
            while (keys.hasNext()) {
                SelectionKey key = keys.next();
                keys.remove();
                if (key == acceptKey) {
                    acceptable = key.isValid() && key.isAcceptable();
                    continue;
                }
                PendingConnection c = (PendingConnection) key.attachment();
                try {
                    if (key.isValid() && key.isWritable()) {
                        c.onWritable();
                    }
                    if (key.isValid() && key.isReadable()) {
                        c.onReadable();
                    }
                } catch (IOException | RuntimeException e) {
                    if (c.authenticated() && e instanceof VerbsException) {
                        c.reject(e.getMessage()); // a client that proved the secret hears why (best effort)
                    }
                    drop(c, describe(e));
                }
            }
            // Those already in are read first; new connections come after, a batch at a time.
            if (acceptable || acceptBackoffNs > 0) {
                acceptSome(parameters);
            }
        }

        private void acceptSome(ConnectionParameters parameters) {
            long nowNs = System.nanoTime();
            if (acceptBackoffNs > 0 && nowNs - acceptResumeNs < 0) {
                return;
            }
            for (int i = 0; i < ACCEPT_BATCH; i++) {
                if (pending.size() >= MAX_PENDING && !evictOne()) {
                    acceptKey.interestOps(0); // every slot holds a complete request: leave the rest in the backlog
                    return;
                }
                SocketChannel channel;
                try {
                    channel = server.accept();
                } catch (IOException e) {
                    // EMFILE/ENFILE and the like: the connection stays in the backlog and the selector keeps
                    // reporting it, so stop asking for a while instead of spinning on the error.
                    acceptBackoffNs = Math.min(ACCEPT_BACKOFF_MAX_NS,
                        Math.max(ACCEPT_BACKOFF_MIN_NS, acceptBackoffNs * 2));
                    acceptResumeNs = System.nanoTime() + acceptBackoffNs;
                    acceptKey.interestOps(0);
                    refused++;
                    lastFailure = "accept failed: " + e.getMessage();
                    return;
                }
                acceptBackoffNs = 0;
                acceptKey.interestOps(SelectionKey.OP_ACCEPT);
                if (channel == null) {
                    return;
                }
                try {
                    channel.configureBlocking(false);
                    channel.setOption(StandardSocketOptions.TCP_NODELAY, true);
                    SelectionKey key = channel.register(selector, SelectionKey.OP_READ);
                    PendingConnection c = new PendingConnection(channel, key,
                        nowNs + parameters.handshakeTimeout().toNanos(), parameters.secret());
                    key.attach(c);
                    pending.add(c);
                    c.onWritable(); // our hello
                } catch (IOException | RuntimeException e) {
                    closeQuietly(channel);
                    refused++;
                    lastFailure = describe(e);
                }
            }
        }

        /** Closes the least advanced, oldest handshake that has not sent a complete request; false if none. */
        private boolean evictOne() {
            PendingConnection victim = null;
            for (PendingConnection c : pending) {
                if (c.evictable() && (victim == null || c.progress() < victim.progress())) {
                    victim = c;
                }
            }
            if (victim == null) {
                return false;
            }
            drop(victim, "evicted: " + MAX_PENDING + " handshakes were pending");
            return true;
        }

        private void expire(long nowNs) {
            for (int i = pending.size() - 1; i >= 0; i--) {
                PendingConnection c = pending.get(i);
                if (nowNs - c.deadlineNs >= 0) {
                    drop(c, "handshake not completed in time (stopped at " + c.stage() + ")");
                }
            }
            if (acceptBackoffNs > 0 && nowNs - acceptResumeNs >= 0) {
                acceptKey.interestOps(SelectionKey.OP_ACCEPT);
            } else if (acceptBackoffNs == 0 && pending.size() < MAX_PENDING && acceptKey.interestOps() == 0) {
                acceptKey.interestOps(SelectionKey.OP_ACCEPT);
            }
        }

        private void drop(PendingConnection c, String why) {
            pending.remove(c);
            c.close();
            refused++;
            lastFailure = why;
        }

        private static String describe(Throwable e) {
            return e.getMessage() != null ? e.getMessage() : e.toString();
        }

        /** Stops listening and closes every handshake in progress; a blocked {@link #accept} ends with CLOSED. */
        @Override
        public void close() {
            if (closed) {
                return;
            }
            closed = true;
            selector.wakeup();
            lock.lock();
            try {
                for (PendingConnection c : pending) {
                    c.close();
                }
                pending.clear();
                closeQuietly(server);
                closeQuietly(selector);
            } finally {
                lock.unlock();
            }
        }
    }

    /**
     * Client side of the mutual proof of the shared secret: each side sends a nonce; the client then sends an HMAC
     * over both nonces and its role, and the server answers with its own only if the client's was right. No secret
     * on both sides: nonces only. Secret on one side only, or a wrong MAC: REJECTED.
     */
    private static void authenticate(DataInputStream in, DataOutputStream out, byte[] secret) throws IOException {
        byte[] ownNonce = nonce();
        out.writeInt(MAGIC);
        out.writeBoolean(secret != null);
        out.write(ownNonce);
        out.flush();
        if (in.readInt() != MAGIC) {
            throw new VerbsException(VerbsException.Reason.REJECTED, "peer does not speak the JCCL connection protocol");
        }
        boolean peerHasSecret = in.readBoolean();
        byte[] peerNonce = new byte[NONCE_LENGTH];
        in.readFully(peerNonce);
        if (peerHasSecret != (secret != null)) {
            throw new VerbsException(VerbsException.Reason.REJECTED, secret != null
                ? "peer has no shared secret configured but we require one (JCCL_AUTH_SECRET)"
                : "peer requires a shared secret (JCCL_AUTH_SECRET) and we have none");
        }
        if (secret == null) {
            return;
        }
        out.write(mac(secret, 'C', ownNonce, peerNonce));
        out.flush();
        byte[] peerMac = in.readNBytes(MAC_LENGTH);
        if (peerMac.length < MAC_LENGTH) {
            // A server (of this version) closes without a word when our proof is wrong.
            throw new VerbsException(VerbsException.Reason.REJECTED,
                "the server refused our proof: wrong shared secret (JCCL_AUTH_SECRET)");
        }
        if (!MessageDigest.isEqual(peerMac, mac(secret, 'S', peerNonce, ownNonce))) {
            throw new VerbsException(VerbsException.Reason.REJECTED,
                "peer failed authentication: wrong shared secret (JCCL_AUTH_SECRET)");
        }
    }

    static byte[] nonce() {
        byte[] nonce = new byte[NONCE_LENGTH];
        RANDOM.nextBytes(nonce);
        return nonce;
    }

    static byte[] mac(byte[] secret, char role, byte[] first, byte[] second) {
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(secret, "HmacSHA256"));
            mac.update((byte) role);
            mac.update(first);
            mac.update(second);
            return mac.doFinal();
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 unavailable", e);
        }
    }

    private static Endpoint readEndpoint(DataInputStream in) throws IOException {
        try {
            return Endpoint.decode(readBoundedUtf(in, MAX_ENDPOINT_LENGTH, "endpoint"));
        } catch (IllegalArgumentException e) {
            throw new VerbsException(VerbsException.Reason.CONNECTION, "malformed endpoint from peer", e);
        }
    }

    /** {@link DataInputStream#readUTF()} with the length checked before the bytes are allocated. */
    private static String readBoundedUtf(DataInputStream in, int maxLength, String what) throws IOException {
        int length = in.readUnsignedShort();
        if (length > maxLength) {
            throw new VerbsException(VerbsException.Reason.CONNECTION, "peer sent a " + what + " of " + length
                + " bytes (at most " + maxLength + ")");
        }
        byte[] utf = new byte[2 + length];
        utf[0] = (byte) (length >>> 8);
        utf[1] = (byte) length;
        in.readFully(utf, 2, length);
        return new DataInputStream(new ByteArrayInputStream(utf)).readUTF();
    }

    private static byte[] readPrivateData(DataInputStream in) throws IOException {
        int length = in.readUnsignedShort();
        if (length > ConnectionParameters.MAX_PRIVATE_DATA) {
            throw new VerbsException(VerbsException.Reason.CONNECTION, "private data too long: " + length);
        }
        byte[] data = new byte[length];
        in.readFully(data);
        return data;
    }

    private static void closeQuietly(AutoCloseable closeable) {
        if (closeable != null) {
            try {
                closeable.close();
            } catch (Exception ignored) {
                // nothing left to release
            }
        }
    }

    private static int remainingMs(long deadlineNs, Object target) throws SocketTimeoutException {
        long remaining = (deadlineNs - System.nanoTime()) / 1_000_000;
        if (remaining <= 0) {
            throw new SocketTimeoutException("handshake deadline passed (" + target + ")");
        }
        return (int) Math.min(Integer.MAX_VALUE, remaining);
    }
}
