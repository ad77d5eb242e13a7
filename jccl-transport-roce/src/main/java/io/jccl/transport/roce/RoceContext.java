package io.jccl.transport.roce;

import io.jccl.common.CpuAffinity;
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
import java.nio.ByteBuffer;
import java.nio.channels.ClosedChannelException;
import java.util.List;
import java.util.concurrent.locks.LockSupport;

/**
 * A roce context: one UDP socket ({@link UdpIo}: FFM {@code sendmmsg}/{@code recvmmsg} where native access is
 * granted, a {@code DatagramChannel} otherwise), bound to a specific IPv4 address, and a receive path that checks
 * each datagram (known opcode, TVer 0, lengths, default P_Key, ICRC) and hands it, with its TOS byte, to the queue
 * pair its BTH names. Queue pairs build packets in their own {@link TxBatch} and send a batch with one system call
 * (the thread that posts, or, for ACKs and responses, the thread that received), with Don't Fragment set so that
 * Linux writes IPv4 identification 0, the value the receiver assumes for the ICRC.
 *
 * <p><b>Who receives.</b> The socket is drained by whoever holds the receive lock ({@link #rxOwner}): an
 * application thread polling a completion queue ({@link #driveFromPoller()}, through {@link RoceQueuePair#progress()})
 * or the receive thread. While an application thread drove the socket less than {@link #DRIVEN_NS} ago the receive
 * thread stands by (parks, looks every {@link #STANDBY_TICK_NS}): on a 2-core host a spinning receive thread beside
 * two spinning pollers made every ping-pong wait for a scheduler time slice (2.6 ms typical). A poller about to park
 * hands the socket back at once ({@link #pollerParks()}). A poller that finds nothing yields its core after
 * {@link #POLL_YIELD_ENV} polls in a row, and waits in {@code ppoll} on the socket after {@link #POLL_WAIT_ENV}
 * ({@link #awaitAsPoller()}): the other end's thread may need the core it spins on.
 */
final class RoceContext extends AbstractContext {
    /** Largest inline payload (rxe's max_inline_data). */
    static final int MAX_INLINE = 400;
    /** Largest message: the RETH's DMA length is 32 bits; 2 GiB keeps lengths in an int. */
    static final long MAX_MESSAGE = (1L << 31) - 1;
    /** IPv4 flags/fragment field of every packet: Don't Fragment, offset 0. */
    static final int DONT_FRAGMENT = 0x4000;
    private final RoceSettings settings;
    private final UdpIo udp;
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
    /** Test hook: the receive thread does nothing ({@link #pauseReceiveThreadForTest}). */
    private volatile boolean receiveThreadPaused;
    /** The receive thread is in its paused branch (set by it, read by tests). */
    private volatile boolean receiveThreadIdle;
    /** Whether the receive thread is parked on an empty socket. */
    private volatile boolean receiveParked;
    /** How long after an application thread last drained the socket the receive thread stays in standby. */
    static final long DRIVEN_NS = 1_000_000L;
    /** Longest park of the receive thread in standby (how late it notices a poller that stopped silently). */
    static final long STANDBY_TICK_NS = 1_000_000L;
    /**
     * The two contexts each application thread drove last ({current, previous}). A thread that polls two contexts'
     * completion queues in turn (a test or a tool with both ends in one process) drives both on every poll: a
     * datagram for the one it is not polling right now would otherwise wait for a receive thread in standby. A
     * context that drops out of a thread's two hands its socket back to its receive thread at once. Strong
     * references, two per thread at most (a closed context's drive returns at once).
     */
    private static final ThreadLocal<PollerState> LAST_DRIVEN = ThreadLocal.withInitial(PollerState::new);

    /** What a polling thread keeps: the last two contexts it drove, and its polls in a row that found nothing. */
    private static final class PollerState {
        final RoceContext[] last = new RoceContext[2];
        int emptyPolls;
        /** Polls in a row in which the context received nothing, not reset by a yield ({@link #POLL_WAIT_ENV}). */
        int idlePolls;
        /** The context's datagram count at this thread's last poll: a datagram the receive thread took counts too. */
        long seenDatagrams;
        /**
         * This thread's last yield gave its core to another thread ({@link #YIELD_GAVE_CORE_NS}): its next idle
         * streak waits in {@code ppoll} instead of yielding again.
         */
        boolean coreShared;
        /**
         * The thread may run on more than one CPU (read once, when it first polls; unknown counts as yes): a thread
         * pinned to one CPU gains nothing from a wait that the scheduler places, and pays its wake-up (1 MiB WRITE
         * with both ends pinned to one core: 6% slower), so it keeps yielding.
         */
        final boolean mayMove = CpuAffinity.threadCpus().cardinality() != 1;
    }

    /**
     * Variable: application polls in a row that found no datagram after which the polling thread yields its core
     * ({@code Thread.yield}), default 16; 0 = never. Two busy-polling ends (perftest's client and server, whose
     * ACKs reopen each other's windows) that the scheduler put on one core otherwise hand over only when a time
     * slice ends: a 128-packet window per 4 ms tick, 0.07 GB/s (docs/transport-roce.md, "Two pollers on one core").
     */
    static final String POLL_YIELD_ENV = "JCCL_ROCE_POLL_YIELD";
    /**
     * Default of {@link #POLL_YIELD_ENV}: about 10 µs of empty polls, above a ping-pong's wait on two cores (8 B
     * t_typical the same as with 64), while two ends on one core hand over 2.5x sooner (16.7 against 42.7 µs).
     */
    static final int POLL_YIELD_DEFAULT = 16;
    /**
     * Variable: application polls in a row that found no datagram after which the polling thread waits in
     * {@code ppoll} on the context's socket (at most {@link #POLLER_WAIT_NS} at a time) instead of spinning on; 0 =
     * never. A yield leaves the thread runnable: a busy-polling responder still takes a core's share from the
     * sender it waits for on a host with more runnable threads than cores (perftest's server, the C sender's
     * receiver; docs/transport-roce.md, "A poller that waits"). A stream's next datagram wakes it at once.
     */
    static final String POLL_WAIT_ENV = "JCCL_ROCE_POLL_WAIT";
    /** Default of {@link #POLL_WAIT_ENV}. */
    static final int POLL_WAIT_DEFAULT = 256;
    /**
     * A yield that returned after this long ran another thread on this core meanwhile (one that finds the core to
     * itself returns in about a microsecond). Two busy-polling ends that the scheduler started on one core (a
     * ping-pong between two processes of one host) then stay there, handing the core over at every yield (8 B
     * round trips of 10-12 µs instead of 3.7), while the other core idles: the kernel does not migrate a busy,
     * cache-hot thread for a long time. So after such a yield the next idle streak of {@link #POLL_YIELD_ENV} polls
     * waits in {@code ppoll} instead (where waits are on): the datagram that wakes it is placed by the scheduler,
     * which picks an idle core where there is one (docs/transport-roce.md, "Two pollers on one core").
     */
    static final long YIELD_GAVE_CORE_NS = 5_000L;
    /**
     * Longest wait of a poller in {@code ppoll}: a completion no datagram brings (a flush from another thread, a
     * datagram another thread received) is late by at most this much.
     */
    static final long POLLER_WAIT_NS = 200_000L;
    /** A poll drains the socket only within this long of the last datagram (idle contexts cost no system call). */
    static final long RECENT_ACTIVITY_NS = 10_000_000L;
    /** Most receive batches one application poll handles (it returns to its caller after that). */
    private static final int POLLER_BATCHES = 4;
    /** The receive lock's holder is an application poller (written and read only by that holder). */
    private boolean pollerDraining;
    /** The datagram being handled is a poller's last of its batch: its lone ACK may be held ({@link #holdsAck}). */
    private boolean ackHoldable;
    /** Whether a poller may hold a single ACK back for the application's answer (temporary A/B switch). */
    private static final boolean ACK_HOLD = !"0".equals(io.jccl.common.Config.value("JCCL_ROCE_ACK_HOLD", "1"));
    /** Whether application polls drain the socket ({@code JCCL_ROCE_POLL_DRIVEN}, default 1; 0 = never). */
    private final boolean pollDriven;
    /** {@link #POLL_YIELD_ENV}: empty polls in a row before a poller yields (0 = never). */
    private final int pollYieldAfter;
    /** Times a polling thread yielded after {@link #pollYieldAfter} empty polls (a statistic; racy, never less). */
    private long pollerYields;
    /** Those of the yields that gave the core to another thread ({@link #YIELD_GAVE_CORE_NS}; racy, as above). */
    private long pollerYieldsGivenAway;
    /** {@link #POLL_WAIT_ENV}: empty polls in a row before a poller waits on the socket (0 = never). */
    private final int pollWaitAfter;
    /** Times a polling thread waited on the socket (a statistic; one waiter at a time). */
    private long pollerWaits;
    /** Variable: most PSNs a QP sends beyond the last acknowledged one (default 128, rxe's; 2..8192). */
    static final String WINDOW_ENV = "JCCL_ROCE_WINDOW_PSNS";
    /**
     * Upper bound of {@link #WINDOW_ENV}: far below the 2^23 that PSN comparison allows; a QP's window is also capped
     * by what the receive socket buffer holds (RoceQueuePair, at RTS).
     */
    static final int MAX_WINDOW_PSNS = 8192;
    /** Most PSNs in flight per QP ({@link #WINDOW_ENV}). */
    private final int maxWindowPsns;
    /** Variable that turns application-driven receive off (0) or on (1, the default). */
    static final String POLL_DRIVEN_ENV = "JCCL_ROCE_POLL_DRIVEN";
    /** 1 while some thread drains the socket (the receive ring is single-consumer); CAS through {@link #RX_OWNER}. */
    @SuppressWarnings("unused")
    private volatile int rxOwner;
    private static final java.lang.invoke.VarHandle RX_OWNER;
    /** 1 while an application poller waits on the socket ({@link #awaitAsPoller}); CAS through {@link #POLLER_WAIT}. */
    @SuppressWarnings("unused")
    private volatile int pollerWaiting;
    private static final java.lang.invoke.VarHandle POLLER_WAIT;

    static {
        try {
            RX_OWNER = java.lang.invoke.MethodHandles.lookup().findVarHandle(RoceContext.class, "rxOwner", int.class);
            POLLER_WAIT = java.lang.invoke.MethodHandles.lookup().findVarHandle(RoceContext.class, "pollerWaiting",
                int.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    /** When an application thread last drained, or tried to drain, the socket (System.nanoTime; 0 = handed back). */
    private volatile long lastPollerDriveNs;
    /** When the last datagram arrived (System.nanoTime; written once per received batch). */
    private volatile long lastDatagramNs;
    /** The TOS byte of the last datagram (-1: the socket does not report it); tests read it. */
    private volatile int lastTos = -1;
    // I/O statistics (relaxed: diagnostics and tests, never decisions)
    private final java.util.concurrent.atomic.AtomicLong sendCalls = new java.util.concurrent.atomic.AtomicLong();
    private final java.util.concurrent.atomic.AtomicLong sendDatagrams =
        new java.util.concurrent.atomic.AtomicLong();
    private long receiveCalls;
    /** Datagram slots the receive calls that returned data asked for ({@code recvmmsg}'s vlen), summed. */
    private long receiveSlotsAsked;
    /** The last receive returned one datagram of at most two packets (receive lock holder only). */
    private boolean lastReceiveSmall;
    private long receiveDatagrams;
    private long receiveWaits;
    private long pollerDrives;
    /** IP TOS byte of every packet sent: DSCP 0, ECN-Capable Transport 0, so a switch marks rather than drops. */
    static final int SEND_TOS = EcnSource.ECT_0;
    /** Variable: 1 (default) sends each QP's packets from its flow-label UDP source port, 0 from the context's. */
    static final String FLOW_SPORT_ENV = "JCCL_ROCE_FLOW_SPORT";
    /** Whether QPs send from their flow-label source port ({@link #FLOW_SPORT_ENV}). */
    private final boolean flowSourcePorts;
    /**
     * Send-only sockets bound to flow-label source ports, one per port in use, shared by the QPs of this context
     * that hash to the same port (counted in {@link FlowSocket#users}); guarded by itself.
     */
    private final java.util.Map<Integer, FlowSocket> flowSockets = new java.util.HashMap<>();
    /** The TOS byte the sockets send with (flow sockets opened later take it too); guarded by flowSockets. */
    private int sendTos = SEND_TOS;

    /** A flow-label socket and how many QPs send from it. */
    private static final class FlowSocket {
        final UdpIo io;
        int users;

        FlowSocket(UdpIo io) {
            this.io = io;
        }
    }
    /** Congestion control of the QPs this context creates from now on (tests change it). */
    private volatile RoceCongestionSettings congestion;
    /** A test's stand-in for the TOS byte the socket reports (null: the socket's; see {@link EcnSource}). */
    private volatile EcnSource ecnSource;
    /** DCQCN's notification point: CNPs for Congestion Experienced arrivals (whoever holds the receive lock). */
    private final NotificationPoint notificationPoint;

    /** Decides whether a packet about to be sent is lost instead (loss injection in tests). */
    interface PacketFilter {
        /** Whether to drop {@code packet}'s bytes 0..length (the ICRC is in place; do not change the buffer). */
        boolean drop(ByteBuffer packet, int length);
    }

    // Whoever holds the receive lock.
    private final RxRing ring;
    /** Whether the socket sends from iovecs (FFM), so payloads may stay in their regions ({@link #zeroCopy()}). */
    private final boolean zeroCopy;
    private final BthFlyweight rxBth = new BthFlyweight();
    private final Icrc rxIcrc = new Icrc();

    RoceContext(RoceDevice device, RoceSettings settings) {
        super(device);
        this.settings = settings;
        InetAddress address = settings.inetAddress();
        try {
            udp = UdpIo.open(address, settings.port());
            udp.trafficClass(SEND_TOS); // ECT(0) on every packet: Linux keeps the ECN bits a UDP sender sets
        } catch (IllegalArgumentException e) {
            counterSet().close();
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT, "roce0: " + e.getMessage(), e);
        } catch (IOException | RuntimeException e) {
            counterSet().close();
            throw new VerbsException(VerbsException.Reason.SYSTEM, "roce0: cannot bind UDP " + settings.address()
                + ":" + settings.port() + " (" + e + "); set JCCL_ROCE_PORT to a free port, or 0 for any", e);
        }
        ring = RxRing.forSocket(udp.gro());
        zeroCopy = udp.kind().equals("ffm");
        localPort = udp.localPort();
        receiveBufferBytes = udp.receiveBufferBytes();
        localIpv4 = ipv4(address);
        addressText = settings.address() + ":" + localPort;
        PathMtu mtu = pathMtu(settings.pathMtuBytes());
        attributes = new DeviceAttributes(device.name(), RoceProvider.NAME, "InfiniBand (0)", "0.1.0",
            device.guid(), 0, 0, 0, 1L << 40, 4096, 0x10000, 0x4000, 32, 65536, 1 << 20, 1 << 20, 1 << 16, 128,
            128, MAX_INLINE, AtomicCapability.ATOMIC_GLOB, List.of(new PortAttributes(1, PortState.ACTIVE,
            PathMtu.MTU_4096, mtu, LinkLayer.ETHERNET.displayName(), MAX_MESSAGE, addressText)));
        receiveSpinNs = setting(RECEIVE_SPIN_ENV, 50, 0, 1_000_000, "") * 1000;
        pollDriven = setting(POLL_DRIVEN_ENV, 1, 0, 1,
            ": use 1 (application polls receive) or 0 (only the receive thread)") == 1;
        pollYieldAfter = (int) setting(POLL_YIELD_ENV, POLL_YIELD_DEFAULT, 0, 1_000_000,
            " (empty polls in a row before a polling thread yields; 0 = never)");
        pollWaitAfter = (int) setting(POLL_WAIT_ENV, POLL_WAIT_DEFAULT, 0, 1_000_000,
            " (empty polls in a row before a polling thread waits on the socket; 0 = never)");
        maxWindowPsns = (int) setting(WINDOW_ENV, RoceQueuePair.WINDOW_PSNS, 2, MAX_WINDOW_PSNS, "");
        flowSourcePorts = setting(FLOW_SPORT_ENV, 1, 0, 1,
            ": use 1 (each QP sends from its flow-label UDP source port) or 0 (from the context's port)") == 1;
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

    /**
     * Installs a test's answer for each datagram's TOS byte in place of the socket's (null: the socket's again, which
     * is the FFM path's {@code IP_RECVTOS} byte, or unknown on the NIO fallback).
     */
    void ecnSource(EcnSource source) {
        ecnSource = source;
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

    /** Most PSNs a QP of this context sends beyond the last acknowledged one ({@link #WINDOW_ENV}). */
    int maxWindowPsns() {
        return maxWindowPsns;
    }

    /** The port MTU in bytes (a QP uses the smaller of this and its path MTU). */
    int portMtuBytes() {
        return settings.pathMtuBytes();
    }

    /** A batch for a queue pair's packets, its slots sized for this port's MTU. */
    TxBatch newTxBatch() {
        return new TxBatch(TxBatch.DEFAULT_CAPACITY, settings.pathMtuBytes());
    }

    /**
     * The packet in {@code batch}'s current slot (bytes 0..length, ICRC in place) joins the batch, unless the
     * loss-injection filter drops it. Sent by the next {@link #flush}.
     */
    void queue(TxBatch batch, int length) {
        queue(batch, null, length);
    }

    /**
     * As above, for a batch that {@code via} will send (a QP's flow-label socket, or null: the context's): whether
     * packets may form GSO messages is that socket's answer, since each socket probes UDP_SEGMENT on its own.
     */
    void queue(TxBatch batch, UdpIo via, int length) {
        PacketFilter filter = dropFilter;
        if (filter != null && filter.drop(batch.buffer(), length)) {
            batch.clearExternal();
            return; // lost on the way (tests)
        }
        batch.commit(length, (via != null ? via : udp).gso());
        counterSet().increment(Counter.PORT_XMIT_PACKETS);
        counterSet().increment(Counter.SENT_PKTS);
        counterSet().add(Counter.PORT_XMIT_DATA, length); // bytes, as every JCCL data counter
    }

    /**
     * Sends the packets of {@code batch} to {@code to} (FFM: one {@code sendmmsg} for all of them while the send
     * buffer has room) and empties it. Thread-safe across batches; a batch is its queue pair's (under its lock).
     *
     * @throws IOException when the socket fails
     */
    void flush(TxBatch batch, InetSocketAddress to, int toIpv4, int toPort) throws IOException {
        flush(batch, null, to, toIpv4, toPort);
    }

    /** As above, from {@code via} (a QP's flow-label socket, {@link #acquireFlowSocket}), or null: the context's. */
    void flush(TxBatch batch, UdpIo via, InetSocketAddress to, int toIpv4, int toPort) throws IOException {
        if (batch.count() == 0) {
            return;
        }
        try {
            sendCalls.addAndGet((via != null ? via : udp).send(batch, to, toIpv4, toPort));
            sendDatagrams.addAndGet(batch.messageCount()); // GSO messages count once (the kernel's sends)
        } finally {
            if (batch.refused > 0) {
                counterSet().add(Counter.SEND_ERR, batch.refused);
                batch.refused = 0;
            }
            batch.clear();
        }
    }

    /**
     * Sends {@code packet}'s bytes 0..length (ICRC already in place) to {@code to} at once, through the drop
     * filter: a raw datagram (tests send mutated packets from a context's own socket this way).
     *
     * @throws IOException when the socket fails
     */
    void send(ByteBuffer packet, int length, InetSocketAddress to) throws IOException {
        PacketFilter filter = dropFilter;
        if (filter != null && filter.drop(packet, length)) {
            return;
        }
        udp.sendOne(packet, length, to);
        sendCalls.incrementAndGet();
        counterSet().increment(Counter.PORT_XMIT_PACKETS);
        counterSet().increment(Counter.SENT_PKTS);
        counterSet().add(Counter.PORT_XMIT_DATA, length);
    }

    /**
     * Sets the TOS byte of every packet this context sends ({@code IP_TOS}: DSCP in the high six bits, ECN in the
     * low two; ECT(0) is 0x02).
     *
     * @throws VerbsException when the socket refuses it
     */
    void trafficClass(int tos) {
        if (tos < 0 || tos > 255) {
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT, "roce0: TOS " + tos + " outside 0..255");
        }
        try {
            synchronized (flowSockets) {
                udp.trafficClass(tos);
                for (FlowSocket f : flowSockets.values()) {
                    f.io.trafficClass(tos);
                }
                sendTos = tos;
            }
        } catch (IOException e) {
            throw new VerbsException(VerbsException.Reason.SYSTEM, "roce0: cannot set IP_TOS " + tos + ": " + e, e);
        }
    }

    /**
     * The send-only socket bound to this context's address and UDP source port {@code port} (a QP's flow-label
     * port, {@link io.jccl.transport.roce.wire.UdpSourcePort}), opened on first use and shared by the QPs that hash
     * to it; null when {@link #FLOW_SPORT_ENV} is 0, or when the port cannot be bound (another program holds it:
     * counted in {@code udp_sport_fallback}): the QP then sends from the context's socket. Cold path (RTR).
     */
    UdpIo acquireFlowSocket(int port) {
        if (!flowSourcePorts || port == localPort) {
            return null;
        }
        synchronized (flowSockets) {
            if (closing) {
                return null;
            }
            FlowSocket f = flowSockets.get(port);
            if (f == null) {
                UdpIo io;
                try {
                    io = UdpIo.openSendOnly(udp, settings.inetAddress(), port);
                } catch (IOException | RuntimeException e) {
                    counterSet().increment(Counter.UDP_SPORT_FALLBACK);
                    Log.get().info(-1, Log.Subsys.NET, () -> "roce0 " + addressText + ": flow-label source port "
                        + port + " unavailable (" + e.getMessage() + "); that QP sends from port " + localPort);
                    return null;
                }
                try {
                    io.trafficClass(sendTos);
                } catch (IOException e) {
                    io.close();
                    counterSet().increment(Counter.UDP_SPORT_FALLBACK);
                    return null;
                }
                f = new FlowSocket(io);
                flowSockets.put(port, f);
            }
            f.users++;
            return f.io;
        }
    }

    /** A QP no longer sends from flow-label port {@code port}; the last one closes its socket. */
    void releaseFlowSocket(int port) {
        synchronized (flowSockets) {
            FlowSocket f = flowSockets.get(port);
            if (f != null && --f.users == 0) {
                flowSockets.remove(port);
                f.io.close();
            }
        }
    }

    /** Flow-label sockets open now (tests). */
    int flowSocketCount() {
        synchronized (flowSockets) {
            return flowSockets.size();
        }
    }

    /** Which socket implementation this context uses: "ffm" or "nio". */
    String ioKind() {
        return udp.kind();
    }

    /** Whether received packets come with their TOS byte ({@link RoceQueuePair#onPacket}'s {@code tos} is not -1). */
    boolean reportsTos() {
        return udp.reportsTos();
    }

    /** The TOS byte of the last datagram received (-1 when the socket does not report it). */
    int lastTos() {
        return lastTos;
    }

    /** Send system calls so far (sendmmsg or send). */
    long sendSystemCalls() {
        return sendCalls.get();
    }

    /** Datagrams handed to the kernel so far: a GSO message of many packets counts once. */
    long sendDatagrams() {
        return sendDatagrams.get();
    }

    /** Datagrams received so far: a GRO datagram of many packets counts once. */
    long receiveDatagrams() {
        return receiveDatagrams;
    }

    /**
     * Whether queue pairs may leave a request's payload in its registered region for the kernel to gather (a second
     * {@code iovec}, {@link TxBatch#external}) instead of copying it into their batch: FFM sockets only, and not
     * while a test's drop filter is installed (it reads whole packets from the batch).
     */
    boolean zeroCopy() {
        return zeroCopy && dropFilter == null;
    }

    /** Whether this context's socket sends GSO messages now ({@code JCCL_ROCE_GSO}, and the kernel agreed). */
    boolean gso() {
        return udp.gso();
    }

    /** Whether this context's socket receives GSO sends as one datagram (UDP_GRO). */
    boolean gro() {
        return udp.gro();
    }

    /** Receive system calls that returned datagrams so far (recvmmsg or receive). */
    long receiveSystemCalls() {
        return receiveCalls;
    }

    /** Datagram slots the receive calls that returned data asked for, summed (tests: 1 per call in a ping-pong). */
    long receiveSlotsAsked() {
        return receiveSlotsAsked;
    }

    /** Times the receive thread waited in poll/select on an empty socket. */
    long receiveWaits() {
        return receiveWaits;
    }

    /** Times an application poll drained the socket (found it non-empty or empty). */
    long pollerDrives() {
        return pollerDrives;
    }

    /** Times a polling thread yielded its core after {@code JCCL_ROCE_POLL_YIELD} polls in a row found nothing. */
    long pollerYields() {
        return pollerYields;
    }

    /** Times a polling thread's yield gave its core to another thread (it took over {@link #YIELD_GAVE_CORE_NS}). */
    long pollerYieldsGivenAway() {
        return pollerYieldsGivenAway;
    }

    /** Times a polling thread waited on the socket after {@code JCCL_ROCE_POLL_WAIT} polls in a row found nothing. */
    long pollerWaits() {
        return pollerWaits;
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

    /**
     * Takes the receive lock for a test, which so stands in for a receive thread the host has not scheduled:
     * datagrams wait in the socket until {@link #releaseReceiveForTest()}. Spins while someone else drains.
     */
    void holdReceiveForTest() {
        while (!tryAcquireReceive()) {
            Thread.onSpinWait();
        }
    }

    /**
     * Pauses (true) or resumes the receive thread: while paused it neither receives nor sends held ACKs, and every
     * application poll drains the socket, so a test counts the system calls and datagrams of the polling threads
     * alone (the standby tick would otherwise send a held ACK at a moment the test does not choose).
     */
    void pauseReceiveThreadForTest(boolean paused) {
        receiveThreadPaused = paused;
    }

    /** Whether the receive thread has seen {@link #pauseReceiveThreadForTest} and stopped (tests wait for it). */
    boolean receiveThreadPausedNow() {
        return receiveThreadPaused && receiveThreadIdle;
    }

    /** When an application thread last drove, or tried to drive, the socket (0: handed back); tests. */
    long lastPollerDriveNs() {
        return lastPollerDriveNs;
    }

    /** When the socket last gave a datagram (System.nanoTime); tests. */
    long lastDatagramNs() {
        return lastDatagramNs;
    }

    /** Gives back the receive lock {@link #holdReceiveForTest()} took. */
    void releaseReceiveForTest() {
        releaseReceive();
    }

    private boolean tryAcquireReceive() {
        return rxOwner == 0 && RX_OWNER.compareAndSet(this, 0, 1);
    }

    private void releaseReceive() {
        RX_OWNER.setRelease(this, 0);
    }

    /**
     * Handles up to {@code maxBatches} receive batches; returns the datagrams handled. Must hold the receive lock.
     * Each time it finds the socket empty it counts a drain ({@link #receiveDrains()}).
     */
    private int drainSocket(int maxBatches) throws IOException {
        int total = 0;
        for (int b = 0; b < maxBatches; b++) {
            // a poller whose last receive was one small datagram (a ping-pong's answer and its ACK) asks for one:
            // recvmmsg then returns without a second try that finds the socket empty (0.25 us of 1.3 on this host)
            int want = pollerDraining && lastReceiveSmall ? 1 : ring.capacity;
            int n = udp.receive(ring, want);
            if (n == 0) {
                receiveDrains++; // only the receive lock's holder writes it
                return total;
            }
            receiveCalls++;
            receiveSlotsAsked += want;
            receiveDatagrams += n;
            lastReceiveSmall = n == 1 && (ring.segmentSize(0) == 0 || ring.lengths[0] <= 2 * ring.segmentSize(0));
            lastDatagramNs = System.nanoTime();
            flushHeldAcks(); // more arrived: an ACK held from the last batch waits no longer (a stream's window)
            for (int i = 0; i < n; i++) {
                try {
                    int size = ring.segmentSize(i);
                    if (size == 0) { // one packet (or a truncated datagram: -1)
                        ackHoldable = pollerDraining && i == n - 1; // the last datagram before the poller returns
                        onDatagram(ring.buffer(i), ring.segment(i), ring.truncated[i] ? -1 : ring.lengths[i],
                            ring.sourceIpv4s[i], ring.sourcePorts[i], ring.tosBytes[i], 0);
                    } else {
                        onCoalesced(i, size, i == n - 1);
                    }
                } catch (RuntimeException e) {
                    counterSet().increment(Counter.PORT_RCV_ERRORS);
                    receiveFailures++;
                    Log.get().warn(-1, Log.Subsys.NET, "roce0: receive failed: " + e);
                }
            }
            total += n;
            if (n < want || want == 1) {
                // a short batch: the socket was most likely empty, and one more recvmmsg to make sure costs every
                // ping-pong a system call on each side; the next poll looks again (no drain counted: not seen empty)
                return total;
            }
        }
        return total;
    }

    /**
     * An application thread polls (a completion queue's progress): it drains the socket itself when the context saw
     * traffic recently and nobody else is draining, and the receive thread stands by meanwhile.
     *
     * @return datagrams handled
     */
    int driveFromPoller() {
        if (!pollDriven || closing) {
            return 0;
        }
        PollerState state = LAST_DRIVEN.get();
        RoceContext[] last = state.last;
        if (last[0] != this) {
            RoceContext dropped = last[1];
            last[1] = last[0];
            last[0] = this;
            if (dropped != null && dropped != this) {
                dropped.pollerParks();
            }
        }
        RoceContext other = last[1];
        boolean alone = other == null || other == this;
        int n = drainAsPoller() + (alone ? 0 : other.drainAsPoller());
        long datagrams = receiveDatagrams; // racy read of the receive lock holder's count: a hint only
        if (datagrams != state.seenDatagrams) {
            state.seenDatagrams = datagrams;
            state.idlePolls = 0; // traffic, whoever received it: the answer this thread waits for may be next
        }
        if (n > 0) {
            state.emptyPolls = 0;
            state.idlePolls = 0;
        } else if (pollWaitAfter > 0 && ++state.idlePolls >= pollWaitAfter && alone && awaitAsPoller()) {
            // waited in ppoll: the next poll drains what woke it (a thread driving two contexts only yields)
            state.emptyPolls = 0;
        } else if (pollYieldAfter > 0 && ++state.emptyPolls >= pollYieldAfter) {
            state.emptyPolls = 0;
            if (state.coreShared && state.mayMove && pollWaitAfter > 0 && alone && awaitAsPoller()) {
                state.coreShared = false; // woken where the scheduler chose (YIELD_GAVE_CORE_NS)
            } else {
                // Nothing came for a while: the thread that must answer (the peer's poller, this context's receive
                // thread) may be waiting for this very core; spinning on would keep it off until the slice ends.
                pollerYields++;
                long before = System.nanoTime();
                Thread.yield();
                state.coreShared = System.nanoTime() - before > YIELD_GAVE_CORE_NS;
                if (state.coreShared) {
                    pollerYieldsGivenAway++;
                }
            }
        }
        return n;
    }

    /**
     * Whether the packets a received datagram caused may wait in {@code batch} for the QP's next flush instead of
     * going out now: only a single plain ACK, only on a polling application thread, only for the last datagram of
     * a receive batch (an ACK within a stream goes out before the next batch is handled). That thread returns to the
     * application, which often answers at once (a ping-pong): the ACK then leaves in the same {@code sendmmsg} as the
     * answer, or at the thread's next poll, or, if it stops polling, from the receive thread within a standby tick.
     * One system call less per message each way. The peer's ACK timer is 32 ms or more.
     */
    boolean holdsAck(TxBatch batch) {
        return ACK_HOLD && ackHoldable && batch.count() == 1
            && (batch.buffer(0).get(0) & 0xFF) == RoceOpcode.ACKNOWLEDGE;
    }

    /** A queue pair now holds an ACK (after setting its own flag, so that a flush that sees this sees that). */
    void ackWasHeld() {
        anyAckHeld = true;
    }

    /** A queue pair held an ACK back ({@link #holdsAck}): set before its flag, so a flush never misses it. */
    private volatile boolean anyAckHeld;

    /**
     * Sends the ACKs queue pairs hold: at the start of each poller's drive (an ACK held since the last poll, the
     * application did not answer with a post of its own), when a poller parks, and on the receive thread before it
     * waits and after each standby tick.
     */
    private void flushHeldAcks() {
        if (!anyAckHeld || closing) {
            return;
        }
        anyAckHeld = false;
        for (RoceQueuePair qp : timed) {
            if (qp.ackHeld()) {
                qp.flushHeldAck();
            }
        }
    }

    private int drainAsPoller() {
        if (closing) {
            return 0;
        }
        flushHeldAcks();
        long now = System.nanoTime();
        if (now - lastDatagramNs > RECENT_ACTIVITY_NS && !receiveThreadPaused) {
            return 0; // (a test that paused the receive thread has the pollers receive everything)
        }
        // Claimed before the lock is tried: a receive thread in its spin phase holds the lock nearly all the time
        // (a recvmmsg per turn), so a poller that had to win it first rarely did, the receive thread never saw a
        // poller and never stood by, and a ping-pong ran three spinning threads per process on two cores (a profile
        // of write_lat: the receive thread spinning against the poller in 13% of the samples).
        lastPollerDriveNs = now == 0 ? 1 : now;
        if (!tryAcquireReceive()) {
            return 0;
        }
        try {
            if (closing) {
                return 0;
            }
            pollerDrives++;
            pollerDraining = true;
            try {
                return drainSocket(POLLER_BATCHES);
            } finally {
                pollerDraining = false;
            }
        } catch (IOException e) {
            if (!closing) {
                counterSet().increment(Counter.PORT_RCV_ERRORS);
                Log.get().warn(-1, Log.Subsys.NET, "roce0: receive failed: " + e);
            }
            return 0;
        } finally {
            releaseReceive();
        }
    }

    /**
     * A poller that found nothing {@link #pollWaitAfter} times in a row waits in {@code ppoll} until a datagram
     * arrives, at most {@link #POLLER_WAIT_NS}: only while it drives the socket (traffic in the last 10 ms), one
     * poller at a time, on FFM sockets. The receive thread keeps standing by and does not drain meanwhile (it would
     * take the datagram the poller waits for and leave it asleep). Returns whether it waited.
     */
    private boolean awaitAsPoller() {
        if (closing || !udp.pollerCanAwait() || lastPollerDriveNs == 0
            || System.nanoTime() - lastDatagramNs > RECENT_ACTIVITY_NS) {
            return false;
        }
        if (!POLLER_WAIT.compareAndSet(this, 0, 1)) {
            return false;
        }
        try {
            // (no held ACK to flush: this poll's drive flushed them first and then received nothing)
            pollerWaits++;
            long now = System.nanoTime();
            lastPollerDriveNs = now == 0 ? 1 : now;
            udp.awaitFromPoller(POLLER_WAIT_NS);
            now = System.nanoTime();
            lastPollerDriveNs = now == 0 ? 1 : now;
            return true;
        } catch (IOException e) {
            return false; // a closed socket: the next poll finds the context closing
        } finally {
            POLLER_WAIT.setRelease(this, 0);
        }
    }

    /** The application's poller is about to park: the receive thread takes the socket back at once. */
    void pollerParks() {
        flushHeldAcks();
        if (lastPollerDriveNs != 0) {
            lastPollerDriveNs = 0;
            LockSupport.unpark(receiver);
        }
    }

    /**
     * The receive thread: stands by while application polls drive the socket; otherwise drains it, spins
     * {@link #receiveSpinNs} after the last datagram, then waits in poll/select.
     */
    private void receiveLoop() {
        long idleSinceNs = 0;
        while (!closing) {
            try {
                if (receiveThreadPaused) {
                    receiveThreadIdle = true; // outside the receive lock, nothing half handled
                    LockSupport.parkNanos(this, STANDBY_TICK_NS); // a test counts what the pollers alone do
                    continue;
                }
                receiveThreadIdle = false;
                long driven = lastPollerDriveNs;
                if (driven != 0 && System.nanoTime() - driven < DRIVEN_NS) {
                    // standby: no spinning, no wake-up per datagram; a hand-over unparks it
                    LockSupport.parkNanos(this, STANDBY_TICK_NS);
                    flushHeldAcks();
                    // a poller that stalls leaves at most a tick's datagrams waiting; one waiting in ppoll gets them
                    if (pollerWaiting == 0 && tryAcquireReceive()) {
                        try {
                            if (!closing) {
                                drainSocket(Integer.MAX_VALUE);
                            }
                        } finally {
                            releaseReceive();
                        }
                    }
                    idleSinceNs = 0;
                    continue;
                }
                if (!tryAcquireReceive()) {
                    Thread.onSpinWait(); // a poller is draining right now
                    continue;
                }
                int n;
                try {
                    n = closing ? 0 : drainSocket(Integer.MAX_VALUE);
                } finally {
                    releaseReceive();
                }
                if (n > 0) {
                    idleSinceNs = 0;
                    continue;
                }
                long now = System.nanoTime();
                if (idleSinceNs == 0) {
                    idleSinceNs = now;
                }
                if (now - idleSinceNs < receiveSpinNs) {
                    Thread.onSpinWait();
                    continue;
                }
                flushHeldAcks();
                receiveParked = true;
                try {
                    receiveWaits++;
                    udp.await((int) RECEIVE_PARK_MS);
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

    /**
     * Datagram {@code i} of the ring holds the packets of one GSO send (UDP GRO), {@code size} bytes each (the last
     * may be shorter): each is checked and dispatched as a datagram of its own, packet k with IPv4 identification k.
     */
    private void onCoalesced(int i, int size, boolean lastDatagram) {
        int length = ring.lengths[i];
        int views = ring.views(i, size, length);
        int k = 0;
        for (int offset = 0; offset < length; offset += size, k++) {
            int packetLength = Math.min(size, length - offset);
            ByteBuffer packet;
            MemorySegment packetSegment;
            if (k == 0) {
                packet = ring.buffer(i);
                packetSegment = ring.segment(i);
            } else if (views >= 0) {
                packet = ring.packetBuffer(i, views, k);
                packetSegment = ring.packetSegment(i, views, k);
            } else {
                packet = ring.copyPacket(i, offset, packetLength);
                packetSegment = ring.scratchSegment();
            }
            ackHoldable = pollerDraining && lastDatagram && onlyAcksAfter(i, offset + size, size, length);
            onDatagram(packet, packetSegment, packetLength, ring.sourceIpv4s[i], ring.sourcePorts[i],
                ring.tosBytes[i], k);
        }
    }

    /**
     * Whether the packets of GRO datagram {@code i} from {@code offset} on are all ACKs (or none are left): a
     * request's ACK may then be held for the application's answer ({@link #holdsAck}), as for a poller's last
     * datagram. A peer's answer and its ACK arrive so, as one datagram ({@link TxBatch}'s ACK swap).
     */
    private boolean onlyAcksAfter(int i, int offset, int size, int length) {
        for (int at = offset; at < length; at += size) {
            if ((ring.segment(i).get(java.lang.foreign.ValueLayout.JAVA_BYTE, at) & 0xFF) != RoceOpcode.ACKNOWLEDGE) {
                return false;
            }
        }
        return true;
    }

    /**
     * Checks one packet and dispatches it; anything malformed is dropped and counted, never thrown.
     * {@code segment} is its index in a GRO datagram (0 for a datagram of its own): the IPv4 identification its
     * sender's kernel gave it when it went out as one GSO send.
     */
    private void onDatagram(ByteBuffer rx, MemorySegment rxSegment, int length, int sourceIpv4, int sourcePort,
                            int tos, int segment) {
        counterSet().increment(Counter.PORT_RCV_PACKETS);
        if (length < BthFlyweight.LENGTH + RoceOpcode.ICRC_LENGTH) { // -1: longer than a ring slot
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
        counterSet().add(Counter.PORT_RCV_DATA, length);
        lastTos = tos;
        int withId0 = rxIcrc.computeIpv4(sourceIpv4, localIpv4, 0, DONT_FRAGMENT, sourcePort, localPort,
            rx, 0, length);
        int stored = Icrc.get(rx, 0, length);
        // identification: the segment index of a GRO datagram's packet, 0 for a packet sent alone, or, for a packet
        // of a peer's GSO send that this socket received alone (GRO off here), its index within that send
        if (stored != withId0 && stored != (withId0 ^ rxIcrc.delta(segment, length))
            && rxIcrc.matchingIdentification(withId0, stored, length, 1, TxBatch.MAX_SEGMENTS - 1) < 0) {
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
            roce.onCnp(rx, sourceIpv4, sourcePort); // reaction point
            return;
        }
        EcnSource override = ecnSource;
        if (override != null) {
            tos = override.tos(rx, length);
        }
        boolean fecn = bth.fecn();
        if (fecn || EcnSource.congestionExperienced(tos)) {
            notificationPoint.onArrival(tos, fecn, roce, sourceIpv4, sourcePort, System.nanoTime());
        }
        roce.onPacket(rx, rxSegment, length, sourceIpv4, sourcePort, tos);
    }

    @Override
    protected void closeProvider() {
        closing = true;
        LockSupport.unpark(timer);
        LockSupport.unpark(receiver);
        if (Thread.currentThread() != receiver) {
            try {
                receiver.join();
                timer.join();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        // a poller may be draining: close the descriptor only once nobody can use it (it could be reused)
        while (Thread.currentThread() != receiver && !tryAcquireReceive()) {
            Thread.onSpinWait();
        }
        closeQuietly();
    }

    /**
     * A numeric setting read from the environment within {@code min..max}; outside it the context closes what it
     * opened and fails with the setting, its value and {@code hint} (a choice's meaning) or the range.
     */
    private long setting(String env, long defaultValue, long min, long max, String hint) {
        long value = io.jccl.common.Config.longValue(env, defaultValue);
        if (value < min || value > max) {
            closeQuietly();
            String why = max - min == 1 && !hint.isEmpty() ? hint : " outside " + min + ".." + max + hint;
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT, env + "=" + value + why);
        }
        return value;
    }

    private void closeQuietly() {
        udp.close();
        synchronized (flowSockets) {
            for (FlowSocket f : flowSockets.values()) {
                f.io.close();
            }
            flowSockets.clear();
        }
    }

    /** "ffm"/"nio", the port and the I/O statistics (diagnostics). */
    @Override
    public String toString() {
        return "roce0 " + addressText + " (" + udp.kind() + (udp.gso() ? "+gso" : "") + (udp.gro() ? "+gro" : "")
            + ", " + sendCalls.get() + " send calls, " + sendDatagrams.get() + " datagrams sent, " + receiveCalls
            + " receive calls, " + receiveDatagrams + " datagrams received, " + receiveWaits + " waits, "
            + pollerDrives + " poller drives, " + pollerYields + " poller yields (" + pollerYieldsGivenAway
            + " gave the core away), " + pollerWaits + " poller waits)";
    }
}
