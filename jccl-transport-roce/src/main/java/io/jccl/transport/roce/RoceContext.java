package io.jccl.transport.roce;

import io.jccl.common.Log;
import io.jccl.transport.roce.wire.BthFlyweight;
import io.jccl.transport.roce.wire.Icrc;
import io.jccl.transport.roce.wire.RoceOpcode;
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
import java.lang.foreign.MemorySegment;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.StandardProtocolFamily;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.DatagramChannel;
import java.util.List;
import java.util.concurrent.locks.LockSupport;

/**
 * A roce context: one UDP socket, bound to a specific IPv4 address, and one receive thread that checks each
 * datagram (known opcode, TVer 0, lengths, default P_Key, ICRC) and hands it to the queue pair its BTH names.
 * Sends go out on the same socket from the thread that posts (or, for ACKs, the receive thread), with Don't
 * Fragment set so that Linux writes IPv4 identification 0, the value the receiver assumes for the ICRC.
 */
final class RoceContext extends AbstractContext {
    /** Largest inline payload (rxe's max_inline_data). */
    static final int MAX_INLINE = 400;
    /** Largest message: the RETH's DMA length is 32 bits; 2 GiB keeps lengths in an int. */
    static final long MAX_MESSAGE = (1L << 31) - 1;
    /** IPv4 flags/fragment field of every packet: Don't Fragment, offset 0. */
    static final int DONT_FRAGMENT = 0x4000;
    /** Receive and send socket buffers: a 128-packet window of 4 KiB packets for many QPs. */
    private static final int SOCKET_BUFFER_BYTES = 4 << 20;

    private final RoceSettings settings;
    private final DatagramChannel channel;
    private final int localIpv4;
    private final int localPort;
    private final int receiveBufferBytes;
    private final String addressText;
    private final DeviceAttributes attributes;
    private final Thread receiver;
    private final Thread timer;
    private volatile boolean closing;
    /** Datagrams whose handling threw (a bug: checks drop bad input without throwing); receive thread writes. */
    private volatile long receiveFailures;
    /** The port's P_Key table. */
    private final int[] pKeys;
    /** Test hook: packets it drops never reach the socket (package-private: loss injection only). */
    private volatile PacketFilter dropFilter;
    /** Queue pairs with timers (copy-on-write: the timer thread reads it without a lock or an iterator). */
    private volatile RoceQueuePair[] timed = new RoceQueuePair[0];
    /** When the timer thread plans to wake next (System.nanoTime). */
    private volatile long timerWakeNs;
    /** Set when a timer was armed while the timer thread was scanning: it scans again before sleeping. */
    private volatile boolean timerRescan;
    /** Longest the timer thread sleeps: an upper bound on how late a deadline armed during a scan is noticed. */
    private static final long TIMER_IDLE_NS = 10_000_000L;
    /**
     * How long the receive thread polls an empty socket before it parks in the selector: long enough to catch the
     * next packet of a burst or the answer of a ping-pong without a wake-up (which costs milliseconds on a loaded
     * host), short enough not to hold a core while idle.
     */
    private final long receiveSpinNs;
    /** Variable that sets how long the receive thread polls an empty socket, in µs (default 50; 0 = park at once). */
    static final String RECEIVE_SPIN_ENV = "JCCL_ROCE_RX_SPIN_US";
    /** Longest the receive thread parks: how late it notices close. */
    private static final long RECEIVE_PARK_MS = 10;
    /** Times the receive thread found the socket empty (it has handled everything that arrived before). */
    private volatile long receiveDrains;
    /** Whether the receive thread is parked on an empty socket. */
    private volatile boolean receiveParked;
    private final java.nio.channels.Selector selector;
    /** IP TOS byte of every packet sent: DSCP 0, ECN-Capable Transport 0, so a switch marks rather than drops. */
    static final int SEND_TOS = EcnSource.ECT_0;
    /** Congestion control of the QPs this context creates from now on (tests change it). */
    private volatile RoceCongestionSettings congestion;
    /** Where the receive thread learns each datagram's TOS byte (see {@link EcnSource}). */
    private volatile EcnSource ecnSource = EcnSource.NONE;
    /** DCQCN's notification point: CNPs for Congestion Experienced arrivals (receive thread only). */
    private final NotificationPoint notificationPoint;

    /** Decides whether a packet about to be sent is lost instead (loss injection in tests). */
    interface PacketFilter {
        /** Whether to drop {@code packet}'s bytes 0..length (the ICRC is in place; do not change the buffer). */
        boolean drop(ByteBuffer packet, int length);
    }

    // Receive thread only.
    private final ByteBuffer rx = ByteBuffer.allocateDirect(64 << 10);
    private final MemorySegment rxSegment = MemorySegment.ofBuffer(rx);
    private final BthFlyweight rxBth = new BthFlyweight();
    private final Icrc rxIcrc = new Icrc();
    private InetSocketAddress lastSender;
    private int lastSenderIpv4;

    RoceContext(RoceDevice device, RoceSettings settings) {
        super(device);
        this.settings = settings;
        InetAddress address = settings.inetAddress();
        try {
            channel = DatagramChannel.open(StandardProtocolFamily.INET);
            channel.setOption(jdk.net.ExtendedSocketOptions.IP_DONTFRAGMENT, true);
            channel.setOption(StandardSocketOptions.SO_RCVBUF, SOCKET_BUFFER_BYTES);
            channel.setOption(StandardSocketOptions.SO_SNDBUF, SOCKET_BUFFER_BYTES);
            channel.setOption(StandardSocketOptions.IP_TOS, SEND_TOS); // Linux keeps the ECN bits for UDP
            channel.bind(new InetSocketAddress(address, settings.port()));
            // non-blocking: the receive thread polls, then parks in the selector (never sleeps inside receive)
            channel.configureBlocking(false);
            selector = java.nio.channels.Selector.open();
            channel.register(selector, java.nio.channels.SelectionKey.OP_READ);
        } catch (IOException | RuntimeException e) {
            counterSet().close();
            throw new VerbsException(VerbsException.Reason.SYSTEM, "roce0: cannot bind UDP " + settings.address()
                + ":" + settings.port() + " (" + e + "); set JCCL_ROCE_PORT to a free port, or 0 for any", e);
        }
        try {
            localPort = ((InetSocketAddress) channel.getLocalAddress()).getPort();
            receiveBufferBytes = channel.getOption(StandardSocketOptions.SO_RCVBUF); // what the kernel granted
        } catch (IOException e) {
            closeQuietly();
            throw new VerbsException(VerbsException.Reason.SYSTEM, "roce0: " + e, e);
        }
        localIpv4 = ipv4(address);
        addressText = settings.address() + ":" + localPort;
        PathMtu mtu = pathMtu(settings.pathMtuBytes());
        attributes = new DeviceAttributes(device.name(), RoceProvider.NAME, "InfiniBand (0)", "0.1.0",
            device.guid(), 0, 0, 0, 1L << 40, 4096, 0x10000, 0x4000, 32, 65536, 1 << 20, 1 << 20, 1 << 16, 128,
            128, MAX_INLINE, AtomicCapability.ATOMIC_GLOB, List.of(new PortAttributes(1, PortState.ACTIVE,
            PathMtu.MTU_4096, mtu, LinkLayer.ETHERNET.displayName(), MAX_MESSAGE, addressText)));
        long spinUs = io.jccl.common.Config.longValue(RECEIVE_SPIN_ENV, 50);
        if (spinUs < 0 || spinUs > 1_000_000) {
            closeQuietly();
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT, RECEIVE_SPIN_ENV + "=" + spinUs
                + " outside 0..1000000");
        }
        receiveSpinNs = spinUs * 1000;
        pKeys = settings.pKeys().stream().mapToInt(Integer::intValue).toArray();
        try {
            congestion = RoceCongestionSettings.fromConfig();
        } catch (IllegalArgumentException e) {
            closeQuietly();
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT, "roce0: " + e.getMessage(), e);
        }
        notificationPoint = new NotificationPoint(this);
        receiver = Thread.ofPlatform().daemon().name("jccl-roce-rx-" + localPort).start(this::receiveLoop);
        timer = Thread.ofPlatform().daemon().name("jccl-roce-timer-" + localPort).start(this::timerLoop);
    }

    static PathMtu pathMtu(int bytes) {
        for (PathMtu m : PathMtu.values()) {
            if (m.bytes() == bytes) {
                return m;
            }
        }
        throw new IllegalArgumentException("no IB MTU of " + bytes + " bytes");
    }

    static int ipv4(InetAddress address) {
        byte[] b = address.getAddress();
        return ((b[0] & 0xFF) << 24) | ((b[1] & 0xFF) << 16) | ((b[2] & 0xFF) << 8) | (b[3] & 0xFF);
    }

    @Override
    public DeviceAttributes query() {
        return attributes;
    }

    @Override
    protected AbstractProtectionDomain newProtectionDomain() {
        return new RoceProtectionDomain(this);
    }

    /** "address:port" as peers reach this context (the endpoint record's address). */
    String addressText() {
        return addressText;
    }

    int localIpv4() {
        return localIpv4;
    }

    int localPort() {
        return localPort;
    }

    /** The receive socket buffer the kernel granted (capped by net.core.rmem_max). */
    int receiveBufferBytes() {
        return receiveBufferBytes;
    }

    /**
     * The P_Key at {@code index} of the port's table.
     *
     * @throws VerbsException for an index outside the table
     */
    int pKey(int index) {
        if (index < 0 || index >= pKeys.length) {
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT, "roce0: pkey_index " + index
                + " outside the port's P_Key table of " + pKeys.length + " (" + RoceSettings.PKEYS_ENV + ")");
        }
        return pKeys[index];
    }

    /** The local ACK timeout for {@code code}: 4.096 µs · 2^code, at least the configured floor; 0 = none. */
    long ackTimeoutNs(int code) {
        if (code == 0) {
            return 0;
        }
        return Math.max(io.jccl.verbs.RnrTimer.ackTimeoutNs(code), settings.ackTimeoutFloorUs() * 1000);
    }

    /** How many datagrams made the receive thread catch an exception (tests assert none). */
    long receiveFailures() {
        return receiveFailures;
    }

    /** Installs (or, with null, removes) the loss-injection filter on the send path. */
    void dropFilter(PacketFilter filter) {
        dropFilter = filter;
    }

    /** Congestion control settings for QPs that enter RTS from now on. */
    RoceCongestionSettings congestion() {
        return congestion;
    }

    /** Replaces the congestion control settings for QPs that enter RTS from now on (tests). */
    void congestion(RoceCongestionSettings settings) {
        congestion = settings;
    }

    /** Installs where the receive thread learns each datagram's TOS byte (the FFM receive path, or a test). */
    void ecnSource(EcnSource source) {
        ecnSource = source == null ? EcnSource.NONE : source;
    }

    /** Lets the timer thread serve {@code qp}'s ACK and RNR timers. */
    synchronized void addTimed(RoceQueuePair qp) {
        for (RoceQueuePair q : timed) {
            if (q == qp) {
                return;
            }
        }
        RoceQueuePair[] next = java.util.Arrays.copyOf(timed, timed.length + 1);
        next[timed.length] = qp;
        timed = next;
    }

    /** Stops serving {@code qp}'s timers (it is being destroyed). */
    synchronized void removeTimed(RoceQueuePair qp) {
        RoceQueuePair[] current = timed;
        for (int i = 0; i < current.length; i++) {
            if (current[i] == qp) {
                RoceQueuePair[] next = new RoceQueuePair[current.length - 1];
                System.arraycopy(current, 0, next, 0, i);
                System.arraycopy(current, i + 1, next, i, current.length - i - 1);
                timed = next;
                return;
            }
        }
    }

    /** A queue pair armed a timer for {@code deadlineNs}: wake the timer thread if it would sleep past it. */
    void timerArmed(long deadlineNs) {
        timerRescan = true;
        if (deadlineNs - timerWakeNs < 0) {
            LockSupport.unpark(timer);
        }
    }

    private void timerLoop() {
        while (!closing) {
            timerRescan = false;
            long now = System.nanoTime();
            long wake = now + TIMER_IDLE_NS;
            for (RoceQueuePair qp : timed) {
                try {
                    long deadline = qp.onTimer(now);
                    if (deadline != 0 && deadline - wake < 0) {
                        wake = deadline;
                    }
                } catch (RuntimeException e) {
                    Log.get().warn(-1, Log.Subsys.NET, "roce0: timer of " + qp + " failed: " + e);
                }
            }
            timerWakeNs = wake;
            if (timerRescan) {
                continue;
            }
            long sleep = wake - System.nanoTime();
            if (sleep > 0) {
                LockSupport.parkNanos(this, sleep);
            }
        }
    }

    /** The port MTU in bytes (a QP uses the smaller of this and its path MTU). */
    int portMtuBytes() {
        return settings.pathMtuBytes();
    }

    /**
     * Sends {@code packet}'s bytes 0..length (ICRC already in place) to {@code to}. Thread-safe (the channel is).
     *
     * @throws IOException when the socket fails
     */
    void send(ByteBuffer packet, int length, InetSocketAddress to) throws IOException {
        PacketFilter filter = dropFilter;
        if (filter != null && filter.drop(packet, length)) {
            return; // lost on the way (tests)
        }
        packet.limit(length).position(0);
        try {
            // non-blocking: 0 when the send buffer is full; the datagram waits for room rather than being lost
            for (int tries = 0; channel.send(packet, to) == 0; tries++) {
                if (tries < 64) {
                    Thread.onSpinWait();
                } else {
                    Thread.yield();
                }
            }
        } finally {
            packet.clear(); // flyweights use absolute indexes, which must stay below the limit
        }
        counterSet().increment(Counter.PORT_XMIT_PACKETS);
        counterSet().increment(Counter.SENT_PKTS);
        counterSet().add(Counter.PORT_XMIT_DATA, length); // bytes, as every JCCL data counter
    }

    /**
     * Times the receive thread found its socket empty: a timer that sees this move on after its deadline knows
     * that every ACK which arrived before the deadline has been handled.
     */
    long receiveDrains() {
        return receiveDrains;
    }

    /** Whether the receive thread is parked on an empty socket (nothing arrived is left unhandled). */
    boolean receiveParked() {
        return receiveParked;
    }

    /** Polls the socket; spins {@link #receiveSpinNs} after the last datagram, then parks in the selector. */
    private void receiveLoop() {
        long idleSinceNs = 0;
        while (!closing) {
            try {
                rx.clear();
                InetSocketAddress from = (InetSocketAddress) channel.receive(rx);
                if (from != null) {
                    idleSinceNs = 0;
                    onDatagram(from, rx.position());
                    continue;
                }
                receiveDrains++; // only this thread writes it
                long now = System.nanoTime();
                if (idleSinceNs == 0) {
                    idleSinceNs = now;
                }
                if (now - idleSinceNs < receiveSpinNs) {
                    Thread.onSpinWait();
                    continue;
                }
                receiveParked = true;
                try {
                    // the key stays in the selected set (never cleared), so selecting allocates no set entry
                    selector.select(RECEIVE_PARK_MS);
                } finally {
                    receiveParked = false;
                }
                idleSinceNs = 0;
            } catch (ClosedChannelException e) {
                return;
            } catch (IOException | RuntimeException e) {
                if (closing) {
                    return;
                }
                counterSet().increment(Counter.PORT_RCV_ERRORS);
                receiveFailures++;
                Log.get().warn(-1, Log.Subsys.NET, "roce0: receive failed: " + e);
            }
        }
    }

    /** Checks one datagram and dispatches it; anything malformed is dropped and counted, never thrown. */
    private void onDatagram(InetSocketAddress from, int length) {
        counterSet().increment(Counter.PORT_RCV_PACKETS);
        counterSet().add(Counter.PORT_RCV_DATA, length);
        if (length < BthFlyweight.LENGTH + RoceOpcode.ICRC_LENGTH) {
            counterSet().increment(Counter.PORT_RCV_ERRORS);
            return;
        }
        BthFlyweight bth = rxBth.wrap(rx, 0);
        int opcode = bth.opcode();
        if (!RoceOpcode.isKnown(opcode) || bth.transportVersion() != 0
            || length < RoceOpcode.headerLength(opcode) + bth.padCount() + RoceOpcode.ICRC_LENGTH) {
            counterSet().increment(Counter.PORT_RCV_ERRORS);
            return;
        }
        if (from != lastSender) { // the JDK reuses the sender object while the sender stays the same
            lastSender = from;
            lastSenderIpv4 = ipv4(from.getAddress());
        }
        int expected = rxIcrc.computeIpv4(lastSenderIpv4, localIpv4, 0, DONT_FRAGMENT, from.getPort(), localPort,
            rx, 0, length);
        if (expected != Icrc.get(rx, 0, length)) {
            counterSet().increment(Counter.PORT_RCV_ERRORS);
            return;
        }
        AbstractQueuePair qp = queuePairs().get(bth.destQp());
        if (!(qp instanceof RoceQueuePair roce) || roce.isClosedForInput()) {
            counterSet().increment(Counter.PORT_RCV_ERRORS);
            return;
        }
        counterSet().increment(Counter.RCVD_PKTS);
        if (opcode == RoceOpcode.CNP) {
            roce.onCnp(rx, from); // reaction point
            return;
        }
        int tos = ecnSource.tos(rx, length);
        boolean fecn = bth.fecn();
        if (tos != EcnSource.UNKNOWN || fecn) {
            notificationPoint.onArrival(tos, fecn, roce, from, System.nanoTime());
        }
        roce.onPacket(rx, rxSegment, length, from);
    }

    @Override
    protected void closeProvider() {
        closing = true;
        LockSupport.unpark(timer);
        closeQuietly();
        if (Thread.currentThread() != receiver) {
            try {
                receiver.join();
                timer.join();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    private void closeQuietly() {
        try {
            if (selector != null) {
                selector.close();
            }
            channel.close();
        } catch (IOException ignored) {
            // closing: nothing left to do with the socket
        }
    }
}
