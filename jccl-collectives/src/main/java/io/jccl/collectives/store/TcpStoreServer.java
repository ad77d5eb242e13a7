package io.jccl.collectives.store;

import io.jccl.common.Config;
import io.jccl.common.Log;
import io.jccl.common.SecureIds;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.BindException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.NetworkInterface;
import java.net.SocketException;
import java.net.StandardSocketOptions;
import java.net.UnknownHostException;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.PriorityQueue;
import java.util.concurrent.TimeUnit;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * The server side of {@link TcpStore}: an in-memory table served over TCP by <b>one</b> platform daemon thread
 * (a selector; no thread per connection and none per blocking request: a {@code get} or {@code waitFor} whose keys
 * are missing is a record in a table, answered when the key appears, when its deadline passes, or dropped when the
 * client's socket closes). Rank 0 starts one inside its process (binding MASTER_PORT), or run it standalone:
 * {@code java -cp jccl-collectives.jar io.jccl.collectives.store.TcpStoreServer [port [bind-address]]}.
 *
 * <p>What it defends against (see {@link Settings} for the limits and their {@code JCCL_STORE_*} settings):
 * <ul>
 * <li>Who may connect: it binds the address it is given (a {@link TcpStore} for {@code 127.0.0.1} listens on the
 * loopback interface only, see {@link #bindAddressFor}); with a secret ({@code JCCL_AUTH_SECRET}) every connection
 * first passes a mutual HMAC-SHA256 challenge-response, and nothing is served before it does.</li>
 * <li>Memory: values, key length, number of keys and total bytes held, keys per wait, request size, and bytes of
 * requests being received at once are bounded; lengths from the wire are checked before anything is allocated and
 * request bodies grow with the bytes that actually arrive.</li>
 * <li>Threads and descriptors: connections are capped (beyond the cap a connection is told so and closed at once),
 * idle ones are closed, a failing {@code accept} (out of descriptors) backs off from 10 ms to 1 s and is logged at
 * most once a second.</li>
 * <li>Malformed input closes that connection only.</li>
 * </ul>
 * The protocol (version 2, magic {@code "JST2"}): the client sends the magic and a 16-byte nonce; the server
 * answers OK, the magic, whether it authenticates, its nonce, its limits and (authenticating) its proof
 * {@code HMAC(k, "jccl-store-server" | client nonce | server nonce)}; the client checks it and sends
 * {@code HMAC(k, "jccl-store-client" | server nonce | client nonce)}, which the server checks (constant time) and
 * answers OK or ERROR. {@code k = HMAC-SHA256(secret, "jccl-store-v2")}. Then requests, one at a time: a 32-bit
 * length and the request (operation byte and fields); keys are written as {@code DataOutput.writeUTF} writes them.
 * A client of another protocol version gets an ERROR naming both versions.
 *
 * <p>Why a selector and not a thread per connection: the latter costs a thread (~0.4 MB) per connection and a thread
 * held for the whole deadline of every blocking request, including abandoned ones; the selector and the handshake
 * cost a few milliseconds more at start-up (server, first client and a set/get in a cold JVM that has loaded what a
 * job loads anyway: 37.0 -> 47.9 and 43.0 -> 45.6 ms medians in two series, {@code StoreStartupBench}) and nothing
 * per connection. Threads are platform daemon threads, not virtual ones:
 * with virtual threads the rank JVMs took ~300 ms longer to exit after their shutdown hooks (launch wall of 2 ranks
 * 754 -> 451 ms measured).
 */
public final class TcpStoreServer implements AutoCloseable {
    static final byte SET = 1;
    static final byte GET = 2;
    static final byte ADD = 3;
    static final byte WAIT = 4;
    static final byte CAS = 5;
    static final byte DELETE = 6;
    static final byte CHECK = 7;
    static final byte OK = 0;
    static final byte TIMEOUT = 1;
    static final byte ERROR = 2;
    /** The server is at its connection cap: try again later. */
    static final byte BUSY = 3;
    /** Protocol version; the magic is "JST" followed by the version digit. */
    static final int VERSION = 2;
    static final int MAGIC_FAMILY = 0x4A53_5400; // "JST" + version
    static final int MAGIC = MAGIC_FAMILY | ('0' + VERSION); // "JST2"
    static final int NONCE_BYTES = 16;
    static final int MAC_BYTES = 32;
    /** Hard bound on a value, whatever the settings say (a frame length must fit an int with room to spare). */
    static final int VALUE_HARD_LIMIT = 256 << 20;
    static final byte[] CLIENT_LABEL = "jccl-store-client".getBytes(StandardCharsets.US_ASCII);
    static final byte[] SERVER_LABEL = "jccl-store-server".getBytes(StandardCharsets.US_ASCII);
    /** Approximate heap bytes of a table entry besides its key characters and value (map node, strings, arrays). */
    private static final int ENTRY_OVERHEAD = 96;
    private static final long HANDSHAKE_TIMEOUT_NS = TimeUnit.SECONDS.toNanos(10);
    private static final long ACCEPT_BACKOFF_MIN_NS = TimeUnit.MILLISECONDS.toNanos(10);
    private static final long ACCEPT_BACKOFF_MAX_NS = TimeUnit.SECONDS.toNanos(1);
    private static final int READ_WINDOW = 64 << 10;
    private static final int MAX_REQUESTS_PER_WAKEUP = 32;
    private static final ByteBuffer[] NO_BUFFERS = new ByteBuffer[0];

    /**
     * The server's secret and limits. The defaults never bother a real job; each is settable through
     * {@link Config} (environment variable or {@code -Djccl.store....} system property).
     *
     * @param secret shared secret every client must prove ({@code JCCL_AUTH_SECRET}); null or blank: none
     * @param maxValueBytes largest value ({@code JCCL_STORE_MAX_VALUE_BYTES}, 1 MiB)
     * @param maxKeyBytes longest key, in its modified UTF-8 form ({@code JCCL_STORE_MAX_KEY_BYTES}, 4096)
     * @param maxKeys most keys held ({@code JCCL_STORE_MAX_KEYS}, 16 Mi: a 4096-rank job's endpoint records fit)
     * @param maxTotalBytes most bytes held, keys and values plus ~96 bytes per entry ({@code JCCL_STORE_MAX_BYTES},
     *     half the JVM's maximum heap)
     * @param maxWaitKeys most keys in one {@code waitFor} ({@code JCCL_STORE_MAX_WAIT_KEYS}, 65536)
     * @param maxConnections most connections open at once; more are closed at once
     *     ({@code JCCL_STORE_MAX_CONNECTIONS}, 1024)
     * @param idleTimeoutNs a connection with no request in flight and no traffic for this long is closed
     *     ({@code JCCL_STORE_IDLE_TIMEOUT}: 300, 30s, 500ms, 5m; 5 minutes). A connection that has not finished the
     *     handshake gets the smaller of this and 10 s. Clients reconnect transparently.
     * @param maxPendingBytes most bytes of requests being received at once over all connections; a connection whose
     *     request would exceed it waits ({@code JCCL_STORE_MAX_PENDING_BYTES}, 64 MiB)
     */
    public record Settings(String secret, int maxValueBytes, int maxKeyBytes, long maxKeys, long maxTotalBytes,
                           int maxWaitKeys, int maxConnections, long idleTimeoutNs, long maxPendingBytes) {
        /** Checks the bounds. */
        public Settings {
            if (secret != null && secret.isBlank()) {
                secret = null;
            }
            check(maxValueBytes >= 1 && maxValueBytes <= VALUE_HARD_LIMIT, "JCCL_STORE_MAX_VALUE_BYTES",
                maxValueBytes, "1.." + VALUE_HARD_LIMIT);
            check(maxKeyBytes >= 1 && maxKeyBytes <= 65535, "JCCL_STORE_MAX_KEY_BYTES", maxKeyBytes, "1..65535");
            check(maxKeys >= 1, "JCCL_STORE_MAX_KEYS", maxKeys, ">= 1");
            check(maxTotalBytes >= 1, "JCCL_STORE_MAX_BYTES", maxTotalBytes, ">= 1");
            check(maxWaitKeys >= 1 && maxWaitKeys <= (1 << 24), "JCCL_STORE_MAX_WAIT_KEYS", maxWaitKeys,
                "1.." + (1 << 24));
            check(maxConnections >= 1, "JCCL_STORE_MAX_CONNECTIONS", maxConnections, ">= 1");
            check(idleTimeoutNs >= TimeUnit.MILLISECONDS.toNanos(1), "JCCL_STORE_IDLE_TIMEOUT", idleTimeoutNs,
                ">= 1 ms");
            check(maxPendingBytes >= 1, "JCCL_STORE_MAX_PENDING_BYTES", maxPendingBytes, ">= 1");
        }

        private static void check(boolean ok, String name, long value, String range) {
            if (!ok) {
                throw new IllegalArgumentException(name + "=" + value + " is outside " + range);
            }
        }

        /** The defaults, no secret; ignores the environment. */
        public static Settings defaults() {
            return new Settings(null, 1 << 20, 4096, 1L << 24, Math.max(1L << 24, Runtime.getRuntime().maxMemory() / 2),
                65536, 1024, TimeUnit.MINUTES.toNanos(5), 64L << 20);
        }

        /** The defaults overridden by {@code JCCL_STORE_*} settings, the secret from {@code JCCL_AUTH_SECRET}. */
        public static Settings fromConfig() {
            Settings d = defaults();
            String idle = Config.value("JCCL_STORE_IDLE_TIMEOUT");
            return new Settings(Config.value("JCCL_AUTH_SECRET"),
                intSetting("JCCL_STORE_MAX_VALUE_BYTES", d.maxValueBytes),
                intSetting("JCCL_STORE_MAX_KEY_BYTES", d.maxKeyBytes),
                Config.longValue("JCCL_STORE_MAX_KEYS", d.maxKeys),
                Config.longValue("JCCL_STORE_MAX_BYTES", d.maxTotalBytes),
                intSetting("JCCL_STORE_MAX_WAIT_KEYS", d.maxWaitKeys),
                intSetting("JCCL_STORE_MAX_CONNECTIONS", d.maxConnections),
                idle == null || idle.isBlank() ? d.idleTimeoutNs : parseDurationNs(idle, "JCCL_STORE_IDLE_TIMEOUT"),
                Config.longValue("JCCL_STORE_MAX_PENDING_BYTES", d.maxPendingBytes));
        }

        private static int intSetting(String name, int fallback) {
            long v = Config.longValue(name, fallback);
            if (v < Integer.MIN_VALUE || v > Integer.MAX_VALUE) {
                throw new IllegalArgumentException(name + "=" + v + " is too large");
            }
            return (int) v;
        }

        /** With another secret (null: none). */
        public Settings withSecret(String s) {
            return new Settings(s, maxValueBytes, maxKeyBytes, maxKeys, maxTotalBytes, maxWaitKeys, maxConnections,
                idleTimeoutNs, maxPendingBytes);
        }

        /** With another idle timeout. */
        public Settings withIdleTimeout(Duration d) {
            return new Settings(secret, maxValueBytes, maxKeyBytes, maxKeys, maxTotalBytes, maxWaitKeys,
                maxConnections, d.toNanos(), maxPendingBytes);
        }

        /** With another connection cap. */
        public Settings withMaxConnections(int n) {
            return new Settings(secret, maxValueBytes, maxKeyBytes, maxKeys, maxTotalBytes, maxWaitKeys, n,
                idleTimeoutNs, maxPendingBytes);
        }

        /** With other table limits. */
        public Settings withTableLimits(int valueBytes, int keyBytes, long keys, long totalBytes, int waitKeys) {
            return new Settings(secret, valueBytes, keyBytes, keys, totalBytes, waitKeys, maxConnections,
                idleTimeoutNs, maxPendingBytes);
        }

        /** With another bound on bytes of requests in flight. */
        public Settings withMaxPendingBytes(long n) {
            return new Settings(secret, maxValueBytes, maxKeyBytes, maxKeys, maxTotalBytes, maxWaitKeys,
                maxConnections, idleTimeoutNs, n);
        }

        /** Largest request frame: a compare-and-set with two values of the largest size and the longest key. */
        int maxRequestBytes() {
            return 1 + 2 + maxKeyBytes + 1 + 4 + maxValueBytes + 4 + maxValueBytes + 16;
        }
    }

    private final Settings settings;
    private final ServerSocketChannel server;
    private final Selector selector;
    private final SelectionKey acceptKey;
    private final Thread thread;
    private final int port;
    private final String where;
    private final int maxRequestBytes;
    private volatile boolean closed;

    // ---- everything below is touched by the server thread only (except the volatile counters)
    private final Map<String, byte[]> table = new HashMap<>();
    private final Map<String, LinkedHashSet<Waiter>> waitersByKey = new HashMap<>();
    private final PriorityQueue<Waiter> deadlines = new PriorityQueue<>();
    private final List<Conn> connections = new ArrayList<>();
    private final ArrayDeque<Conn> parked = new ArrayDeque<>();
    private long totalBytes;
    private long pendingBytes;
    private long waiterSeq;
    private byte[] derivedKey;
    private Mac mac;
    private long acceptBackoffNs;
    private long acceptResumeNs;
    private boolean acceptPaused;
    private long nextSweepNs = Long.MAX_VALUE;
    private final RateLimitedLog acceptLog = new RateLimitedLog();
    private final RateLimitedLog refuseLog = new RateLimitedLog();
    private final RateLimitedLog authLog = new RateLimitedLog();
    private final RateLimitedLog badLog = new RateLimitedLog();
    private volatile int keyCount;
    private volatile int connectionCount;
    /** Connections accepted since the start (written by the selector thread, read by monitoring). */
    private volatile long acceptedCount;
    private volatile int waiterCount;
    private volatile long acceptFailures;

    /**
     * Binds {@code port} (0 picks a free one) on {@code bindAddress} (null: all interfaces) and starts serving, with
     * {@link Settings#fromConfig()} (so with {@code JCCL_AUTH_SECRET} when it is set).
     *
     * @throws StoreException when the port cannot be bound (for example already in use)
     */
    public TcpStoreServer(InetAddress bindAddress, int port) {
        this(bindAddress, port, Settings.fromConfig());
    }

    /**
     * Binds {@code port} (0 picks a free one) on {@code bindAddress} (null: all interfaces) and starts serving.
     *
     * @throws StoreException when the port cannot be bound (for example already in use)
     */
    public TcpStoreServer(InetAddress bindAddress, int port, Settings settings) {
        this.settings = settings;
        this.maxRequestBytes = settings.maxRequestBytes();
        ServerSocketChannel ch = null;
        Selector sel = null;
        try {
            ch = ServerSocketChannel.open();
            ch.setOption(StandardSocketOptions.SO_REUSEADDR, true);
            ch.bind(new InetSocketAddress(bindAddress, port), 1024);
            ch.configureBlocking(false);
            sel = Selector.open();
            acceptKey = ch.register(sel, SelectionKey.OP_ACCEPT);
        } catch (IOException e) {
            closeQuietly(ch);
            closeQuietly(sel);
            throw new StoreException("TcpStoreServer cannot bind " + (bindAddress == null ? "*" : bindAddress.getHostAddress())
                + ":" + port + " (" + e.getMessage() + "); is another job using this MASTER_PORT? (Under torchrun "
                + "with TORCHELASTIC_USE_AGENT_STORE=True the agent serves torch's TCPStore there: JCCL uses it "
                + "unless JCCL_STORE_PROTOCOL=jccl.)", e);
        }
        server = ch;
        selector = sel;
        this.port = ((InetSocketAddress) socketAddress(ch)).getPort();
        this.where = "TcpStoreServer " + (bindAddress == null ? "*" : bindAddress.getHostAddress()) + ":" + this.port;
        thread = Thread.ofPlatform().daemon().name("jccl-store-server-" + this.port).start(this::run);
    }

    private static java.net.SocketAddress socketAddress(ServerSocketChannel ch) {
        try {
            return ch.getLocalAddress();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /**
     * Where a store server for clients that connect to {@code storeHost} should listen (null: all interfaces):
     * <ul>
     * <li>{@code bindSetting} ({@code JCCL_STORE_BIND}) when set: {@code *}, {@code 0.0.0.0} or {@code ::} for all
     * interfaces, else that address;</li>
     * <li>{@code storeHost} {@code 0.0.0.0}, {@code ::} or {@code *}: all interfaces;</li>
     * <li>a loopback address literal or {@code localhost}: that loopback address only;</li>
     * <li>any other address of this host (literal, or the first address a name resolves to, which is the one the
     * clients of this host connect to): that address only;</li>
     * <li>otherwise all interfaces: an address that is not this host's (a NAT or service address, as in
     * containers), a name that resolves to a loopback address here but not elsewhere (Debian's 127.0.1.1 host
     * entry), or a name that does not resolve yet. {@link #forStore} logs which and why (a warning when it listens
     * on all interfaces without a secret).</li>
     * </ul>
     */
    public static InetAddress bindAddressFor(String storeHost, String bindSetting) {
        return chooseBind(storeHost, bindSetting).address;
    }

    private record BindChoice(InetAddress address, String why) {
    }

    private static boolean isWildcardText(String s) {
        return s.equals("*") || s.equals("0.0.0.0") || s.equals("::") || s.equals("[::]") || s.equals("0:0:0:0:0:0:0:0");
    }

    private static boolean isLiteral(String host) {
        if (host.indexOf(':') >= 0) {
            return true;
        }
        for (int i = 0; i < host.length(); i++) {
            char c = host.charAt(i);
            if (c != '.' && (c < '0' || c > '9')) {
                return false;
            }
        }
        return true;
    }

    private static BindChoice chooseBind(String storeHost, String bindSetting) {
        if (bindSetting != null && !bindSetting.isBlank()) {
            String b = bindSetting.trim();
            if (isWildcardText(b)) {
                return new BindChoice(null, "JCCL_STORE_BIND=" + b + ": all interfaces");
            }
            try {
                return new BindChoice(InetAddress.getByName(strip(b)), "JCCL_STORE_BIND=" + b);
            } catch (UnknownHostException e) {
                throw new StoreException("JCCL_STORE_BIND=" + b + " does not resolve (" + e.getMessage() + ")", e);
            }
        }
        String h = strip(storeHost == null ? "" : storeHost.trim());
        if (h.isEmpty() || isWildcardText(h)) {
            return new BindChoice(null, "store address " + (h.isEmpty() ? "(none)" : h) + ": all interfaces");
        }
        InetAddress a;
        try {
            a = InetAddress.getByName(h);
        } catch (UnknownHostException e) {
            return new BindChoice(null, "'" + h + "' does not resolve here (yet): all interfaces; set JCCL_STORE_BIND "
                + "to choose");
        }
        if (a.isAnyLocalAddress()) {
            return new BindChoice(null, "store address " + h + ": all interfaces");
        }
        if (a.isLoopbackAddress()) {
            if (isLiteral(h) || h.equalsIgnoreCase("localhost") || h.toLowerCase(Locale.ROOT).startsWith("localhost.")
                || h.toLowerCase(Locale.ROOT).startsWith("ip6-localhost")) {
                return new BindChoice(a, "loopback store address " + h + ": loopback only");
            }
            return new BindChoice(null, "'" + h + "' resolves to loopback address " + a.getHostAddress() + " here but "
                + "may name this host elsewhere: all interfaces; set JCCL_STORE_BIND (or use an IP address) to choose");
        }
        return new BindChoice(a, "store address " + h + " (" + a.getHostAddress() + ")");
    }

    private static String strip(String h) {
        return h.startsWith("[") && h.endsWith("]") ? h.substring(1, h.length() - 1) : h;
    }

    /**
     * Starts the server for a store at {@code storeHost:port} with {@link #bindAddressFor}'s choice; an address that
     * is not this host's after all (binding it fails with "cannot assign") falls back to all interfaces. Logs the
     * choice (INFO, INIT; a warning when it listens on all interfaces without a secret).
     */
    public static TcpStoreServer forStore(String storeHost, int port, String bindSetting, Settings settings) {
        BindChoice choice = chooseBind(storeHost, bindSetting);
        TcpStoreServer s;
        try {
            s = new TcpStoreServer(choice.address, port, settings);
        } catch (StoreException e) {
            boolean fromSetting = bindSetting != null && !bindSetting.isBlank();
            if (choice.address == null || fromSetting || !(e.getCause() instanceof BindException)
                || isLocal(choice.address)) {
                throw e;
            }
            choice = new BindChoice(null, "store address " + storeHost + " (" + choice.address.getHostAddress()
                + ") is not an address of this host (NAT or service address?): all interfaces; set JCCL_STORE_BIND "
                + "to choose");
            s = new TcpStoreServer(null, port, settings);
        }
        Log log = Log.get();
        // All interfaces without a secret is what an operator must hear about; anything else is INFO.
        Log.Level level = choice.address == null && settings.secret() == null ? Log.Level.WARN : Log.Level.INFO;
        if (log.enabled(level, Log.Subsys.INIT)) {
            log.log(level, -1, Log.Subsys.INIT, s.where + " listening (" + choice.why + "; "
                + (settings.secret() != null ? "clients authenticate with JCCL_AUTH_SECRET" : "no JCCL_AUTH_SECRET: "
                + "any process that reaches the port can read and change keys") + ")");
        }
        return s;
    }

    private static boolean isLocal(InetAddress a) {
        try {
            return a.isLoopbackAddress() || NetworkInterface.getByInetAddress(a) != null;
        } catch (SocketException e) {
            return true; // cannot tell: report the bind error as it is
        }
    }

    /** The bound port. */
    public int port() {
        return port;
    }

    /** The bound address and port. */
    public InetSocketAddress localAddress() {
        return (InetSocketAddress) socketAddress(server);
    }

    /** The settings it runs with. */
    public Settings settings() {
        return settings;
    }

    /** Number of keys held. */
    public int size() {
        return keyCount;
    }

    /** Connections open now (authenticated or not). */
    public int connections() {
        return connectionCount;
    }

    /** Blocking requests ({@code get}, {@code waitFor}) waiting for keys now. */
    public int waitingRequests() {
        return waiterCount;
    }

    /** Connections accepted since the start (refused ones included). */
    public long accepted() {
        return acceptedCount;
    }

    /** How many times {@code accept} failed (for example out of file descriptors) since the start. */
    public long acceptFailures() {
        return acceptFailures;
    }

    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        selector.wakeup();
        if (Thread.currentThread() != thread) {
            try {
                thread.join(TimeUnit.SECONDS.toMillis(5));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /**
     * Runs a standalone server: {@code TcpStoreServer [port [bind-address]]} (default port 29500; default bind
     * address {@code JCCL_STORE_BIND}, else all interfaces). Settings and secret from the environment.
     */
    public static void main(String[] args) throws Exception {
        int port = args.length > 0 ? Integer.parseInt(args[0]) : 29500;
        String bindText = args.length > 1 ? args[1] : Config.value("JCCL_STORE_BIND", "*");
        InetAddress bind = isWildcardText(bindText.trim()) ? null : InetAddress.getByName(strip(bindText.trim()));
        try (TcpStoreServer s = new TcpStoreServer(bind, port, Settings.fromConfig())) {
            System.out.println("JCCL TcpStoreServer listening on " + (bind == null ? "*" : bind.getHostAddress()) + ":"
                + s.port() + (s.settings.secret() != null ? " (clients authenticate with JCCL_AUTH_SECRET)"
                : " (no JCCL_AUTH_SECRET: any process that reaches the port can read and change keys)"));
            try {
                s.thread.join();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        } catch (StoreException e) {
            System.err.println(e.getMessage());
            System.exit(1);
        }
    }

    static boolean isConnectionError(IOException e) {
        return e instanceof SocketException || e instanceof EOFException;
    }

    // ============================================================================================ the server thread

    private void run() {
        try {
            while (!closed) {
                long now = System.nanoTime();
                long next = nextTimerNs(now);
                if (next == Long.MAX_VALUE) {
                    selector.select();
                } else if (next - now <= 0) {
                    selector.selectNow();
                } else {
                    selector.select(Math.max(1, TimeUnit.NANOSECONDS.toMillis(next - now + 999_999)));
                }
                if (closed) {
                    break;
                }
                Iterator<SelectionKey> it = selector.selectedKeys().iterator();
                while (it.hasNext()) {
                    SelectionKey key = it.next();
                    it.remove();
                    if (key == acceptKey) {
                        if (key.isValid() && key.isAcceptable()) {
                            acceptAll();
                        }
                    } else {
                        serviceConnection((Conn) key.attachment(), key);
                    }
                }
                timers(System.nanoTime());
            }
        } catch (IOException | RuntimeException e) {
            if (!closed) {
                Log.get().warn(-1, Log.Subsys.INIT, where + " stopped: " + e);
            }
        } finally {
            for (Conn c : new ArrayList<>(connections)) {
                closeConnection(c);
            }
            closeQuietly(server);
            closeQuietly(selector);
        }
    }

    private long nextTimerNs(long now) {
        long next = Long.MAX_VALUE;
        if (acceptPaused) {
            next = Math.min(next, acceptResumeNs);
        }
        Waiter w = deadlines.peek();
        if (w != null) {
            next = Math.min(next, w.deadlineNs);
        }
        if (!connections.isEmpty()) {
            if (nextSweepNs == Long.MAX_VALUE) {
                nextSweepNs = now + sweepIntervalNs();
            }
            next = Math.min(next, nextSweepNs);
        }
        return next;
    }

    private long sweepIntervalNs() {
        long shortest = Math.min(settings.idleTimeoutNs(), HANDSHAKE_TIMEOUT_NS);
        return Math.clamp(shortest / 4, TimeUnit.MILLISECONDS.toNanos(5), TimeUnit.SECONDS.toNanos(1));
    }

    private void timers(long now) {
        if (acceptPaused && now - acceptResumeNs >= 0) {
            acceptPaused = false;
            if (acceptKey.isValid()) {
                acceptKey.interestOps(SelectionKey.OP_ACCEPT);
            }
        }
        Waiter w;
        while ((w = deadlines.peek()) != null && now - w.deadlineNs >= 0) {
            deadlines.poll();
            w.inQueue = false;
            expire(w, now);
        }
        if (nextSweepNs != Long.MAX_VALUE && now - nextSweepNs >= 0) {
            nextSweepNs = connections.isEmpty() ? Long.MAX_VALUE : now + sweepIntervalNs();
            long handshakeNs = Math.min(settings.idleTimeoutNs(), HANDSHAKE_TIMEOUT_NS);
            for (Conn c : new ArrayList<>(connections)) {
                if (c.waiter != null || c.parked) {
                    continue; // a request in flight, or waiting for the pending-bytes budget: not idle
                }
                long limit = c.phase >= Conn.LENGTH ? settings.idleTimeoutNs() : handshakeNs;
                if (now - c.lastActiveNs >= limit) {
                    closeConnection(c);
                }
            }
        }
    }

    // -------------------------------------------------------------------------------------------------- accepting

    private void acceptAll() {
        for (int i = 0; i < 64; i++) {
            SocketChannel ch;
            try {
                ch = server.accept();
            } catch (IOException e) {
                acceptFailed(e);
                return;
            }
            if (ch == null) {
                return;
            }
            acceptedCount++; // the selector thread only
            acceptBackoffNs = 0;
            if (connections.size() >= settings.maxConnections()) {
                refuse(ch);
                continue;
            }
            try {
                ch.configureBlocking(false);
                ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
                Conn c = new Conn(ch);
                c.key = ch.register(selector, SelectionKey.OP_READ, c);
                connections.add(c);
                connectionCount = connections.size();
            } catch (IOException e) {
                closeQuietly(ch);
            }
        }
    }

    private void acceptFailed(IOException e) {
        acceptFailures++;
        acceptBackoffNs = acceptBackoffNs == 0 ? ACCEPT_BACKOFF_MIN_NS : Math.min(acceptBackoffNs * 2,
            ACCEPT_BACKOFF_MAX_NS);
        acceptPaused = true;
        acceptResumeNs = System.nanoTime() + acceptBackoffNs;
        if (acceptKey.isValid()) {
            acceptKey.interestOps(0);
        }
        acceptLog.log(where + ": accept failed", e.toString() + "; retrying in up to "
            + TimeUnit.NANOSECONDS.toMillis(ACCEPT_BACKOFF_MAX_NS) + " ms (out of file descriptors? "
            + connections.size() + " store connections open)");
    }

    /** At the cap: says so (best effort: the reply fits any socket buffer) and closes at once. */
    private void refuse(SocketChannel ch) {
        try {
            ch.configureBlocking(false);
            drain(ch);
            ByteBuffer reply = ByteBuffer.wrap(statusMessage(BUSY, "the store (" + where + ") has "
                + connections.size() + " connections open, its limit (JCCL_STORE_MAX_CONNECTIONS="
                + settings.maxConnections() + "); try again later"));
            ch.write(reply);
        } catch (IOException ignored) {
            // refused anyway
        }
        closeQuietly(ch);
        refuseLog.log(where + ": refused connections", "at the limit of " + settings.maxConnections()
            + " (JCCL_STORE_MAX_CONNECTIONS)");
    }

    /** Reads what a peer already sent, so that closing sends FIN rather than RST (and the peer reads our reply). */
    private static void drain(SocketChannel ch) throws IOException {
        ByteBuffer b = ByteBuffer.allocate(512);
        for (int i = 0; i < 4 && ch.read(b) > 0; i++) {
            b.clear();
        }
    }

    // ------------------------------------------------------------------------------------------------ connections

    /** One client connection; touched by the server thread only. */
    private static final class Conn {
        static final int HELLO_MAGIC = 0;
        static final int HELLO_NONCE = 1;
        static final int PROOF = 2;
        static final int LENGTH = 3;
        static final int BODY = 4;

        final SocketChannel ch;
        SelectionKey key;
        int phase = HELLO_MAGIC;
        final byte[] small = new byte[MAC_BYTES];
        int have;
        byte[] clientNonce;
        byte[] serverNonce;
        byte[] body;
        int bodyLength;
        int filled;
        long reserved;
        boolean parked;
        boolean open = true;
        boolean closeAfterFlush;
        final ArrayDeque<ByteBuffer> out = new ArrayDeque<>();
        Waiter waiter;
        long lastActiveNs = System.nanoTime();

        Conn(SocketChannel ch) {
            this.ch = ch;
        }

        int smallNeed() {
            return switch (phase) {
                case HELLO_MAGIC, LENGTH -> 4;
                case HELLO_NONCE -> NONCE_BYTES;
                case PROOF -> MAC_BYTES;
                default -> 0;
            };
        }
    }

    private void serviceConnection(Conn c, SelectionKey key) {
        if (c == null || !c.open) {
            return;
        }
        try {
            if (key.isValid() && key.isWritable()) {
                flush(c);
            }
            if (c.open && key.isValid() && key.isReadable()) {
                read(c);
            }
        } catch (IOException e) {
            closeConnection(c);
        } catch (Malformed e) {
            badLog.log(where + ": closed connections that sent malformed requests", e.getMessage());
            closeConnection(c);
        } catch (RuntimeException | OutOfMemoryError e) {
            badLog.log(where + ": closed connections after an internal error", e.toString());
            closeConnection(c);
        }
    }

    /** Malformed input: closes the connection. */
    private static final class Malformed extends Exception {
        Malformed(String message) {
            super(message, null, false, false);
        }
    }

    private void read(Conn c) throws IOException, Malformed {
        for (int requests = 0; c.open && !c.parked && requests < MAX_REQUESTS_PER_WAKEUP; ) {
            if (c.waiter != null || !c.out.isEmpty() || c.closeAfterFlush) {
                // One request at a time: while one is answered nothing more may come; EOF releases the request.
                ByteBuffer probe = ByteBuffer.allocate(1);
                int n = c.ch.read(probe);
                if (n < 0) {
                    closeConnection(c);
                } else if (n > 0) {
                    throw new Malformed("a request arrived before the previous one was answered");
                }
                return;
            }
            ByteBuffer dst;
            if (c.phase == Conn.BODY) {
                if (c.filled == c.body.length) {
                    c.body = Arrays.copyOf(c.body, (int) Math.min(c.bodyLength, (long) c.body.length * 2));
                }
                dst = ByteBuffer.wrap(c.body, c.filled, Math.min(c.body.length - c.filled, READ_WINDOW));
            } else {
                dst = ByteBuffer.wrap(c.small, c.have, c.smallNeed() - c.have);
            }
            int n = c.ch.read(dst);
            if (n < 0) {
                closeConnection(c);
                return;
            }
            if (n == 0) {
                return;
            }
            c.lastActiveNs = System.nanoTime();
            if (c.phase == Conn.BODY) {
                c.filled += n;
                if (c.filled < c.bodyLength) {
                    continue;
                }
                byte[] frame = c.body;
                c.body = null;
                c.phase = Conn.LENGTH;
                c.have = 0;
                release(c);
                requests++;
                handle(c, frame);
            } else {
                c.have += n;
                if (c.have < c.smallNeed()) {
                    continue;
                }
                c.have = 0;
                switch (c.phase) {
                    case Conn.HELLO_MAGIC -> helloMagic(c, readInt(c.small, 0));
                    case Conn.HELLO_NONCE -> helloNonce(c);
                    case Conn.PROOF -> proof(c);
                    case Conn.LENGTH -> length(c, readInt(c.small, 0));
                    default -> throw new IllegalStateException("phase " + c.phase);
                }
            }
        }
    }

    private void helloMagic(Conn c, int magic) throws IOException, Malformed {
        if (magic == MAGIC) {
            c.phase = Conn.HELLO_NONCE;
            return;
        }
        if ((magic & 0xFFFF_FF00) == MAGIC_FAMILY) {
            int version = (magic & 0xFF) - '0';
            // A version-1 client reads a status byte and a writeUTF message: this is both that and ours.
            reply(c, statusMessage(ERROR, "TcpStore protocol mismatch: the store (" + where + ") speaks protocol "
                + VERSION + ", this client protocol " + version + "; run the same JCCL version on every rank and "
                + "for a standalone TcpStoreServer"));
            c.closeAfterFlush = true;
            flush(c);
            return;
        }
        throw new Malformed("not a TcpStore client (first bytes 0x" + Integer.toHexString(magic) + ")");
    }

    private void helloNonce(Conn c) throws IOException {
        c.clientNonce = Arrays.copyOf(c.small, NONCE_BYTES);
        c.serverNonce = SecureIds.bytes(NONCE_BYTES);
        boolean auth = settings.secret() != null;
        ByteArrayOutputStream bytes = new ByteArrayOutputStream(80);
        DataOutputStream o = new DataOutputStream(bytes);
        o.writeByte(OK);
        o.writeInt(MAGIC);
        o.writeByte(auth ? 1 : 0);
        o.write(c.serverNonce);
        o.writeInt(settings.maxValueBytes());
        o.writeInt(settings.maxKeyBytes());
        o.writeInt(settings.maxWaitKeys());
        o.writeInt(maxRequestBytes);
        o.writeLong(TimeUnit.NANOSECONDS.toMillis(settings.idleTimeoutNs()));
        if (auth) {
            o.write(mac(SERVER_LABEL, c.clientNonce, c.serverNonce));
            c.phase = Conn.PROOF;
        } else {
            c.phase = Conn.LENGTH;
        }
        reply(c, bytes.toByteArray());
        flush(c);
    }

    private void proof(Conn c) throws IOException {
        byte[] expected = mac(CLIENT_LABEL, c.serverNonce, c.clientNonce);
        if (!MessageDigest.isEqual(expected, Arrays.copyOf(c.small, MAC_BYTES))) {
            authLog.log(where + ": rejected clients with a wrong secret", "from "
                + remote(c) + " (JCCL_AUTH_SECRET differs)");
            reply(c, statusMessage(ERROR, "rejected the secret: the proof of JCCL_AUTH_SECRET did not match"));
            c.closeAfterFlush = true;
        } else {
            reply(c, new byte[] {OK});
            c.phase = Conn.LENGTH;
        }
        flush(c);
    }

    private static String remote(Conn c) {
        try {
            return String.valueOf(c.ch.getRemoteAddress());
        } catch (IOException e) {
            return "?";
        }
    }

    private byte[] mac(byte[] label, byte[] first, byte[] second) {
        if (mac == null) {
            derivedKey = deriveKey(settings.secret());
            try {
                mac = Mac.getInstance("HmacSHA256");
                mac.init(new SecretKeySpec(derivedKey, "HmacSHA256"));
            } catch (GeneralSecurityException e) {
                throw new IllegalStateException("HmacSHA256 unavailable", e);
            }
        }
        mac.update(label);
        mac.update(first);
        mac.update(second);
        return mac.doFinal();
    }

    /** The store's key: HMAC-SHA256 keyed with the secret over a label (separate from the secret's other uses). */
    static byte[] deriveKey(String secret) {
        try {
            Mac m = Mac.getInstance("HmacSHA256");
            m.init(new SecretKeySpec(secret.getBytes(StandardCharsets.UTF_8), "HmacSHA256"));
            return m.doFinal(("jccl-store-v" + VERSION).getBytes(StandardCharsets.US_ASCII));
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 unavailable", e);
        }
    }

    /** HMAC-SHA256 under {@code key} of the label and both nonces. */
    static byte[] proof(byte[] key, byte[] label, byte[] first, byte[] second) {
        try {
            Mac m = Mac.getInstance("HmacSHA256");
            m.init(new SecretKeySpec(key, "HmacSHA256"));
            m.update(label);
            m.update(first);
            m.update(second);
            return m.doFinal();
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 unavailable", e);
        }
    }

    private void length(Conn c, int length) throws IOException, Malformed {
        if (length < 1 || length > maxRequestBytes) {
            if (length < 1) {
                throw new Malformed("request length " + length);
            }
            reply(c, statusMessage(ERROR, "request of " + length + " bytes exceeds the store's limit of "
                + maxRequestBytes + " bytes (values up to JCCL_STORE_MAX_VALUE_BYTES=" + settings.maxValueBytes()
                + ", keys up to JCCL_STORE_MAX_KEY_BYTES=" + settings.maxKeyBytes() + ")"));
            c.closeAfterFlush = true;
            flush(c);
            return;
        }
        c.bodyLength = length;
        c.filled = 0;
        if (!reserve(c, length)) {
            park(c);
            return;
        }
        c.body = new byte[Math.min(length, 8192)];
        c.phase = Conn.BODY;
    }

    /** Counts {@code length} bytes against the pending-bytes budget; a request alone may always proceed. */
    private boolean reserve(Conn c, long length) {
        if (pendingBytes > 0 && pendingBytes + length > settings.maxPendingBytes()) {
            return false;
        }
        pendingBytes += length;
        c.reserved = length;
        return true;
    }

    private void release(Conn c) {
        pendingBytes -= c.reserved;
        c.reserved = 0;
        while (!parked.isEmpty()) {
            Conn p = parked.peek();
            if (!p.open) {
                parked.poll();
                continue;
            }
            if (!reserve(p, p.bodyLength)) {
                break;
            }
            parked.poll();
            p.parked = false;
            p.body = new byte[Math.min(p.bodyLength, 8192)];
            p.phase = Conn.BODY;
            p.lastActiveNs = System.nanoTime();
            updateInterest(p);
        }
    }

    private void park(Conn c) {
        c.parked = true;
        parked.add(c);
        updateInterest(c);
    }

    private void updateInterest(Conn c) {
        if (!c.open || !c.key.isValid()) {
            return;
        }
        int ops = c.parked ? 0 : SelectionKey.OP_READ;
        if (!c.out.isEmpty()) {
            ops |= SelectionKey.OP_WRITE;
        }
        c.key.interestOps(ops);
    }

    private void reply(Conn c, byte[] bytes) {
        c.out.add(ByteBuffer.wrap(bytes));
    }

    private void flush(Conn c) throws IOException {
        if (!c.open) {
            return;
        }
        while (!c.out.isEmpty()) {
            long n = c.ch.write(c.out.toArray(NO_BUFFERS));
            if (n > 0) {
                c.lastActiveNs = System.nanoTime();
            }
            while (!c.out.isEmpty() && !c.out.peek().hasRemaining()) {
                c.out.poll();
            }
            if (n == 0) {
                break;
            }
        }
        if (c.out.isEmpty() && c.closeAfterFlush) {
            try {
                drain(c.ch);
            } catch (IOException ignored) {
                // closing anyway
            }
            closeConnection(c);
            return;
        }
        updateInterest(c);
    }

    private void closeConnection(Conn c) {
        if (!c.open) {
            return;
        }
        c.open = false;
        if (c.waiter != null) {
            cancel(c.waiter);
        }
        if (c.reserved > 0) {
            release(c);
        }
        c.parked = false;
        parked.remove(c);
        c.body = null;
        c.out.clear();
        if (c.key != null) {
            c.key.cancel();
        }
        closeQuietly(c.ch);
        connections.remove(c);
        connectionCount = connections.size();
    }

    // ----------------------------------------------------------------------------------------------------- requests

    /** A bounds-checked reader over one complete request. */
    private final class Frame {
        private final byte[] b;
        private int pos;

        Frame(byte[] b) {
            this.b = b;
        }

        private void need(int n) throws Malformed {
            if (n < 0 || n > b.length - pos) {
                throw new Malformed("request truncated");
            }
        }

        byte u8() throws Malformed {
            need(1);
            return b[pos++];
        }

        int i32() throws Malformed {
            need(4);
            int v = readInt(b, pos);
            pos += 4;
            return v;
        }

        long i64() throws Malformed {
            need(8);
            long v = ((long) readInt(b, pos) << 32) | (readInt(b, pos + 4) & 0xFFFF_FFFFL);
            pos += 8;
            return v;
        }

        String key() throws Malformed, Limit {
            need(2);
            int n = ((b[pos] & 0xFF) << 8) | (b[pos + 1] & 0xFF);
            if (n > settings.maxKeyBytes()) {
                throw new Limit("key of " + n + " bytes exceeds the store's limit of " + settings.maxKeyBytes()
                    + " bytes (JCCL_STORE_MAX_KEY_BYTES)");
            }
            need(2 + n);
            try {
                String k = new DataInputStream(new ByteArrayInputStream(b, pos, 2 + n)).readUTF();
                pos += 2 + n;
                return k;
            } catch (IOException e) {
                throw new Malformed("key is not modified UTF-8");
            }
        }

        byte[] value() throws Malformed, Limit {
            int n = i32();
            if (n < 0) {
                throw new Malformed("value length " + n);
            }
            if (n > settings.maxValueBytes()) {
                throw new Limit("value of " + n + " bytes exceeds the store's limit of " + settings.maxValueBytes()
                    + " bytes (JCCL_STORE_MAX_VALUE_BYTES)");
            }
            need(n);
            byte[] v = Arrays.copyOfRange(b, pos, pos + n);
            pos += n;
            return v;
        }

        void end() throws Malformed {
            if (pos != b.length) {
                throw new Malformed((b.length - pos) + " bytes after the request");
            }
        }
    }

    /** A well-formed request beyond a limit: answered with ERROR, the connection stays. */
    private static final class Limit extends Exception {
        Limit(String message) {
            super(message, null, false, false);
        }
    }

    private void handle(Conn c, byte[] frame) throws IOException, Malformed {
        Frame f = new Frame(frame);
        byte op = f.u8();
        try {
            switch (op) {
                case SET -> {
                    String key = f.key();
                    byte[] value = f.value();
                    f.end();
                    put(key, value);
                    reply(c, new byte[] {OK});
                }
                case GET -> {
                    String key = f.key();
                    long timeoutNs = f.i64();
                    f.end();
                    byte[] v = table.get(key);
                    if (v != null) {
                        replyValue(c, v);
                    } else {
                        block(c, GET, List.of(key), timeoutNs);
                    }
                }
                case ADD -> {
                    String key = f.key();
                    long delta = f.i64();
                    f.end();
                    byte[] old = table.get(key);
                    long value;
                    try {
                        value = (old == null ? 0 : Long.parseLong(new String(old, StandardCharsets.UTF_8))) + delta;
                    } catch (NumberFormatException e) {
                        throw new Limit("add on key '" + key + "' whose value is not a counter");
                    }
                    put(key, Long.toString(value).getBytes(StandardCharsets.UTF_8));
                    reply(c, okLong(value));
                }
                case WAIT -> {
                    int n = f.i32();
                    if (n < 0) {
                        throw new Malformed("wait for " + n + " keys");
                    }
                    if (n > settings.maxWaitKeys()) {
                        throw new Limit("wait for " + n + " keys exceeds the store's limit of "
                            + settings.maxWaitKeys() + " keys (JCCL_STORE_MAX_WAIT_KEYS)");
                    }
                    f.need(2 * n); // every key takes at least its 2-byte length: checked before the list exists
                    List<String> keys = new ArrayList<>(n);
                    for (int i = 0; i < n; i++) {
                        keys.add(f.key());
                    }
                    long timeoutNs = f.i64();
                    f.end();
                    if (firstMissing(keys, 0) < 0) {
                        reply(c, new byte[] {OK});
                    } else {
                        block(c, WAIT, keys, timeoutNs);
                    }
                }
                case CAS -> {
                    String key = f.key();
                    byte hasExpected = f.u8();
                    byte[] expected = hasExpected != 0 ? f.value() : null;
                    byte[] desired = f.value();
                    f.end();
                    byte[] current = table.get(key);
                    boolean match = expected == null ? current == null : current != null
                        && Arrays.equals(current, expected);
                    if (match) {
                        put(key, desired);
                    }
                    reply(c, new byte[] {OK, (byte) (match ? 1 : 0)});
                }
                case DELETE -> {
                    String key = f.key();
                    f.end();
                    byte[] old = table.remove(key);
                    if (old != null) {
                        totalBytes -= cost(key, old);
                        keyCount = table.size();
                    }
                    reply(c, new byte[] {OK, (byte) (old != null ? 1 : 0)});
                }
                case CHECK -> {
                    String key = f.key();
                    f.end();
                    reply(c, new byte[] {OK, (byte) (table.containsKey(key) ? 1 : 0)});
                }
                default -> throw new Malformed("unknown store request " + op);
            }
        } catch (Limit e) {
            reply(c, statusMessage(ERROR, e.getMessage()));
        }
        flush(c);
    }

    private static long cost(String key, byte[] value) {
        return 2L * key.length() + value.length + ENTRY_OVERHEAD;
    }

    private void put(String key, byte[] value) throws Limit {
        byte[] old = table.get(key);
        if (old == null && table.size() >= settings.maxKeys()) {
            throw new Limit("cannot add key '" + key + "': the store holds " + table.size() + " keys, its limit "
                + "(JCCL_STORE_MAX_KEYS)");
        }
        long after = totalBytes - (old == null ? 0 : cost(key, old)) + cost(key, value);
        if (after > settings.maxTotalBytes()) {
            throw new Limit("cannot set key '" + key + "' (" + value.length + " bytes): the store would hold "
                + after + " bytes, over its limit of " + settings.maxTotalBytes() + " (JCCL_STORE_MAX_BYTES)");
        }
        table.put(key, value);
        totalBytes = after;
        keyCount = table.size();
        wake(key);
    }

    private static byte[] okLong(long v) {
        byte[] b = new byte[9];
        b[0] = OK;
        for (int i = 0; i < 8; i++) {
            b[1 + i] = (byte) (v >>> (56 - 8 * i));
        }
        return b;
    }

    private void replyValue(Conn c, byte[] v) {
        byte[] head = new byte[5];
        head[0] = OK;
        writeInt(head, 1, v.length);
        c.out.add(ByteBuffer.wrap(head));
        c.out.add(ByteBuffer.wrap(v)); // values are never changed in place: no copy
    }

    // ----------------------------------------------------------------------------------------------------- waiting

    /** A blocking request waiting for keys: no thread, just this record. */
    private static final class Waiter implements Comparable<Waiter> {
        final Conn conn;
        final byte op;
        final List<String> keys;
        final long startNs;
        final long deadlineNs;
        final long seq;
        int next;
        String waitingOn;
        boolean inQueue;

        Waiter(Conn conn, byte op, List<String> keys, long startNs, long deadlineNs, long seq) {
            this.conn = conn;
            this.op = op;
            this.keys = keys;
            this.startNs = startNs;
            this.deadlineNs = deadlineNs;
            this.seq = seq;
        }

        @Override
        public int compareTo(Waiter o) {
            int d = Long.compare(deadlineNs - o.deadlineNs, 0);
            return d != 0 ? d : Long.compare(seq, o.seq);
        }
    }

    private int firstMissing(List<String> keys, int from) {
        for (int i = from; i < keys.size(); i++) {
            if (!table.containsKey(keys.get(i))) {
                return i;
            }
        }
        return -1;
    }

    private void block(Conn c, byte op, List<String> keys, long timeoutNs) {
        long now = System.nanoTime();
        // The client's declared deadline, as declared (no thread is held meanwhile); bounded against overflow.
        long t = Math.clamp(timeoutNs, 0, Long.MAX_VALUE / 4);
        Waiter w = new Waiter(c, op, keys, now, now + t, waiterSeq++);
        if (t == 0) {
            w.next = firstMissing(keys, 0);
            expire(w, now);
            return;
        }
        c.waiter = w;
        w.next = firstMissing(keys, 0);
        register(w);
        deadlines.add(w);
        w.inQueue = true;
        waiterCount++;
    }

    private void register(Waiter w) {
        w.waitingOn = w.keys.get(w.next);
        LinkedHashSet<Waiter> set = waitersByKey.get(w.waitingOn);
        if (set == null) {
            set = new LinkedHashSet<>();
            waitersByKey.put(w.waitingOn, set);
        }
        set.add(w);
    }

    private void unregister(Waiter w) {
        if (w.waitingOn != null) {
            LinkedHashSet<Waiter> set = waitersByKey.get(w.waitingOn);
            if (set != null) {
                set.remove(w);
                if (set.isEmpty()) {
                    waitersByKey.remove(w.waitingOn);
                }
            }
            w.waitingOn = null;
        }
    }

    private void cancel(Waiter w) {
        unregister(w);
        if (w.inQueue) {
            deadlines.remove(w);
            w.inQueue = false;
        }
        if (w.conn.waiter == w) {
            w.conn.waiter = null;
            waiterCount--;
        }
    }

    private void wake(String key) {
        LinkedHashSet<Waiter> set = waitersByKey.remove(key);
        if (set == null) {
            return;
        }
        for (Waiter w : set) {
            w.waitingOn = null;
            int missing = firstMissing(w.keys, w.next);
            if (missing >= 0) {
                w.next = missing;
                register(w);
                continue;
            }
            Conn c = w.conn;
            cancel(w);
            if (!c.open) {
                continue;
            }
            if (w.op == GET) {
                replyValue(c, table.get(w.keys.getFirst()));
            } else {
                reply(c, new byte[] {OK});
            }
            try {
                flush(c);
            } catch (IOException e) {
                closeConnection(c);
            }
        }
    }

    private void expire(Waiter w, long now) {
        Conn c = w.conn;
        cancel(w);
        if (!c.open) {
            return;
        }
        List<String> missing = new ArrayList<>();
        int count = 0;
        for (String k : w.keys) {
            if (!table.containsKey(k)) {
                if (missing.size() < 20) {
                    missing.add(k);
                }
                count++;
            }
        }
        String keys = missing + (count > missing.size() ? " and " + (count - missing.size()) + " more" : "");
        reply(c, statusMessage(TIMEOUT, "timed out after " + StoreTimeoutException.millis(now - w.startNs)
            + " waiting for key(s) " + keys + " in TcpStore server port " + port));
        try {
            flush(c);
        } catch (IOException e) {
            closeConnection(c);
        }
    }

    // ---------------------------------------------------------------------------------------------------- helpers

    /** A status byte and a message as {@code DataOutput.writeUTF} writes it (truncated to fit). */
    static byte[] statusMessage(byte status, String message) {
        String m = message.length() > 16000 ? message.substring(0, 16000) + "..." : message;
        ByteArrayOutputStream bytes = new ByteArrayOutputStream(m.length() + 8);
        try (DataOutputStream o = new DataOutputStream(bytes)) {
            o.writeByte(status);
            o.writeUTF(m);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return bytes.toByteArray();
    }

    static int readInt(byte[] b, int at) {
        return (b[at] & 0xFF) << 24 | (b[at + 1] & 0xFF) << 16 | (b[at + 2] & 0xFF) << 8 | (b[at + 3] & 0xFF);
    }

    static void writeInt(byte[] b, int at, int v) {
        b[at] = (byte) (v >>> 24);
        b[at + 1] = (byte) (v >>> 16);
        b[at + 2] = (byte) (v >>> 8);
        b[at + 3] = (byte) v;
    }

    private static void closeQuietly(AutoCloseable c) {
        if (c != null) {
            try {
                c.close();
            } catch (Exception ignored) {
                // closing
            }
        }
    }

    /** Parses {@code 30}, {@code 30s}, {@code 500ms}, {@code 10m}, {@code 1h} into nanoseconds. */
    static long parseDurationNs(String text, String what) {
        String t = text.trim().toLowerCase(Locale.ROOT);
        try {
            if (t.endsWith("ms")) {
                return TimeUnit.MILLISECONDS.toNanos(Long.parseLong(t.substring(0, t.length() - 2).trim()));
            }
            if (t.endsWith("s")) {
                return TimeUnit.SECONDS.toNanos(Long.parseLong(t.substring(0, t.length() - 1).trim()));
            }
            if (t.endsWith("m")) {
                return TimeUnit.MINUTES.toNanos(Long.parseLong(t.substring(0, t.length() - 1).trim()));
            }
            if (t.endsWith("h")) {
                return TimeUnit.HOURS.toNanos(Long.parseLong(t.substring(0, t.length() - 1).trim()));
            }
            return TimeUnit.SECONDS.toNanos(Long.parseLong(t));
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(what + "=" + text + " is not a duration (examples: 300, 30s, 500ms, "
                + "5m)", e);
        }
    }

    /** A warning at most once a second, with how many times it happened since the last one. */
    private static final class RateLimitedLog {
        private long lastNs = System.nanoTime() - TimeUnit.SECONDS.toNanos(2);
        private long suppressed;

        void log(String what, String detail) {
            long now = System.nanoTime();
            suppressed++;
            if (now - lastNs < TimeUnit.SECONDS.toNanos(1)) {
                return;
            }
            long n = suppressed;
            suppressed = 0;
            lastNs = now;
            Log.get().warn(-1, Log.Subsys.INIT, what + " (" + n + (n == 1 ? " time" : " times")
                + " since the last such message; at most one a second): " + detail);
        }
    }
}
