package io.jccl.verbs;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;

/**
 * Connection setup over a TCP side channel, like librdmacm: a server {@link #listen listens}, a client
 * {@link #connect connects}, and the manager creates the queue pairs and drives both through INIT→RTR→RTS.
 *
 * <p>The handshake is REQ (client endpoint, parameters, private data) → REP (server endpoint) → RTU, so the
 * server's QP is ready to receive before the client may send. When a shared secret is configured, both sides
 * first prove they know it (HMAC-SHA256 over fresh nonces from both sides) before any endpoint is revealed; a
 * mismatch is refused with {@link VerbsException.Reason#REJECTED} on both sides.
 */
public final class ConnectionManager {
    private static final int MAGIC = 0x4A434D31; // "JCM1"
    private static final int REQUEST = 1;
    private static final int REPLY = 2;
    private static final int READY_TO_USE = 3;
    private static final int REJECT = 4;
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
        try {
            ServerSocket server = new ServerSocket();
            server.setReuseAddress(true);
            server.bind(bindAddress, 64);
            return new ConnectionListener(domain, server);
        } catch (IOException e) {
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
            authenticate(in, out, parameters.secret(), true);
            queuePair = domain.createQueuePair(init);
            queuePair.modify(QueuePairAttributes.toInit().accessFlags(parameters.accessFlags()));
            out.writeInt(REQUEST);
            writeEndpoint(out, queuePair.localEndpoint());
            out.writeInt(parameters.responderResources());
            out.writeInt(parameters.initiatorDepth());
            writeBytes(out, parameters.privateData());
            out.flush();
            int type = in.readInt();
            if (type == REJECT) {
                throw new VerbsException(VerbsException.Reason.REJECTED, "connection to " + server
                    + " rejected: " + in.readUTF());
            }
            expect(type, REPLY);
            Endpoint remote = readEndpoint(in);
            int peerResponder = in.readInt();
            byte[] peerPrivate = readBytes(in);
            queuePair.modify(QueuePairAttributes.toReadyToReceive(remote)
                .maxDestRdAtomic(parameters.responderResources()).minRnrTimer(parameters.minRnrTimer()));
            queuePair.modify(QueuePairAttributes.toReadyToSend(queuePair.initialPsn())
                .maxRdAtomic(Math.min(parameters.initiatorDepth(), peerResponder)).retryCount(parameters.retryCount())
                .rnrRetry(parameters.rnrRetryCount()).timeout(parameters.ackTimeout()));
            out.writeInt(READY_TO_USE);
            out.flush();
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

    /** A listening side channel; {@link #accept} takes one connection at a time. */
    public static final class ConnectionListener implements AutoCloseable {
        private final ProtectionDomain domain;
        private final ServerSocket server;

        private ConnectionListener(ProtectionDomain domain, ServerSocket server) {
            this.domain = domain;
            this.server = server;
        }

        /** The address clients connect to. */
        public InetSocketAddress localAddress() {
            return (InetSocketAddress) server.getLocalSocketAddress();
        }

        /**
         * Waits for one client, creates a QP with {@code init}, drives it to RTS and returns once the client
         * confirmed (RTU). A client that fails authentication is refused and the wait goes on until the deadline.
         *
         * @throws VerbsException TIMEOUT when no client completed the handshake within the parameters' deadline
         */
        public Connection accept(QueuePairInitAttributes init, ConnectionParameters parameters) {
            long deadlineNs = System.nanoTime() + parameters.handshakeTimeout().toNanos();
            VerbsException last = null;
            while (System.nanoTime() - deadlineNs < 0) {
                try {
                    server.setSoTimeout(remainingMs(deadlineNs, localAddress()));
                    try (Socket socket = server.accept()) {
                        return handshake(socket, init, parameters, deadlineNs);
                    }
                } catch (SocketTimeoutException e) {
                    break;
                } catch (IOException e) {
                    last = new VerbsException(VerbsException.Reason.CONNECTION, "accept failed: " + e.getMessage(), e);
                } catch (VerbsException e) {
                    last = e;
                    if (e.reason() != VerbsException.Reason.REJECTED && e.reason() != VerbsException.Reason.CONNECTION) {
                        throw e;
                    }
                }
            }
            throw new VerbsException(VerbsException.Reason.TIMEOUT, "no client completed a connection on "
                + localAddress() + " within " + parameters.handshakeTimeout()
                + (last != null ? " (last failure: " + last.getMessage() + ")" : ""), last);
        }

        private Connection handshake(Socket socket, QueuePairInitAttributes init, ConnectionParameters parameters,
                                     long deadlineNs) throws IOException {
            socket.setTcpNoDelay(true);
            socket.setSoTimeout(remainingMs(deadlineNs, localAddress()));
            DataInputStream in = new DataInputStream(socket.getInputStream());
            DataOutputStream out = new DataOutputStream(socket.getOutputStream());
            authenticate(in, out, parameters.secret(), false);
            expect(in.readInt(), REQUEST);
            Endpoint remote = readEndpoint(in);
            int peerResponder = in.readInt();
            int peerInitiator = in.readInt();
            byte[] peerPrivate = readBytes(in);
            QueuePair queuePair = domain.createQueuePair(init);
            try {
                queuePair.modify(QueuePairAttributes.toInit().accessFlags(parameters.accessFlags()));
                queuePair.modify(QueuePairAttributes.toReadyToReceive(remote)
                    .maxDestRdAtomic(Math.max(parameters.responderResources(), peerInitiator))
                    .minRnrTimer(parameters.minRnrTimer()));
                queuePair.modify(QueuePairAttributes.toReadyToSend(queuePair.initialPsn())
                    .maxRdAtomic(Math.min(parameters.initiatorDepth(), peerResponder))
                    .retryCount(parameters.retryCount()).rnrRetry(parameters.rnrRetryCount())
                    .timeout(parameters.ackTimeout()));
            } catch (VerbsException e) {
                queuePair.close();
                out.writeInt(REJECT);
                out.writeUTF(e.getMessage());
                out.flush();
                throw e;
            }
            out.writeInt(REPLY);
            writeEndpoint(out, queuePair.localEndpoint());
            out.writeInt(parameters.responderResources());
            writeBytes(out, parameters.privateData());
            out.flush();
            try {
                expect(in.readInt(), READY_TO_USE);
            } catch (IOException | RuntimeException e) {
                queuePair.close();
                throw e;
            }
            return new Connection(queuePair, remote, peerPrivate);
        }

        /** Stops listening. */
        @Override
        public void close() {
            try {
                server.close();
            } catch (IOException ignored) {
                // nothing left to release
            }
        }
    }

    /**
     * Mutual proof of the shared secret: each side sends a nonce, then an HMAC over both nonces and its role. No
     * secret on both sides: nonces only. Secret on one side only, or a wrong MAC: REJECTED.
     */
    private static void authenticate(DataInputStream in, DataOutputStream out, byte[] secret, boolean client)
        throws IOException {
        byte[] ownNonce = new byte[16];
        RANDOM.nextBytes(ownNonce);
        out.writeInt(MAGIC);
        out.writeBoolean(secret != null);
        out.write(ownNonce);
        out.flush();
        if (in.readInt() != MAGIC) {
            throw new VerbsException(VerbsException.Reason.REJECTED, "peer does not speak the JCCL connection protocol");
        }
        boolean peerHasSecret = in.readBoolean();
        byte[] peerNonce = in.readNBytes(16);
        if (peerHasSecret != (secret != null)) {
            throw new VerbsException(VerbsException.Reason.REJECTED, secret != null
                ? "peer has no shared secret configured but we require one (JCCL_AUTH_SECRET)"
                : "peer requires a shared secret (JCCL_AUTH_SECRET) and we have none");
        }
        if (secret == null) {
            return;
        }
        byte[] ownMac = mac(secret, client ? 'C' : 'S', ownNonce, peerNonce);
        out.write(ownMac);
        out.flush();
        byte[] peerMac = in.readNBytes(ownMac.length);
        if (!MessageDigest.isEqual(peerMac, mac(secret, client ? 'S' : 'C', peerNonce, ownNonce))) {
            throw new VerbsException(VerbsException.Reason.REJECTED,
                "peer failed authentication: wrong shared secret (JCCL_AUTH_SECRET)");
        }
    }

    private static byte[] mac(byte[] secret, char role, byte[] first, byte[] second) {
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

    private static void expect(int type, int expected) {
        if (type != expected) {
            throw new VerbsException(VerbsException.Reason.CONNECTION,
                "unexpected handshake message " + type + " (expected " + expected + ")");
        }
    }

    private static void writeEndpoint(DataOutputStream out, Endpoint endpoint) throws IOException {
        out.writeUTF(endpoint.encode());
    }

    private static Endpoint readEndpoint(DataInputStream in) throws IOException {
        try {
            return Endpoint.decode(in.readUTF());
        } catch (IllegalArgumentException e) {
            throw new VerbsException(VerbsException.Reason.CONNECTION, "malformed endpoint from peer", e);
        }
    }

    private static void writeBytes(DataOutputStream out, byte[] bytes) throws IOException {
        out.writeShort(bytes.length);
        out.write(bytes);
    }

    private static byte[] readBytes(DataInputStream in) throws IOException {
        int length = in.readUnsignedShort();
        if (length > ConnectionParameters.MAX_PRIVATE_DATA) {
            throw new VerbsException(VerbsException.Reason.CONNECTION, "private data too long: " + length);
        }
        return in.readNBytes(length);
    }

    private static int remainingMs(long deadlineNs, Object target) throws SocketTimeoutException {
        long remaining = (deadlineNs - System.nanoTime()) / 1_000_000;
        if (remaining <= 0) {
            throw new SocketTimeoutException("handshake deadline passed (" + target + ")");
        }
        return (int) Math.min(Integer.MAX_VALUE, remaining);
    }
}
