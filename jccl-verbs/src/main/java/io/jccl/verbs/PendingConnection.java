package io.jccl.verbs;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.SocketChannel;
import java.security.MessageDigest;

/**
 * The listener's side of one handshake on a non-blocking channel: what has arrived, what is owed to the client,
 * and the deadline. It never blocks and never holds more than the step it is reading, whose length is checked
 * before anything is allocated for it (an endpoint of at most {@link ConnectionManager#MAX_ENDPOINT_LENGTH} bytes,
 * private data of at most {@link ConnectionParameters#MAX_PRIVATE_DATA}).
 *
 * <p>With a secret, the client proves it first and the listener answers with its own proof only once the client's
 * is right: a client that does not know the secret gets no MAC it could test guesses against offline.
 */
final class PendingConnection {
    /** Where the handshake stands, in wire order. */
    enum Stage {
        /** Reading the client's hello (magic, secret flag, nonce). */
        HELLO(ConnectionManager.HELLO_LENGTH),
        /** Reading the client's proof of the secret. */
        PROOF(ConnectionManager.MAC_LENGTH),
        /** Reading the request's type and endpoint length. */
        REQUEST_HEAD(4 + 2),
        /** Reading the client's endpoint (length checked at REQUEST_HEAD). */
        REQUEST_ENDPOINT(0),
        /** Reading responder resources, initiator depth and the private-data length. */
        REQUEST_TAIL(4 + 4 + 2),
        /** Reading the private data (length checked at REQUEST_TAIL). */
        PRIVATE_DATA(0),
        /** A complete request, waiting for the listener to give it a queue pair. */
        READY(0),
        /** The reply went out with the queue pair's endpoint; reading the client's RTU. */
        AWAITING_RTU(4),
        /** Handshake complete. */
        DONE(0);

        private final int fixedLength;

        Stage(int fixedLength) {
            this.fixedLength = fixedLength;
        }
    }

    final SocketChannel channel;
    final SelectionKey key;
    final long deadlineNs;
    /** The secret this connection is held to (that of the accept call that took it in), or null. */
    final byte[] secret;
    private final byte[] ownNonce;
    private Stage stage = Stage.HELLO;
    private ByteBuffer in = ByteBuffer.allocate(Stage.HELLO.fixedLength);
    private ByteBuffer out;
    private boolean spoke;
    private byte[] peerNonce;
    private Endpoint remote;
    private int peerResponder;
    private int peerInitiator;
    private byte[] privateData;
    private QueuePair queuePair;

    PendingConnection(SocketChannel channel, SelectionKey key, long deadlineNs, byte[] secret) {
        this.channel = channel;
        this.key = key;
        this.deadlineNs = deadlineNs;
        this.secret = secret;
        this.ownNonce = ConnectionManager.nonce();
        ByteBuffer hello = ByteBuffer.allocate(ConnectionManager.HELLO_LENGTH);
        hello.putInt(ConnectionManager.MAGIC).put((byte) (secret != null ? 1 : 0)).put(ownNonce).flip();
        out = hello;
    }

    Stage stage() {
        return stage;
    }

    /**
     * How far the client got: 0 for one that never sent a byte, then one more per completed step. The listener
     * evicts the least advanced (oldest first) when it is full.
     */
    int progress() {
        return spoke ? stage.ordinal() + 1 : 0;
    }

    /** Whether the listener may drop this connection to make room: only before the request is complete. */
    boolean evictable() {
        return stage.ordinal() < Stage.READY.ordinal();
    }

    /** Whether the client proved the secret (or none is required): from then on it is told why it is refused. */
    boolean authenticated() {
        return stage.ordinal() >= Stage.REQUEST_HEAD.ordinal();
    }

    Endpoint remote() {
        return remote;
    }

    int peerResponder() {
        return peerResponder;
    }

    int peerInitiator() {
        return peerInitiator;
    }

    byte[] privateData() {
        return privateData;
    }

    QueuePair queuePair() {
        return queuePair;
    }

    /** Reads what has arrived and advances through as many steps as it completes; never blocks. */
    void onReadable() throws IOException {
        while (in != null) {
            int n = channel.read(in);
            if (n < 0) {
                throw new EOFException("peer closed the connection during " + stage);
            }
            if (n > 0) {
                spoke = true;
            }
            if (in.hasRemaining()) {
                return;
            }
            in.flip();
            advance(in);
        }
    }

    private void advance(ByteBuffer frame) throws IOException {
        switch (stage) {
            case HELLO -> {
                if (frame.getInt() != ConnectionManager.MAGIC) {
                    throw new VerbsException(VerbsException.Reason.REJECTED,
                        "peer does not speak the JCCL connection protocol");
                }
                boolean peerHasSecret = frame.get() != 0;
                peerNonce = new byte[ConnectionManager.NONCE_LENGTH];
                frame.get(peerNonce);
                if (peerHasSecret != (secret != null)) {
                    throw new VerbsException(VerbsException.Reason.REJECTED, secret != null
                        ? "client has no shared secret configured but we require one (JCCL_AUTH_SECRET)"
                        : "client requires a shared secret (JCCL_AUTH_SECRET) and we have none");
                }
                expectNext(secret != null ? Stage.PROOF : Stage.REQUEST_HEAD, 0);
            }
            case PROOF -> {
                byte[] proof = new byte[ConnectionManager.MAC_LENGTH];
                frame.get(proof);
                if (!MessageDigest.isEqual(proof, ConnectionManager.mac(secret, 'C', peerNonce, ownNonce))) {
                    // Close without a word: the client learns nothing it could test guesses against.
                    throw new VerbsException(VerbsException.Reason.REJECTED,
                        "client failed authentication: wrong shared secret (JCCL_AUTH_SECRET)");
                }
                send(ByteBuffer.wrap(ConnectionManager.mac(secret, 'S', ownNonce, peerNonce)));
                expectNext(Stage.REQUEST_HEAD, 0);
            }
            case REQUEST_HEAD -> {
                int type = frame.getInt();
                if (type != ConnectionManager.REQUEST) {
                    throw malformed("unexpected handshake message " + type + " (expected "
                        + ConnectionManager.REQUEST + ")");
                }
                int length = Short.toUnsignedInt(frame.getShort());
                if (length == 0 || length > ConnectionManager.MAX_ENDPOINT_LENGTH) {
                    throw malformed("endpoint of " + length + " bytes (at most "
                        + ConnectionManager.MAX_ENDPOINT_LENGTH + ")");
                }
                expectNext(Stage.REQUEST_ENDPOINT, length);
            }
            case REQUEST_ENDPOINT -> {
                remote = decodeEndpoint(frame);
                expectNext(Stage.REQUEST_TAIL, 0);
            }
            case REQUEST_TAIL -> {
                peerResponder = frame.getInt();
                peerInitiator = frame.getInt();
                int length = Short.toUnsignedInt(frame.getShort());
                if (peerResponder < 0 || peerResponder > ConnectionManager.MAX_RD_ATOMIC || peerInitiator < 0
                    || peerInitiator > ConnectionManager.MAX_RD_ATOMIC) {
                    throw malformed("responder resources " + peerResponder + " / initiator depth " + peerInitiator
                        + " outside 0.." + ConnectionManager.MAX_RD_ATOMIC);
                }
                if (length > ConnectionParameters.MAX_PRIVATE_DATA) {
                    throw malformed("private data of " + length + " bytes (at most "
                        + ConnectionParameters.MAX_PRIVATE_DATA + ")");
                }
                if (length == 0) {
                    privateData = new byte[0];
                    ready();
                } else {
                    expectNext(Stage.PRIVATE_DATA, length);
                }
            }
            case PRIVATE_DATA -> {
                privateData = new byte[frame.remaining()];
                frame.get(privateData);
                ready();
            }
            case AWAITING_RTU -> {
                int type = frame.getInt();
                if (type != ConnectionManager.READY_TO_USE) {
                    throw malformed("unexpected handshake message " + type + " (expected "
                        + ConnectionManager.READY_TO_USE + ")");
                }
                stage = Stage.DONE;
                in = null;
                interest();
            }
            default -> throw new IllegalStateException("nothing to read in " + stage);
        }
    }

    private static Endpoint decodeEndpoint(ByteBuffer frame) throws IOException {
        byte[] utf = new byte[2 + frame.remaining()];
        utf[0] = (byte) (frame.remaining() >>> 8);
        utf[1] = (byte) frame.remaining();
        frame.get(utf, 2, frame.remaining());
        try {
            return Endpoint.decode(new DataInputStream(new ByteArrayInputStream(utf)).readUTF());
        } catch (IllegalArgumentException | java.io.UTFDataFormatException e) {
            throw new VerbsException(VerbsException.Reason.CONNECTION, "malformed endpoint from client", e);
        }
    }

    private void expectNext(Stage next, int variableLength) {
        stage = next;
        in = ByteBuffer.allocate(next.fixedLength + variableLength);
    }

    private void ready() {
        stage = Stage.READY;
        in = null;
        interest();
    }

    /** Sends the reply (the queue pair is in RTS; this connection owns it from now) and waits for the RTU. */
    void reply(QueuePair pair, int responderResources, byte[] ownPrivateData) throws IOException {
        queuePair = pair;
        ByteArrayOutputStream bytes = new ByteArrayOutputStream(512);
        DataOutputStream reply = new DataOutputStream(bytes);
        reply.writeInt(ConnectionManager.REPLY);
        reply.writeUTF(pair.localEndpoint().encode());
        reply.writeInt(responderResources);
        reply.writeShort(ownPrivateData.length);
        reply.write(ownPrivateData);
        stage = Stage.AWAITING_RTU;
        in = ByteBuffer.allocate(Stage.AWAITING_RTU.fixedLength);
        send(ByteBuffer.wrap(bytes.toByteArray()));
    }

    /**
     * Sends {@link ConnectionManager#ESTABLISHED} after the RTU: four bytes on a socket that owes nothing else, so
     * the write completes at once or the client is gone (then an IOException, and the caller drops it).
     */
    void confirm() throws IOException {
        ByteBuffer word = ByteBuffer.allocate(4).putInt(0, ConnectionManager.ESTABLISHED);
        channel.write(word);
        if (word.hasRemaining()) {
            throw new IOException("the client's socket took no confirmation (its receive window is full)");
        }
    }

    /** Tells an authenticated client why it was refused (best effort: the connection is closed next). */
    void reject(String reason) {
        try {
            ByteArrayOutputStream bytes = new ByteArrayOutputStream(256);
            DataOutputStream frame = new DataOutputStream(bytes);
            frame.writeInt(ConnectionManager.REJECT);
            frame.writeUTF(reason.length() > 200 ? reason.substring(0, 200) : reason);
            send(ByteBuffer.wrap(bytes.toByteArray()));
        } catch (IOException | RuntimeException ignored) {
            // the client is gone: nothing to tell
        }
    }

    /** Queues bytes for the client and writes what the socket takes now; the rest goes when it is writable. */
    void send(ByteBuffer bytes) throws IOException {
        if (out != null && out.hasRemaining()) {
            ByteBuffer both = ByteBuffer.allocate(out.remaining() + bytes.remaining());
            both.put(out).put(bytes).flip();
            out = both;
        } else {
            out = bytes;
        }
        onWritable();
    }

    /** Writes what is owed; never blocks. */
    void onWritable() throws IOException {
        if (out != null) {
            channel.write(out);
            if (!out.hasRemaining()) {
                out = null;
            }
        }
        interest();
    }

    private void interest() {
        if (key.isValid()) {
            key.interestOps((in != null && stage != Stage.READY ? SelectionKey.OP_READ : 0)
                | (out != null ? SelectionKey.OP_WRITE : 0));
        }
    }

    /** Closes the socket and, if the handshake had one, the queue pair; idempotent. */
    void close() {
        key.cancel();
        try {
            channel.close();
        } catch (IOException ignored) {
            // nothing left to release
        }
        if (queuePair != null) {
            try {
                queuePair.close();
            } catch (RuntimeException ignored) {
                // already closed
            }
            queuePair = null;
        }
    }

    /** Hands the queue pair over: {@link #close()} no longer closes it. */
    QueuePair takeQueuePair() {
        QueuePair pair = queuePair;
        queuePair = null;
        return pair;
    }

    private static VerbsException malformed(String what) {
        return new VerbsException(VerbsException.Reason.CONNECTION, "malformed connection request: " + what);
    }
}
