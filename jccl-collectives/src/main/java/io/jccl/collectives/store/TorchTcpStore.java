package io.jccl.collectives.store;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

/**
 * A client of PyTorch's {@code torch.distributed.TCPStore}: what JCCL ranks use under torchrun when the elastic agent
 * already serves its store at MASTER_ADDR:MASTER_PORT ({@code TORCHELASTIC_USE_AGENT_STORE=True}), and what lets
 * Python processes and JVM ranks share one rendezvous. It speaks the client side of torch's wire protocol (read from
 * {@code torch/csrc/distributed/c10d/TCPStore.cpp}, {@code TCPStoreBackend.cpp} and
 * {@code TCPStoreLibUvBackend.cpp}):
 * <ul>
 * <li>every integer is little-endian (torch sends host order; its servers run on little-endian hosts); a key or a
 * value is a 64-bit length and its bytes;</li>
 * <li>{@link Dialect#CURRENT} (torch 2.x, both the libuv backend, the default since 2.4, and the classic one): a
 * connection starts with {@code VALIDATE} and the magic number {@code 0x3C85F7CE}; query ids VALIDATE 0, SET 1,
 * COMPARE_SET 2, GET 3, ADD 4, CHECK 5, WAIT 6, GETNUMKEYS 7, DELETE_KEY 8, APPEND 9, MULTI_GET 10, MULTI_SET 11,
 * CANCEL_WAIT 12, PING 13;</li>
 * <li>{@link Dialect#LEGACY} (torch 1.x, for example Debian's python3-torch 1.13): no validation; SET 0,
 * COMPARE_SET 1, GET 2, ADD 3, CHECK 4, WAIT 5, GETNUMKEYS 6, WATCH_KEY 7, DELETE_KEY 8.</li>
 * </ul>
 * {@link #probe} tells them apart without disturbing either server: a current server answers GETNUMKEYS after
 * VALIDATE; a legacy one drops that connection and answers its own GETNUMKEYS. (Some torch 2.x releases prefixed every
 * query with a magic number instead of validating once; they leave the probe unanswered and are reported as not
 * speaking the protocol.)
 *
 * <p>Keys go on the wire with torch's client prefix {@code "/"} (as torch's own {@code TCPStore} client sends them),
 * so a Python {@code TCPStore(host, port, is_master=False)} reads what this client writes under the same name; a
 * {@code keyPrefix} adds a namespace in front (torchrun's restarts, for example).
 *
 * <p>GET is preceded by WAIT, as torch's client does (a server answers a GET of a missing key by dropping the
 * connection). A wait asks the server in slices (10 ms, doubling up to 500 ms) and looks with CHECK between them,
 * because torch's classic backends (torch 1.x, and 2.x without libuv) do not wake waiters when COMPARE_SET creates a
 * key; a slice that ends closes the connection, which makes every server kind forget the wait (legacy servers have
 * no CANCEL_WAIT). A wait that passes its deadline throws {@link StoreTimeoutException}; the next call reconnects.
 * torch's store has no authentication: anyone who can reach it can read, change and delete keys (with
 * {@code JCCL_AUTH_SECRET} JCCL still seals its values, see {@code SealedStore}). Thread-safe: one request at a
 * time.
 */
public final class TorchTcpStore implements Store {
    /** torch's validation magic number (TCPStoreBackend.hpp {@code validationMagicNumber}). */
    public static final int VALIDATION_MAGIC = 0x3C85F7CE;
    /** torch's client-side key prefix (TCPStore.hpp {@code keyPrefix_}). */
    public static final String TORCH_KEY_PREFIX = "/";

    /** Which generation of torch's protocol a server speaks. */
    public enum Dialect {
        /** torch 2.x: VALIDATE first, query ids from 1. */
        CURRENT(1, 2, 3, 4, 5, 6, 7, 8),
        /** torch 1.x: no validation, query ids from 0. */
        LEGACY(0, 1, 2, 3, 4, 5, 6, 8);

        final int set;
        final int compareSet;
        final int get;
        final int add;
        final int check;
        final int waitOp;
        final int numKeys;
        final int deleteKey;

        Dialect(int set, int compareSet, int get, int add, int check, int waitOp, int numKeys, int deleteKey) {
            this.set = set;
            this.compareSet = compareSet;
            this.get = get;
            this.add = add;
            this.check = check;
            this.waitOp = waitOp;
            this.numKeys = numKeys;
            this.deleteKey = deleteKey;
        }
    }

    private static final int VALIDATE = 0;
    private static final int READY = 0;
    private static final int STOP_WAITING = 0;
    /**
     * How long the probe waits for an answer. Both torch dialects and JCCL's server answer (or hang up) at once, so
     * only a server that speaks none of them costs this; generous for a loaded host.
     */
    private static final long PROBE_ANSWER_MS = 10_000;
    /** A wait first asks for 10 ms, then twice as long each time up to 500 ms, looking in between (see awaitKeys). */
    private static final long FIRST_WAIT_SLICE_NS = TimeUnit.MILLISECONDS.toNanos(10);
    private static final long MAX_WAIT_SLICE_NS = TimeUnit.MILLISECONDS.toNanos(500);

    private final String host;
    private final int port;
    private final Dialect dialect;
    private final String keyPrefix;
    private Socket socket;
    private DataInputStream in;
    private OutputStream out;
    private volatile boolean closed;
    private final ByteArrayOutputStream frame = new ByteArrayOutputStream(256);

    /**
     * Connects to the torch store at {@code host:port}, retrying until {@code connectTimeoutNs} passes, and finds
     * its dialect ({@link #probe}).
     *
     * @throws StoreException when something else answers there
     * @throws StoreTimeoutException when nothing answers in time
     */
    public TorchTcpStore(String host, int port, long connectTimeoutNs) {
        this(host, port, connectTimeoutNs, "");
    }

    /** As {@link #TorchTcpStore(String, int, long)}, keeping every key under {@code keyPrefix} (may be empty). */
    public TorchTcpStore(String host, int port, long connectTimeoutNs, String keyPrefix) {
        this(host, port, awaitDialect(host, port, connectTimeoutNs), keyPrefix);
    }

    /** A client for a server whose dialect is known; connects on first use. */
    public TorchTcpStore(String host, int port, Dialect dialect, String keyPrefix) {
        this.host = host;
        this.port = port;
        this.dialect = dialect;
        this.keyPrefix = TORCH_KEY_PREFIX + (keyPrefix == null ? "" : keyPrefix);
    }

    /** The dialect this client speaks. */
    public Dialect dialect() {
        return dialect;
    }

    // ---------------------------------------------------------------------------------------------------- probing

    /**
     * Whether {@code host:port} is a torch TCPStore, and which dialect: null when nothing listens or something else
     * answers (a JCCL {@link TcpStoreServer} drops both probes at once). Two short connections: VALIDATE + GETNUMKEYS
     * (a 2.x server answers with its key count), then, when that connection was dropped, GETNUMKEYS of the legacy
     * dialect (a legacy server answers with its key count).
     */
    public static Dialect probe(String host, int port) {
        try (Socket s = open(host, port, PROBE_ANSWER_MS)) {
            OutputStream o = s.getOutputStream();
            // VALIDATE, then GETNUMKEYS four times: every 2.x server (with or without PING, libuv or classic)
            // answers the first with its key count. A legacy server reads the bytes after its SET (0) as a key
            // length of about 5 * 10^17, fails to allocate it and drops the connection; so does a JCCL server
            // (not its magic).
            byte[] b = new byte[9];
            b[0] = VALIDATE;
            putInt(b, 1, VALIDATION_MAGIC);
            Arrays.fill(b, 5, 9, (byte) Dialect.CURRENT.numKeys);
            o.write(b);
            o.flush();
            byte[] answer = new byte[8];
            new DataInputStream(s.getInputStream()).readFully(answer);
            return getLong(answer, 0) >= 0 ? Dialect.CURRENT : null;
        } catch (SocketTimeoutException e) {
            return null; // it kept the connection and said nothing: not a server we know
        } catch (IOException e) {
            // dropped (EOF or reset): a legacy torch server, or something that is not torch at all; ask again
        }
        try (Socket s = open(host, port, PROBE_ANSWER_MS)) {
            OutputStream o = s.getOutputStream();
            // GETNUMKEYS, then three zero bytes that make a JCCL TcpStoreServer reject the "magic" at once rather
            // than wait for the rest of it; a legacy torch server reads them as the start of a SET it never gets.
            o.write(new byte[] {(byte) Dialect.LEGACY.numKeys, 0, 0, 0});
            o.flush();
            byte[] answer = new byte[8];
            new DataInputStream(s.getInputStream()).readFully(answer);
            return getLong(answer, 0) >= 0 ? Dialect.LEGACY : null;
        } catch (IOException e) {
            return null;
        }
    }

    private static Dialect awaitDialect(String host, int port, long timeoutNs) {
        long start = System.nanoTime();
        long pauseNs = TimeUnit.MILLISECONDS.toNanos(10);
        while (true) {
            boolean listening = true;
            try (Socket s = new Socket()) {
                SelfConnection.connect(s, new InetSocketAddress(host, port), (int) Math.clamp(
                    TimeUnit.NANOSECONDS.toMillis(timeoutNs - (System.nanoTime() - start)), 1, 5000));
            } catch (IOException e) {
                listening = false;
            }
            if (listening) {
                Dialect d = probe(host, port);
                if (d == null) {
                    throw new StoreException("the server at " + host + ":" + port + " does not answer torch's "
                        + "TCPStore protocol (neither torch 2.x's VALIDATE + GETNUMKEYS nor torch 1.x's GETNUMKEYS): is "
                        + "MASTER_ADDR:MASTER_PORT the torchrun agent's store (TORCHELASTIC_USE_AGENT_STORE=True)? "
                        + "Set JCCL_STORE_PROTOCOL=jccl to use JCCL's own store there");
                }
                return d;
            }
            if (System.nanoTime() - start - timeoutNs >= 0) {
                throw new StoreTimeoutException("cannot reach torch's TCPStore at " + host + ":" + port + " within "
                    + StoreTimeoutException.millis(System.nanoTime() - start) + "; is the torchrun agent (or the "
                    + "Python process serving the store) running and MASTER_ADDR/MASTER_PORT right?");
            }
            LockSupport.parkNanos(pauseNs);
            pauseNs = Math.min(pauseNs * 2, TimeUnit.MILLISECONDS.toNanos(200));
        }
    }

    private static Socket open(String host, int port, long timeoutMs) throws IOException {
        Socket s = new Socket();
        try {
            SelfConnection.connect(s, new InetSocketAddress(host, port), (int) timeoutMs);
            s.setTcpNoDelay(true);
            s.setSoTimeout((int) timeoutMs);
            return s;
        } catch (IOException e) {
            s.close();
            throw e;
        }
    }

    // ------------------------------------------------------------------------------------------------ connection

    private void connect(long deadlineNs) {
        long start = System.nanoTime();
        long pauseNs = TimeUnit.MILLISECONDS.toNanos(10);
        IOException last = null;
        while (!closed) {
            try {
                Socket s = open(host, port, Math.clamp(TimeUnit.NANOSECONDS.toMillis(deadlineNs - start), 100, 5000));
                socket = s;
                in = new DataInputStream(new BufferedInputStream(s.getInputStream()));
                out = new BufferedOutputStream(s.getOutputStream());
                if (dialect == Dialect.CURRENT) {
                    byte[] v = new byte[5];
                    v[0] = VALIDATE;
                    putInt(v, 1, VALIDATION_MAGIC);
                    out.write(v);
                    out.flush();
                }
                return;
            } catch (IOException e) {
                last = e;
                drop();
            }
            if (System.nanoTime() - deadlineNs >= 0) {
                throw new StoreTimeoutException("cannot reach " + describe() + " within "
                    + StoreTimeoutException.millis(System.nanoTime() - start) + " (last error: " + last + ")", last);
            }
            LockSupport.parkNanos(pauseNs);
            pauseNs = Math.min(pauseNs * 2, TimeUnit.MILLISECONDS.toNanos(200));
        }
        throw new StoreException(describe() + " is closed");
    }

    private void drop() {
        Socket s = socket;
        socket = null;
        in = null;
        out = null;
        if (s != null) {
            try {
                s.close();
            } catch (IOException ignored) {
                // dropping anyway
            }
        }
    }

    /** Connects when needed and sets the read deadline of the next reply. */
    private void ready(long deadlineNs) throws IOException {
        ready(deadlineNs, deadlineNs);
    }

    private void ready(long connectDeadlineNs, long replyDeadlineNs) throws IOException {
        if (closed) {
            throw new StoreException(describe() + " is closed");
        }
        if (socket == null) {
            connect(connectDeadlineNs);
        }
        long leftMs = TimeUnit.NANOSECONDS.toMillis(replyDeadlineNs - System.nanoTime());
        socket.setSoTimeout((int) Math.clamp(leftMs, 1, Integer.MAX_VALUE));
    }

    private static long deadline(long timeoutNs) {
        return System.nanoTime() + Math.clamp(timeoutNs, 1, Long.MAX_VALUE / 4);
    }

    // ----------------------------------------------------------------------------------------------- encoding

    private void op(int id) {
        frame.reset();
        frame.write(id);
    }

    private void u64(long v) {
        for (int i = 0; i < 8; i++) {
            frame.write((int) (v >>> (8 * i)));
        }
    }

    private void bytes(byte[] b) {
        u64(b.length);
        frame.write(b, 0, b.length);
    }

    private void key(String key) {
        bytes((keyPrefix + key).getBytes(StandardCharsets.UTF_8));
    }

    private void send() throws IOException {
        frame.writeTo(out);
        out.flush();
    }

    private long readI64() throws IOException {
        byte[] b = new byte[8];
        in.readFully(b);
        return getLong(b, 0);
    }

    private byte[] readBytes() throws IOException {
        long n = readI64();
        if (n < 0 || n > Integer.MAX_VALUE - 16) {
            throw new IOException("a value of " + Long.toUnsignedString(n) + " bytes");
        }
        byte[] v = new byte[(int) n];
        in.readFully(v);
        return v;
    }

    private int readByte() throws IOException {
        int b = in.read();
        if (b < 0) {
            throw new EOFException("connection closed");
        }
        return b;
    }

    private static void putInt(byte[] b, int at, int v) {
        for (int i = 0; i < 4; i++) {
            b[at + i] = (byte) (v >>> (8 * i));
        }
    }

    private static int getInt(byte[] b, int at) {
        int v = 0;
        for (int i = 3; i >= 0; i--) {
            v = (v << 8) | (b[at + i] & 0xFF);
        }
        return v;
    }

    private static long getLong(byte[] b, int at) {
        long v = 0;
        for (int i = 7; i >= 0; i--) {
            v = (v << 8) | (b[at + i] & 0xFF);
        }
        return v;
    }

    // --------------------------------------------------------------------------------------------- operations

    /** What failed: a timeout becomes StoreTimeoutException, anything else StoreException; the connection drops. */
    private StoreException failed(String what, IOException e, long startNs) {
        drop();
        if (e instanceof SocketTimeoutException) {
            return new StoreTimeoutException(describe() + ": " + what + " did not complete within "
                + StoreTimeoutException.millis(System.nanoTime() - startNs), e);
        }
        return new StoreException(describe() + ": " + what + " failed (" + e + ")", e);
    }

    @Override
    public synchronized void set(String key, byte[] value, long timeoutNs) {
        long start = System.nanoTime();
        long deadline = deadline(timeoutNs);
        for (int attempt = 0; ; attempt++) {
            try {
                ready(deadline);
                op(dialect.set);
                key(key);
                bytes(value);
                send();
                return;
            } catch (IOException e) {
                StoreException x = failed("set '" + key + "'", e, start);
                if (attempt > 0 || x instanceof StoreTimeoutException) {
                    throw x; // a set is idempotent: one retry on a fresh connection
                }
            }
        }
    }

    @Override
    public synchronized byte[] get(String key, long timeoutNs) {
        long start = System.nanoTime();
        long deadline = deadline(timeoutNs);
        awaitKeys(List.of(key), deadline, start);
        try {
            ready(deadline);
            op(dialect.get);
            key(key);
            send();
            return readBytes();
        } catch (IOException e) {
            throw failed("get '" + key + "'", e, start);
        }
    }

    @Override
    public synchronized long add(String key, long delta, long timeoutNs) {
        long start = System.nanoTime();
        long deadline = deadline(timeoutNs);
        try {
            ready(deadline);
            op(dialect.add);
            key(key);
            u64(delta);
            send();
            return readI64();
        } catch (IOException e) {
            throw failed("add " + delta + " to '" + key + "'", e, start); // not retried: it may have counted
        }
    }

    @Override
    public synchronized void waitFor(List<String> keys, long timeoutNs) {
        long start = System.nanoTime();
        awaitKeys(keys, deadline(timeoutNs), start);
    }

    private void awaitKeys(List<String> keys, long deadline, long start) {
        if (keys.isEmpty()) {
            return;
        }
        long sliceNs = FIRST_WAIT_SLICE_NS;
        while (true) {
            try {
                ready(deadline, Math.min(deadline, System.nanoTime() + sliceNs));
                op(dialect.waitOp);
                u64(keys.size());
                for (String k : keys) {
                    key(k);
                }
                send();
                int answer = readByte();
                if (answer != STOP_WAITING) {
                    throw new IOException("unexpected wait answer " + answer);
                }
                return;
            } catch (SocketTimeoutException e) {
                // Dropping the connection makes the server forget this wait (both backends clear a closed client's
                // waits; legacy servers have no CANCEL_WAIT). Then look: the classic backends do not wake waiters
                // when COMPARE_SET creates a key (only the libuv one does), so a wait alone could miss it.
                drop();
                if (checkAll(keys, deadline)) {
                    return;
                }
                if (System.nanoTime() - deadline >= 0) {
                    List<String> missing = keys;
                    try {
                        missing = keys.stream().filter(k -> !check(k, TimeUnit.SECONDS.toNanos(5))).toList();
                    } catch (StoreException ignored) {
                        // keep the whole list
                    }
                    throw new StoreTimeoutException(describe() + ": keys " + missing + " did not appear within "
                        + StoreTimeoutException.millis(System.nanoTime() - start), e);
                }
                sliceNs = Math.min(sliceNs * 2, MAX_WAIT_SLICE_NS);
            } catch (IOException e) {
                throw failed("wait for " + keys, e, start);
            }
        }
    }

    private boolean checkAll(List<String> keys, long deadline) {
        long start = System.nanoTime();
        try {
            ready(deadline + TimeUnit.SECONDS.toNanos(5));
            op(dialect.check);
            u64(keys.size());
            for (String k : keys) {
                key(k);
            }
            send();
            return readByte() == READY;
        } catch (IOException e) {
            throw failed("check " + keys, e, start);
        }
    }

    /**
     * {@inheritDoc}
     *
     * <p>torch's COMPARE_SET answers with the value the key holds afterwards, not with whether it replaced it: this
     * returns whether that value is {@code desired}, which is exact unless the key already held {@code desired}.
     * torch treats an empty {@code expected} as "absent", as {@code null} is here.
     */
    @Override
    public synchronized boolean compareAndSet(String key, byte[] expected, byte[] desired, long timeoutNs) {
        long start = System.nanoTime();
        long deadline = deadline(timeoutNs);
        try {
            ready(deadline);
            op(dialect.compareSet);
            key(key);
            bytes(expected == null ? new byte[0] : expected);
            bytes(desired);
            send();
            return Arrays.equals(readBytes(), desired);
        } catch (IOException e) {
            throw failed("compare-and-set '" + key + "'", e, start);
        }
    }

    @Override
    public synchronized boolean delete(String key, long timeoutNs) {
        long start = System.nanoTime();
        long deadline = deadline(timeoutNs);
        try {
            ready(deadline);
            op(dialect.deleteKey);
            key(key);
            send();
            return readI64() > 0;
        } catch (IOException e) {
            throw failed("delete '" + key + "'", e, start);
        }
    }

    @Override
    public synchronized boolean check(String key, long timeoutNs) {
        long start = System.nanoTime();
        long deadline = deadline(timeoutNs);
        try {
            ready(deadline);
            op(dialect.check);
            u64(1);
            key(key);
            send();
            return readByte() == READY;
        } catch (IOException e) {
            throw failed("check '" + key + "'", e, start);
        }
    }

    /** Number of keys in the whole store (every client's, torch's own too): GETNUMKEYS. */
    public synchronized long numKeys(long timeoutNs) {
        long start = System.nanoTime();
        try {
            ready(deadline(timeoutNs));
            op(dialect.numKeys);
            send();
            return readI64();
        } catch (IOException e) {
            throw failed("count keys", e, start);
        }
    }

    @Override
    public String describe() {
        return "torch TCPStore " + host + ":" + port + " (" + (dialect == Dialect.CURRENT ? "torch 2.x" : "torch 1.x")
            + " protocol)";
    }

    @Override
    public synchronized void close() {
        closed = true;
        drop();
    }
}
