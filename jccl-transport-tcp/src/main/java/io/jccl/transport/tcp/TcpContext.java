package io.jccl.transport.tcp;

import io.jccl.common.Log;
import io.jccl.verbs.AtomicCapability;
import io.jccl.verbs.Counter;
import io.jccl.verbs.DeviceAttributes;
import io.jccl.verbs.LinkLayer;
import io.jccl.verbs.PathMtu;
import io.jccl.verbs.PortAttributes;
import io.jccl.verbs.PortState;
import io.jccl.verbs.VerbsException;
import io.jccl.verbs.spi.AbstractContext;
import io.jccl.verbs.spi.AbstractProtectionDomain;
import io.jccl.verbs.spi.AbstractQueuePair;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.NetworkInterface;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A tcp context: one listening socket (which reads an incoming connection's HELLO, checks its fields and routes it
 * to its queue pair by destination QP number, where the challenge-response authenticates it), {@code
 * JCCL_TCP_THREADS} progress threads, and the device attributes.
 *
 * <p>Bounded against floods: at most {@link #MAX_PENDING} accepted connections wait for their HELLO (each at most
 * 5 s; beyond the bound the oldest is closed, since a peer sends its HELLO right after connecting and a HELLO that
 * is already there is read at accept), and at most {@link #MAX_CANDIDATES} connections wait at queue pairs for
 * their authentication ({@link TcpConnection#MAX_CANDIDATES} per queue pair).
 */
final class TcpContext extends AbstractContext implements TcpEngine.Handler {
    /** Largest message: fits the 32-bit length field with room to spare, and one ByteBuffer window. */
    static final long MAX_MESSAGE = 1L << 30;
    static final int MAX_INLINE = 2048;
    /** How long an accepted connection may take to send its HELLO, and a challenged one its PROOF. */
    static final long HANDSHAKE_TIMEOUT_NS = 5_000_000_000L;
    /** Accepted connections waiting for their HELLO, per context. */
    static final int MAX_PENDING = 256;
    /** Connections accepted per selection round; the listener stays ready for the next round if there are more. */
    private static final int ACCEPT_BATCH = 32;
    /** Connections parked or challenged at this context's queue pairs, all together. */
    static final int MAX_CANDIDATES = 256;

    final TcpSettings settings;
    final InetSocketAddress advertised;
    final String interfaceName;
    /** TCP_NOTSENT_LOWAT of this context's non-loopback connections, 0 for none ({@link TcpSettings#notSentLowatBytes}). */
    final int notSentLowatBytes;
    private final ServerSocketChannel listener;
    private final TcpEngine[] engines;
    private final AtomicInteger nextEngine = new AtomicInteger();
    private final DeviceAttributes attributes;
    /** Connections whose HELLO has not fully arrived, oldest first; touched only by engine 0's thread. */
    private final List<PendingConnection> pending = new ArrayList<>();
    /** {@code pending.size()} for other threads (tests, diagnostics). */
    private volatile int pendingCount;
    /** Connections held by queue pairs before they authenticated (parked or challenged). */
    private final AtomicInteger candidateSlots = new AtomicInteger();
    /** Parses the HELLOs of {@link #pending} connections (engine 0's thread only). */
    private final HelloFlyweight helloView = new HelloFlyweight();

    TcpContext(TcpDevice device, TcpSettings settings) {
        super(device);
        this.settings = settings;
        InetAddress bindAddress;
        String ifname;
        if (settings.address() != null) {
            try {
                bindAddress = InetAddress.getByName(settings.address());
            } catch (IOException e) {
                throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT, "JCCL_TCP_ADDRESS="
                    + settings.address() + " does not resolve: " + e.getMessage(), e);
            }
            ifname = "(JCCL_TCP_ADDRESS)";
        } else {
            InterfaceSelector.Choice choice = InterfaceSelector.select(settings.interfaces(), settings.family());
            bindAddress = choice.address();
            ifname = choice.interfaceName();
        }
        this.interfaceName = ifname;
        this.notSentLowatBytes = TcpSettings.notSentLowatBytes(isVirtualInterface(bindAddress));
        ServerSocketChannel server = null;
        TcpEngine[] started = new TcpEngine[settings.threads()];
        try {
            server = ServerSocketChannel.open();
            server.setOption(StandardSocketOptions.SO_REUSEADDR, true);
            if (settings.socketBufferBytes() > 0) {
                server.setOption(StandardSocketOptions.SO_RCVBUF, settings.socketBufferBytes());
            }
            server.bind(new InetSocketAddress(bindAddress, settings.port()), 1024);
            server.configureBlocking(false);
            for (int i = 0; i < started.length; i++) {
                started[i] = new TcpEngine("jccl-tcp-" + i, settings.spinNs());
            }
        } catch (IOException e) {
            closeQuietly(server);
            for (TcpEngine engine : started) {
                if (engine != null) {
                    engine.stop();
                }
            }
            throw new VerbsException(VerbsException.Reason.SYSTEM, "tcp0: cannot listen on "
                + bindAddress.getHostAddress() + ":" + settings.port() + " (" + ifname + "): " + e.getMessage(), e);
        }
        this.listener = server;
        this.engines = started;
        this.advertised = new InetSocketAddress(bindAddress, server.socket().getLocalPort());
        this.attributes = new DeviceAttributes(device.name(), TcpProvider.NAME, "iWARP (1)", "0.1.0", device.guid(),
            0, 0, 0, 1L << 40, 4096, 16384, 16384, 32, 65536, 1 << 20, 1 << 20, 1 << 16, 128, 128, MAX_INLINE,
            AtomicCapability.ATOMIC_GLOB, List.of(new PortAttributes(1, PortState.ACTIVE, PathMtu.MTU_4096,
            PathMtu.MTU_4096, LinkLayer.ETHERNET.displayName(), MAX_MESSAGE, EndpointAddress.text(bindAddress))));
        TcpEngine first = engines[0];
        first.setExtraTimer(this::onTimer);
        for (TcpEngine engine : engines) {
            engine.start();
        }
        first.execute(() -> {
            try {
                listener.register(first.selector, SelectionKey.OP_ACCEPT, this);
            } catch (IOException e) {
                Log.get().warn(-1, Log.Subsys.NET, "tcp: cannot register listener: " + e);
            }
        });
    }

    @Override
    public DeviceAttributes query() {
        return attributes;
    }

    @Override
    protected AbstractProtectionDomain newProtectionDomain() {
        return new TcpProtectionDomain(this);
    }

    TcpEngine nextEngine() {
        return engines[Math.floorMod(nextEngine.getAndIncrement(), engines.length)];
    }

    /**
     * Whether {@code address} belongs to a virtual, non-loopback interface (veth, bridge, macvlan...): one whose
     * sysfs node lies under /sys/devices/virtual, not under a bus. False when unknown.
     */
    static boolean isVirtualInterface(InetAddress address) {
        try {
            NetworkInterface ni = NetworkInterface.getByInetAddress(address);
            if (ni == null || ni.isLoopback()) {
                return false;
            }
            Path node = Path.of("/sys/class/net", ni.getName());
            return Files.isSymbolicLink(node) && Files.readSymbolicLink(node).toString().contains("/devices/virtual/");
        } catch (IOException | RuntimeException e) {
            return false;
        }
    }

    /** Applies the socket options every connection gets. */
    void configure(SocketChannel channel) throws IOException {
        channel.configureBlocking(false);
        channel.setOption(StandardSocketOptions.TCP_NODELAY, true);
        channel.setOption(StandardSocketOptions.SO_KEEPALIVE, true);
        if (settings.socketBufferBytes() > 0) {
            channel.setOption(StandardSocketOptions.SO_SNDBUF, settings.socketBufferBytes());
            channel.setOption(StandardSocketOptions.SO_RCVBUF, settings.socketBufferBytes());
        }
    }

    // -------------------------------------------------------------------------------------- accepting (engine 0)

    @Override
    public void onSelected(SelectionKey key) {
        // A bounded batch per round: a closed connection's descriptor is released only when the next select
        // deregisters its key, so a flood of accepts in one go would hold more than MAX_PENDING of them.
        for (int accepted = 0; accepted < ACCEPT_BATCH; accepted++) {
            SocketChannel channel;
            try {
                channel = listener.accept();
            } catch (IOException e) {
                return;
            }
            if (channel == null) {
                return;
            }
            try {
                configure(channel);
                PendingConnection connection = new PendingConnection(channel, System.nanoTime()
                    + HANDSHAKE_TIMEOUT_NS);
                if (connection.readHello()) {
                    continue; // the HELLO was there already: routed or refused
                }
                if (pending.size() >= MAX_PENDING) {
                    // The oldest has had the longest to say HELLO; a peer says it right after connecting.
                    counterSet().increment(Counter.PORT_RCV_ERRORS);
                    pending.getFirst().drop();
                }
                connection.key = channel.register(key.selector(), SelectionKey.OP_READ, connection);
                pending.add(connection);
                pendingCount = pending.size();
                engines[0].schedule(connection.deadlineNs);
            } catch (IOException e) {
                closeQuietly(channel);
            }
        }
    }

    private void onTimer() {
        long now = System.nanoTime();
        for (int i = pending.size() - 1; i >= 0; i--) {
            PendingConnection connection = pending.get(i);
            if (now - connection.deadlineNs >= 0) {
                // Connected but never completed its HELLO: a scanner, a stuck peer or garbage.
                counterSet().increment(Counter.PORT_RCV_ERRORS);
                connection.drop();
            } else {
                engines[0].schedule(connection.deadlineNs);
            }
        }
    }

    /** Accepted connections waiting for their HELLO (tests, diagnostics). */
    int pendingConnections() {
        return pendingCount;
    }

    /** Connections queue pairs hold before they authenticated (tests, diagnostics). */
    int candidateConnections() {
        return candidateSlots.get();
    }

    /** Takes one of the context's {@link #MAX_CANDIDATES} slots; false when none is free. */
    boolean takeCandidateSlot() {
        while (true) {
            int n = candidateSlots.get();
            if (n >= MAX_CANDIDATES) {
                return false;
            }
            if (candidateSlots.compareAndSet(n, n + 1)) {
                return true;
            }
        }
    }

    void releaseCandidateSlot() {
        candidateSlots.decrementAndGet();
    }

    /** An accepted connection waiting for its 96-byte HELLO. */
    private final class PendingConnection implements TcpEngine.Handler {
        final SocketChannel channel;
        final long deadlineNs;
        /** Exactly one HELLO is read: whatever follows stays in the socket for the queue pair. */
        final ByteBuffer hello = ByteBuffer.allocate(Wire.HANDSHAKE);
        SelectionKey key;

        PendingConnection(SocketChannel channel, long deadlineNs) {
            this.channel = channel;
            this.deadlineNs = deadlineNs;
        }

        /** Leaves the pending list (its socket stays open). */
        void forget() {
            if (pending.remove(this)) {
                pendingCount = pending.size();
            }
            if (key != null) {
                key.cancel();
            }
        }

        void drop() {
            forget();
            closeQuietly(channel);
        }

        @Override
        public void onSelected(SelectionKey key) {
            readHello();
        }

        /**
         * Reads what there is of the HELLO; once whole, checks its fields and hands the connection to the queue
         * pair it names. Returns whether the connection is done here (handed over or refused).
         */
        boolean readHello() {
            int n;
            try {
                n = channel.read(hello);
            } catch (IOException e) {
                n = -1;
            }
            if (n < 0) {
                counterSet().increment(Counter.PORT_RCV_ERRORS);
                drop();
                return true;
            }
            if (hello.hasRemaining()) {
                return false;
            }
            HelloFlyweight h = helloView.wrap(hello, 0);
            AbstractQueuePair target = h.wellFormed(Wire.KIND_HELLO) ? queuePairs().get(h.destinationQpn()) : null;
            if (!(target instanceof TcpQueuePair qp)) {
                // Not a HELLO, or for no QP of ours: the peer learns nothing and touches nothing.
                counterSet().increment(Counter.PORT_RCV_ERRORS);
                drop();
                return true;
            }
            forget();
            SocketChannel ch = channel;
            ByteBuffer message = hello;
            qp.engine.execute(() -> {
                TcpConnection connection = qp.connection;
                if (connection == null) {
                    counterSet().increment(Counter.PORT_RCV_ERRORS);
                    closeQuietly(ch);
                } else {
                    connection.offerIncoming(ch, message);
                }
            });
            return true;
        }
    }

    @Override
    protected void closeProvider() {
        closeQuietly(listener);
        for (TcpEngine engine : engines) {
            engine.stop();
        }
        for (PendingConnection connection : new ArrayList<>(pending)) {
            closeQuietly(connection.channel);
        }
        pending.clear();
    }

    static void closeQuietly(java.io.Closeable closeable) {
        if (closeable != null) {
            try {
                closeable.close();
            } catch (IOException ignored) {
                // closing anyway
            }
        }
    }

    @Override
    public String toString() {
        return "tcp0@" + advertised + " (" + interfaceName + ")";
    }
}
