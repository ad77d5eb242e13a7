package io.jccl.collectives.store;

import io.jccl.common.Config;
import io.jccl.common.SecureIds;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.security.MessageDigest;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

/**
 * A store client over TCP (torch.distributed's TCPStore). With {@code startServer} the constructor first starts a
 * {@link TcpStoreServer} on {@code port} in this process (what rank 0 does with MASTER_PORT), listening on the
 * address {@code host} names when it is this host's ({@code 127.0.0.1}: loopback only; see
 * {@link TcpStoreServer#bindAddressFor}). The client connects and reconnects until the deadline, retrying every
 * 10–200 ms (no 1 s back-off: a rank that starts before the server costs milliseconds, not a second). Requests are
 * idempotent except {@link #add}, which is not retried once sent. Thread-safe (one request at a time per client).
 *
 * <p>With a secret (by default {@code JCCL_AUTH_SECRET}) the client and the server prove to each other that they
 * know it before any request (see {@link TcpStoreServer}); a store that requires a secret this client lacks, or
 * holds another one, is a {@link StoreException} at once, not a wait. The server's limits (value and key size,
 * keys per wait) come with its handshake and are checked here before a request is sent.
 */
public final class TcpStore implements Store {
    private static final long HANDSHAKE_TIMEOUT_MS = 10_000;
    private final String host;
    private final int port;
    private final TcpStoreServer server;
    private final long connectTimeoutNs;
    private final String secret;
    private byte[] key;
    private volatile Socket socket;
    private DataInputStream in;
    private DataOutputStream out;
    private volatile boolean closed;
    /**
     * Whether a connection to the server was ever made: a refusal after that means the server's process is gone
     * (a kill -9 of the rank that hosted it), and retrying it until the call's deadline only delays the caller.
     */
    private boolean everConnected;
    private final ByteArrayOutputStream frame = new ByteArrayOutputStream(256);
    private final DataOutputStream frameOut = new DataOutputStream(frame);
    // The server's limits, from its handshake.
    private int maxValueBytes = TcpStoreServer.VALUE_HARD_LIMIT;
    private int maxKeyBytes = 65535;
    private int maxWaitKeys = Integer.MAX_VALUE;
    private int maxRequestBytes = Integer.MAX_VALUE;
    private long idleTimeoutNs = Long.MAX_VALUE;
    private long lastUseNs;

    /**
     * Connects to {@code host:port}, starting a server there first when {@code startServer}; the secret is
     * {@code JCCL_AUTH_SECRET} (none when unset), the server's address {@code JCCL_STORE_BIND} or the one
     * {@code host} names.
     *
     * @param connectTimeoutNs how long to keep trying to reach the server (each later request also reconnects
     *     within its own deadline)
     */
    public TcpStore(String host, int port, boolean startServer, long connectTimeoutNs) {
        this(host, port, startServer, connectTimeoutNs, Config.value("JCCL_AUTH_SECRET"), null);
    }

    /** As {@link #TcpStore(String, int, boolean, long)} with an explicit secret (null or blank: none). */
    public TcpStore(String host, int port, boolean startServer, long connectTimeoutNs, String secret) {
        this(host, port, startServer, connectTimeoutNs, secret, null);
    }

    /**
     * As {@link #TcpStore(String, int, boolean, long, String)}, with where the started server listens:
     * {@code bind} = an address, {@code *} or {@code 0.0.0.0} for all interfaces, null for {@code JCCL_STORE_BIND}
     * or else the address {@code host} names ({@link TcpStoreServer#bindAddressFor}). The server's limits come from
     * {@link TcpStoreServer.Settings#fromConfig()}.
     */
    public TcpStore(String host, int port, boolean startServer, long connectTimeoutNs, String secret, String bind) {
        this(host, port, startServer, connectTimeoutNs, secret, bind, false);
    }

    /**
     * Connects to a server known to have been running (a standby store whose address its host published): a refused
     * connection means that its process is gone, and fails at once instead of being retried until the deadline
     * (which is for a server that is still starting). A server that accepts but does not answer is waited for until
     * {@code connectTimeoutNs}.
     */
    public static TcpStore toRunningServer(String host, int port, long connectTimeoutNs, String secret) {
        return new TcpStore(host, port, false, connectTimeoutNs, secret, null, true);
    }

    private TcpStore(String host, int port, boolean startServer, long connectTimeoutNs, String secret, String bind,
                     boolean serverWasRunning) {
        this.everConnected = serverWasRunning;
        this.secret = secret == null || secret.isBlank() ? null : secret;
        this.server = startServer ? TcpStoreServer.forStore(host, port,
            bind != null ? bind : Config.value("JCCL_STORE_BIND"),
            TcpStoreServer.Settings.fromConfig().withSecret(this.secret)) : null;
        this.host = host;
        this.port = server != null ? server.port() : port;
        this.connectTimeoutNs = connectTimeoutNs;
        try {
            synchronized (this) {
                connect(System.nanoTime() + connectTimeoutNs);
            }
        } catch (RuntimeException e) {
            if (server != null) {
                server.close();
            }
            throw e;
        }
    }

    /** The server's port (the bound one when this object started the server on port 0). */
    public int port() {
        return port;
    }

    /** The server this object started, or null. */
    public TcpStoreServer server() {
        return server;
    }

    /** The host this client connects to, as it was given. */
    public String host() {
        return host;
    }

    /**
     * The local address of this client's connection (the interface that reaches the store's host), or null when it
     * is not connected: where a peer of the store's host can reach this process too (standby stores use it).
     */
    public java.net.InetAddress localAddress() {
        Socket s = socket;
        return s == null ? null : s.getLocalAddress();
    }

    /**
     * Whether something accepts TCP connections at {@code host:port} within {@code timeoutNs}: false at once when the
     * connection is refused (a store whose process died), false after the timeout when nothing answers. A cheap
     * look before a request whose reconnect loop would otherwise retry a dead server until its deadline.
     */
    public static boolean reachable(String host, int port, long timeoutNs) {
        try (Socket s = new Socket()) {
            SelfConnection.connect(s, new InetSocketAddress(host, port), (int) Math.clamp(
                TimeUnit.NANOSECONDS.toMillis(timeoutNs), 1, Integer.MAX_VALUE));
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    private String at() {
        return "the store at " + host + ":" + port;
    }

    private void connect(long deadlineNs) {
        long start = System.nanoTime();
        // Ranks start together and rank 0's server listens some milliseconds after its JVM starts: the first
        // retries come soon (1, 2, 4 ms ...), later ones back off to 200 ms.
        long pauseNs = TimeUnit.MILLISECONDS.toNanos(1);
        IOException last = null;
        IOException busy = null; // kept: a later attempt's timeout must not hide that the server said why it refused
        while (!closed) {
            Socket s = new Socket();
            try {
                long left = Math.max(1, TimeUnit.NANOSECONDS.toMillis(deadlineNs - System.nanoTime()));
                SelfConnection.connect(s, new InetSocketAddress(host, port), (int) Math.min(left, 5000));
                s.setTcpNoDelay(true);
                s.setSoTimeout((int) Math.clamp(left, 100, HANDSHAKE_TIMEOUT_MS));
                DataOutputStream o = new DataOutputStream(new BufferedOutputStream(s.getOutputStream()));
                DataInputStream i = new DataInputStream(new BufferedInputStream(s.getInputStream()));
                handshake(i, o);
                socket = s;
                in = i;
                out = o;
                lastUseNs = System.nanoTime();
                everConnected = true;
                return;
            } catch (java.net.ConnectException e) {
                closeQuietly(s);
                if (everConnected && String.valueOf(e.getMessage()).toLowerCase(java.util.Locale.ROOT)
                    .contains("refused")) {
                    // the server listened before and refuses now: its process died; fail at once (recovery paths
                    // then move on, to a standby store or without the store) instead of retrying to the deadline
                    throw new StoreGoneException(describe() + ": connection refused by a server that was there before"
                        + " (its process is gone): " + e.getMessage(), e);
                }
                last = e;
            } catch (ServerBusy e) {
                last = e;
                busy = e;
                closeQuietly(s);
            } catch (IOException e) {
                last = e;
                closeQuietly(s);
            } catch (RuntimeException e) {
                closeQuietly(s);
                throw e;
            }
            if (System.nanoTime() - deadlineNs >= 0) {
                String said = busy == null || busy == last ? "" : "; before that, " + busy.getMessage();
                throw new StoreTimeoutException("cannot reach TcpStore server " + host + ":" + port + " within "
                    + StoreTimeoutException.millis(System.nanoTime() - start) + " (last error: " + last + said
                    + "); is rank 0 (or TcpStoreServer) running and MASTER_ADDR/MASTER_PORT (or JCCL_STORE_ADDR) right?",
                    last);
            }
            LockSupport.parkNanos(pauseNs);
            pauseNs = Math.min(pauseNs * 2, TimeUnit.MILLISECONDS.toNanos(200));
        }
        throw new StoreException(describe() + " is closed");
    }

    /** The server refused the connection because it is at its connection cap; retried until the deadline. */
    private static final class ServerBusy extends IOException {
        ServerBusy(String message) {
            super(message);
        }
    }

    /** Protocol version 2's handshake (see {@link TcpStoreServer}); StoreException for what retrying cannot fix. */
    private void handshake(DataInputStream i, DataOutputStream o) throws IOException {
        byte[] clientNonce = SecureIds.bytes(TcpStoreServer.NONCE_BYTES);
        o.writeInt(TcpStoreServer.MAGIC);
        o.write(clientNonce);
        o.flush();
        int status = i.read();
        if (status < 0) {
            throw new StoreException("the server at " + host + ":" + port + " closed the connection without "
                + "answering the TcpStore handshake (protocol " + TcpStoreServer.VERSION + "): it is the "
                + "TcpStoreServer of an older JCCL (protocol 1), not a TcpStore, or a store that is shutting down; run "
                + "the same JCCL version on every rank and for a standalone TcpStoreServer");
        }
        if (status != TcpStoreServer.OK) {
            String message = i.readUTF();
            if (status == TcpStoreServer.BUSY) {
                throw new ServerBusy(at() + " is busy: " + message); // retried until the deadline
            }
            throw new StoreException(describe() + ": " + message);
        }
        int magic = i.readInt();
        if (magic != TcpStoreServer.MAGIC) {
            throw new StoreException("the server at " + host + ":" + port + " answered with protocol magic 0x"
                + Integer.toHexString(magic) + ", not TcpStore protocol " + TcpStoreServer.VERSION + "; run the same "
                + "JCCL version on every rank and for a standalone TcpStoreServer");
        }
        boolean authenticates = i.readByte() != 0;
        byte[] serverNonce = new byte[TcpStoreServer.NONCE_BYTES];
        i.readFully(serverNonce);
        int valueLimit = i.readInt();
        int keyLimit = i.readInt();
        int waitLimit = i.readInt();
        int requestLimit = i.readInt();
        long idleMs = i.readLong();
        if (authenticates && secret == null) {
            throw new StoreException(at() + " requires JCCL_AUTH_SECRET: set the job's secret (the same on every "
                + "rank) in this process");
        }
        if (!authenticates && secret != null) {
            throw new StoreException(at() + " does not authenticate, but JCCL_AUTH_SECRET is set in this process: "
                + "start the store with the same secret (rank 0 does when JCCL_AUTH_SECRET is set there; a "
                + "standalone TcpStoreServer reads JCCL_AUTH_SECRET too)");
        }
        if (authenticates) {
            byte[] serverProof = new byte[TcpStoreServer.MAC_BYTES];
            i.readFully(serverProof);
            if (key == null) {
                key = TcpStoreServer.deriveKey(secret);
            }
            if (!MessageDigest.isEqual(serverProof,
                TcpStoreServer.proof(key, TcpStoreServer.SERVER_LABEL, clientNonce, serverNonce))) {
                throw new StoreException(at() + " rejected the secret: its JCCL_AUTH_SECRET differs from this "
                    + "process's (the store's proof of the secret did not match)");
            }
            o.write(TcpStoreServer.proof(key, TcpStoreServer.CLIENT_LABEL, serverNonce, clientNonce));
            o.flush();
            int verdict = i.read();
            if (verdict < 0) {
                throw new EOFException(at() + " closed the connection during authentication");
            }
            if (verdict != TcpStoreServer.OK) {
                throw new StoreException(at() + " rejected the secret (" + i.readUTF() + ")");
            }
        }
        maxValueBytes = Math.clamp(valueLimit, 0, TcpStoreServer.VALUE_HARD_LIMIT);
        maxKeyBytes = Math.clamp(keyLimit, 0, 65535);
        maxWaitKeys = Math.max(0, waitLimit);
        maxRequestBytes = Math.max(0, requestLimit);
        idleTimeoutNs = idleMs <= 0 ? Long.MAX_VALUE : TimeUnit.MILLISECONDS.toNanos(idleMs);
    }

    private void dropConnection() {
        closeQuietly(socket);
        socket = null;
    }

    private static void closeQuietly(Socket s) {
        try {
            if (s != null) {
                s.close();
            }
        } catch (IOException ignored) {
            // dropping
        }
    }

    /**
     * One request: what to send and how to read its reply. A class with a switch rather than a lambda per operation:
     * every lambda costs class spinning on rank 0's start-up path.
     */
    private final class Request {
        final byte op;
        final String key;
        final List<String> keys;
        final byte[] expected;
        final byte[] value;
        final long number;

        Request(byte op, String key, List<String> keys, byte[] expected, byte[] value, long number) {
            this.op = op;
            this.key = key;
            this.keys = keys;
            this.expected = expected;
            this.value = value;
            this.number = number;
        }

        /** Encodes the request, checking the server's limits first: nothing is sent when one is exceeded. */
        void write(DataOutputStream o) throws IOException {
            if (op == TcpStoreServer.WAIT && keys.size() > maxWaitKeys) {
                throw new StoreException(describe() + ": wait for " + keys.size() + " keys exceeds the store's limit "
                    + "of " + maxWaitKeys + " keys (JCCL_STORE_MAX_WAIT_KEYS)");
            }
            o.writeByte(op);
            switch (op) {
                case TcpStoreServer.SET -> {
                    writeKey(o, key);
                    writeValue(o, key, value);
                }
                case TcpStoreServer.GET -> {
                    writeKey(o, key);
                    o.writeLong(number);
                }
                case TcpStoreServer.ADD -> {
                    writeKey(o, key);
                    o.writeLong(number);
                }
                case TcpStoreServer.WAIT -> {
                    o.writeInt(keys.size());
                    for (String k : keys) {
                        writeKey(o, k);
                    }
                    o.writeLong(number);
                }
                case TcpStoreServer.CAS -> {
                    writeKey(o, key);
                    o.writeBoolean(expected != null);
                    if (expected != null) {
                        writeValue(o, key, expected);
                    }
                    writeValue(o, key, value);
                }
                default -> writeKey(o, key); // DELETE, CHECK
            }
        }

        /** Reads the reply: null, the value, the counter or a boolean. */
        Object read(DataInputStream i) throws IOException {
            status(i);
            return switch (op) {
                case TcpStoreServer.SET, TcpStoreServer.WAIT -> null;
                case TcpStoreServer.GET -> readValue(i);
                case TcpStoreServer.ADD -> i.readLong();
                default -> i.readBoolean(); // CAS, DELETE, CHECK
            };
        }
    }

    private synchronized Object call(String what, long timeoutNs, boolean retry, Request request) {
        long start = System.nanoTime();
        long t = Math.clamp(timeoutNs, 0, Long.MAX_VALUE / 4); // no overflow for "forever"
        // (Re)connecting gets the request's own deadline; the reply may take up to 5 s more than a server-side wait.
        long connectDeadline = start + Math.max(t, TimeUnit.MILLISECONDS.toNanos(100));
        long deadline = start + t + TimeUnit.SECONDS.toNanos(5);
        while (true) {
            if (closed) {
                throw new StoreException(describe() + " is closed");
            }
            if (socket != null && System.nanoTime() - lastUseNs > idleTimeoutNs / 2) {
                dropConnection(); // the server closes idle connections: reconnect before it might have
            }
            if (socket == null) {
                connect(connectDeadline);
            }
            frame.reset();
            try {
                request.write(frameOut); // checks the server's limits: nothing is sent when one is exceeded
            } catch (IOException e) {
                throw new StoreException(describe() + ": cannot encode " + what + " (" + e + ")", e);
            }
            if (frame.size() > maxRequestBytes) {
                throw new StoreException(describe() + ": " + what + " is a request of " + frame.size() + " bytes, "
                    + "over the store's limit of " + maxRequestBytes + " bytes (JCCL_STORE_MAX_VALUE_BYTES, "
                    + "JCCL_STORE_MAX_KEY_BYTES)");
            }
            try {
                long left = Math.max(1, TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime()));
                socket.setSoTimeout((int) Math.min(left, Integer.MAX_VALUE));
                out.writeInt(frame.size());
                frame.writeTo(out);
                out.flush();
                Object result = request.read(in);
                lastUseNs = System.nanoTime();
                return result;
            } catch (SocketTimeoutException e) {
                dropConnection();
                throw new StoreTimeoutException(describe() + ": no reply to " + what + " before the deadline", e);
            } catch (IOException e) {
                dropConnection();
                if (!retry || System.nanoTime() - deadline >= 0) {
                    throw new StoreException(describe() + ": connection lost during " + what + " (" + e + ")", e);
                }
            } catch (StoreTimeoutException e) {
                lastUseNs = System.nanoTime();
                throw e;
            } catch (StoreException e) {
                dropConnection(); // the server may close after an error; a new connection costs one round trip
                throw e;
            }
        }
    }

    private void status(DataInputStream i) throws IOException {
        int status = i.readUnsignedByte();
        if (status == TcpStoreServer.OK) {
            return;
        }
        String message = i.readUTF();
        if (status == TcpStoreServer.TIMEOUT) {
            throw new StoreTimeoutException(message);
        }
        throw new StoreException(describe() + ": " + message);
    }

    private void writeKey(DataOutputStream o, String k) throws IOException {
        long n = utfLength(k);
        if (n > maxKeyBytes) {
            throw new StoreException(describe() + ": key of " + n + " bytes ('" + abbreviate(k) + "') exceeds the "
                + "store's limit of " + maxKeyBytes + " bytes (JCCL_STORE_MAX_KEY_BYTES)");
        }
        o.writeUTF(k);
    }

    private void writeValue(DataOutputStream o, String k, byte[] v) throws IOException {
        if (v.length > maxValueBytes) {
            throw new StoreException(describe() + ": value of " + v.length + " bytes for key '" + abbreviate(k)
                + "' exceeds the store's limit of " + maxValueBytes + " bytes (JCCL_STORE_MAX_VALUE_BYTES)");
        }
        o.writeInt(v.length);
        o.write(v);
    }

    private byte[] readValue(DataInputStream i) throws IOException {
        int n = i.readInt();
        if (n < 0 || n > maxValueBytes) {
            throw new IOException("malformed reply: value of " + n + " bytes (limit " + maxValueBytes + ")");
        }
        byte[] b = i.readNBytes(n); // reads in chunks: memory grows with what arrives
        if (b.length != n) {
            throw new EOFException("reply truncated");
        }
        return b;
    }

    private static String abbreviate(String k) {
        return k.length() > 64 ? k.substring(0, 64) + "..." : k;
    }

    /** Length of {@code s} in modified UTF-8, as {@link DataOutputStream#writeUTF} writes it. */
    static long utfLength(String s) {
        long n = 0;
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            n += c >= 1 && c <= 0x7F ? 1 : c <= 0x7FF ? 2 : 3;
        }
        return n;
    }

    @Override
    public void set(String key, byte[] value, long timeoutNs) {
        call("set(" + key + ")", timeoutNs, true, new Request(TcpStoreServer.SET, key, null, null, value, 0));
    }

    @Override
    public byte[] get(String key, long timeoutNs) {
        return (byte[]) call("get(" + key + ")", timeoutNs, true,
            new Request(TcpStoreServer.GET, key, null, null, null, timeoutNs));
    }

    @Override
    public long add(String key, long delta, long timeoutNs) {
        return (Long) call("add(" + key + ")", timeoutNs, false,
            new Request(TcpStoreServer.ADD, key, null, null, null, delta));
    }

    @Override
    public void waitFor(List<String> keys, long timeoutNs) {
        String what = "wait(" + (keys.size() > 20 ? keys.subList(0, 20) + " and " + (keys.size() - 20) + " more"
            : keys) + ")";
        call(what, timeoutNs, true, new Request(TcpStoreServer.WAIT, null, keys, null, null, timeoutNs));
    }

    @Override
    public boolean compareAndSet(String key, byte[] expected, byte[] desired, long timeoutNs) {
        return (Boolean) call("compareAndSet(" + key + ")", timeoutNs, true,
            new Request(TcpStoreServer.CAS, key, null, expected, desired, 0));
    }

    @Override
    public boolean delete(String key, long timeoutNs) {
        return (Boolean) call("delete(" + key + ")", timeoutNs, true,
            new Request(TcpStoreServer.DELETE, key, null, null, null, 0));
    }

    @Override
    public boolean check(String key, long timeoutNs) {
        return (Boolean) call("check(" + key + ")", timeoutNs, true,
            new Request(TcpStoreServer.CHECK, key, null, null, null, 0));
    }

    @Override
    public String describe() {
        return "TcpStore " + host + ":" + port;
    }

    /** Closes the connection and, when this object started it, the server. */
    @Override
    public void close() {
        closed = true;
        Socket s = socket;
        if (s != null) {
            try {
                s.close(); // unblocks a request in progress on another thread
            } catch (IOException ignored) {
                // closing
            }
        }
        if (server != null) {
            server.close();
        }
    }

    /** The connect deadline this store was created with. */
    public long connectTimeoutNs() {
        return connectTimeoutNs;
    }
}
