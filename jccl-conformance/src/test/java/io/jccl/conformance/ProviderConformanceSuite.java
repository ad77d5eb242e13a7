package io.jccl.conformance;

import io.jccl.conformance.PeerSide.ConnectionSpec;
import io.jccl.conformance.PeerSide.PeerQueuePair;
import io.jccl.conformance.PeerSide.PeerRegion;
import io.jccl.conformance.PeerSide.PeerSend;
import io.jccl.conformance.PeerSide.PeerSge;
import io.jccl.conformance.PeerSide.QueuePairSpec;
import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.AtomicCapability;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.Context;
import io.jccl.verbs.Counter;
import io.jccl.verbs.Device;
import io.jccl.verbs.DeviceAttributes;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.PathMtu;
import io.jccl.verbs.PortAttributes;
import io.jccl.verbs.PortState;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.QueuePairState;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.Verbs;
import io.jccl.verbs.VerbsException;
import io.jccl.verbs.WorkCompletion;
import io.jccl.verbs.WorkCompletionOpcode;
import io.jccl.verbs.WorkCompletionStatus;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.EnumSource;
import org.junit.jupiter.params.provider.MethodSource;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Deque;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Supplier;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeFalse;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The provider conformance kit: libibverbs semantics (ibv_post_send(3), ibv_modify_qp(3), ibv_poll_cq(3) and
 * rxe's behaviour where the man pages are silent) checked through the public {@code io.jccl.verbs} API only.
 *
 * <p>A provider runs it by extending this class in its own tests:
 * <pre>
 *   class ShmConformanceTest extends ProviderConformanceSuite {
 *       protected String deviceName() { return "shm0"; }
 *   }
 * </pre>
 * Every test that needs a second end runs twice: with the peer in this JVM ({@link PeerMode#IN_PROCESS}, its own
 * context) and with the peer in a child JVM ({@link PeerMode#SEPARATE_JVM}, see {@link RemotePeer}). Child JVMs
 * are pooled per test class and reset between tests; they are killed after the class. Waits use generous
 * deadlines ({@link #WAIT_NS}); nothing asserts how fast something happens.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS) // a backstop: every wait inside has its own, shorter deadline
public abstract class ProviderConformanceSuite {
    /** How long any single expected event may take before the test fails. */
    protected static final long WAIT_NS = TimeUnit.SECONDS.toNanos(10);
    /** How long a test watches for an event that must not happen (absence checks only). */
    protected static final long QUIET_NS = TimeUnit.MILLISECONDS.toNanos(200);

    private static final ValueLayout.OfLong HOST_LONG = ValueLayout.JAVA_LONG_UNALIGNED;
    private static final ExecutorService BACKGROUND = Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r, "conformance-background");
        t.setDaemon(true);
        return t;
    });
    private static final Map<String, Deque<RemotePeer>> IDLE_PEER_PROCESSES = new HashMap<>();

    private final Deque<AutoCloseable> cleanup = new ArrayDeque<>();

    /** The device to test, e.g. "shm0" or "tcp0". */
    protected abstract String deviceName();

    /** Extra JVM arguments for peer processes (default: those {@link AcrossHosts} passed this JVM, else none). */
    protected List<String> peerJvmArguments() {
        return AcrossHosts.peerJvmArguments();
    }

    /**
     * A command that peer JVMs are started through, for example {@code ip netns exec h2} to put the peer on another
     * "host" of the network-namespace test bed (default: the one {@link AcrossHosts} passed this JVM, else none).
     */
    protected List<String> peerCommandPrefix() {
        return AcrossHosts.peerCommandPrefix();
    }

    /** Where the other end of a connection lives. */
    public enum PeerMode {
        /** The peer has its own context in this JVM. */
        IN_PROCESS,
        /** The peer is a child JVM driven over a pipe. */
        SEPARATE_JVM
    }

    // =============================================================================================== fixtures

    /** Closes what the test opened (last opened first) and returns healthy peer JVMs to the pool. */
    @AfterEach
    void closeEverythingTheTestOpened() throws Exception {
        Exception first = null;
        while (!cleanup.isEmpty()) {
            try {
                cleanup.pop().close();
            } catch (Exception e) {
                if (first == null) {
                    first = e;
                } else {
                    first.addSuppressed(e);
                }
            }
        }
        if (first != null) {
            throw first;
        }
    }

    /** Kills the pooled peer JVMs of this class. */
    @AfterAll
    static void stopPeerProcesses() {
        List<RemotePeer> all = new ArrayList<>();
        synchronized (IDLE_PEER_PROCESSES) {
            IDLE_PEER_PROCESSES.values().forEach(all::addAll);
            IDLE_PEER_PROCESSES.clear();
        }
        all.forEach(RemotePeer::close);
    }

    /** Opens the test's own end; closed after the test. */
    protected final LocalEnd openLocal() {
        LocalEnd local = new LocalEnd(deviceName());
        cleanup.push(local);
        return local;
    }

    /** A peer of the given kind, clean; released after the test. */
    protected final PeerSide peer(PeerMode mode) {
        if (mode == PeerMode.IN_PROCESS) {
            InProcessPeer peer = new InProcessPeer(deviceName(), "in-process peer");
            cleanup.push(peer);
            return peer;
        }
        String key = deviceName() + " " + peerCommandPrefix() + " " + peerJvmArguments();
        RemotePeer peer;
        synchronized (IDLE_PEER_PROCESSES) {
            peer = IDLE_PEER_PROCESSES.computeIfAbsent(key, k -> new ArrayDeque<>()).pollFirst();
        }
        if (peer == null || !peer.isHealthy()) {
            if (peer != null) {
                peer.close();
            }
            peer = RemotePeer.launch(deviceName(), peerCommandPrefix(), peerJvmArguments());
        }
        RemotePeer leased = peer;
        cleanup.push(() -> {
            boolean clean = false;
            try {
                if (!leased.isHealthy()) {
                    return; // killed or timed out: closed below, never reused
                }
                leased.reset();
                clean = leased.isHealthy();
            } finally {
                if (clean) {
                    synchronized (IDLE_PEER_PROCESSES) {
                        IDLE_PEER_PROCESSES.computeIfAbsent(key, k -> new ArrayDeque<>()).addLast(leased);
                    }
                } else {
                    leased.close();
                }
            }
        });
        return peer;
    }

    /**
     * A connected pair: a local queue pair and its peer queue pair.
     *
     * @param qp the local queue pair
     * @param peerQp the peer's queue pair
     * @param peer the peer that owns {@code peerQp}
     */
    protected record Link(QueuePair qp, PeerQueuePair peerQp, PeerSide peer) {
        /** The peer QP's number, which names it in peer calls. */
        int peerQpn() {
            return peerQp.queuePairNumber();
        }
    }

    /** Default creation attributes for this device (inline limited to what the device allows). */
    protected static QueuePairSpec spec(LocalEnd local) {
        return QueuePairSpec.defaults(Math.min(64, local.attributes().maxInlineData()));
    }

    /** Connects a local and a peer queue pair with default attributes on both sides. */
    protected final Link connect(LocalEnd local, PeerSide peer) {
        return connect(local, peer, spec(local), ConnectionSpec.defaults(), spec(local), ConnectionSpec.defaults());
    }

    /** Creates and connects a local and a peer queue pair, driving both ends concurrently. */
    protected final Link connect(LocalEnd local, PeerSide peer, QueuePairSpec localSpec, ConnectionSpec localConnection,
                                 QueuePairSpec peerSpec, ConnectionSpec peerConnection) {
        return connectMany(local, peer, 1, localSpec, localConnection, peerSpec, peerConnection).getFirst();
    }

    /** Creates and connects {@code count} pairs; the peer connects its ends in a background thread. */
    protected final List<Link> connectMany(LocalEnd local, PeerSide peer, int count, QueuePairSpec localSpec,
                                           ConnectionSpec localConnection, QueuePairSpec peerSpec,
                                           ConnectionSpec peerConnection) {
        List<Link> links = new ArrayList<>(count);
        for (int i = 0; i < count; i++) {
            links.add(new Link(local.queuePair(localSpec), peer.createQueuePair(peerSpec), peer));
        }
        // tcp-like providers may complete RTR only when both ends take part, so the ends connect concurrently.
        Future<?> peerSide = BACKGROUND.submit(() -> {
            for (Link link : links) {
                peer.connect(link.peerQpn(), link.qp().localEndpoint(), peerConnection);
            }
        });
        Throwable localFailure = null;
        try {
            for (Link link : links) {
                InProcessPeer.connect(link.qp(), link.peerQp().endpoint(), localConnection);
            }
        } catch (RuntimeException | Error e) {
            localFailure = e;
        }
        try {
            peerSide.get(60, TimeUnit.SECONDS);
        } catch (Exception e) {
            peerSide.cancel(true);
            AssertionError error = new AssertionError("connecting the peer's queue pairs failed: " + e, e);
            if (localFailure != null) {
                error.addSuppressed(localFailure);
            }
            throw error;
        }
        if (localFailure instanceof RuntimeException r) {
            throw r;
        }
        if (localFailure instanceof Error r) {
            throw r;
        }
        return links;
    }

    // =============================================================================================== helpers

    /** Waits for exactly {@code count} completions of a local queue pair. */
    protected static List<Completion> awaitLocal(LocalEnd local, QueuePair qp, int count) {
        List<Completion> done = local.await(qp, count, WAIT_NS);
        assertEquals(count, done.size(), () -> "expected " + count + " completions on the local QP within 10 s, got "
            + done);
        return done;
    }

    /** Waits for one completion of a local queue pair. */
    protected static Completion awaitLocal(LocalEnd local, QueuePair qp) {
        return awaitLocal(local, qp, 1).getFirst();
    }

    /** Waits for exactly {@code count} completions of the peer's queue pair. */
    protected static List<Completion> awaitPeer(Link link, int count) {
        List<Completion> done = link.peer().poll(link.peerQpn(), count, WAIT_NS);
        assertEquals(count, done.size(), () -> "expected " + count + " completions on the peer QP within 10 s, got "
            + done);
        return done;
    }

    /** Waits for one completion of the peer's queue pair. */
    protected static Completion awaitPeer(Link link) {
        return awaitPeer(link, 1).getFirst();
    }

    /** Asserts that no completion of the local queue pair shows up for a short while. */
    protected static void assertNoLocalCompletion(LocalEnd local, QueuePair qp) {
        List<Completion> extra = local.await(qp, 1, QUIET_NS);
        assertTrue(extra.isEmpty(), () -> "unexpected completion on the local QP: " + extra);
    }

    /** Asserts a completion's identity, status and (for successes) opcode. */
    protected static void assertCompletion(Completion c, long wrId, WorkCompletionStatus status,
                                           WorkCompletionOpcode opcode) {
        assertEquals(wrId, c.wrId(), () -> "wr_id of " + c);
        assertEquals(status, c.status(), () -> "status of " + c);
        if (status == WorkCompletionStatus.SUCCESS) {
            assertEquals(opcode, c.opcode(), () -> "opcode of " + c);
        }
    }

    /**
     * A QP whose error completion was polled is in ERR already (ibv_poll_cq(3): once a completion with an error is
     * generated the QP is in the error state; a program that queries it after the completion must not see RTS).
     */
    protected static void assertErrorOnceCompleted(String what, QueuePair qp) {
        assertEquals(QueuePairState.ERROR, qp.state(), what + ": state when its error completion was polled");
    }

    /** Waits up to {@link #WAIT_NS} for a state reported by {@code state}. */
    protected static void awaitState(String what, QueuePairState expected, Supplier<QueuePairState> state) {
        long deadline = System.nanoTime() + WAIT_NS;
        QueuePairState current = state.get();
        while (current != expected && System.nanoTime() - deadline < 0) {
            sleepMillis(5);
            current = state.get();
        }
        assertEquals(expected, current, what + " state after 10 s");
    }

    private static void sleepMillis(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionError("interrupted", e);
        }
    }

    /** A send request with one local entry (or none when {@code length} is 0 and {@code region} null). */
    protected static SendWorkRequest send(long wrId, SendOpcode opcode, int flags, MemoryRegion region, long offset,
                                          int length) {
        SendWorkRequest request = new SendWorkRequest().wrId(wrId).opcode(opcode).flags(flags);
        return region == null ? request.noData() : request.local(region, offset, length);
    }

    /** Writes bytes into a local region. */
    protected static void put(MemoryRegion region, long offset, byte[] data) {
        MemorySegment.copy(data, 0, region.segment(), ValueLayout.JAVA_BYTE, offset, data.length);
    }

    /** Reads bytes of a local region. */
    protected static byte[] get(MemoryRegion region, long offset, int length) {
        byte[] out = new byte[length];
        MemorySegment.copy(region.segment(), ValueLayout.JAVA_BYTE, offset, out, 0, length);
        return out;
    }

    /** A 64-bit value in host byte order, as atomics see memory. */
    protected static byte[] hostLong(long value) {
        return ByteBuffer.allocate(8).order(ByteOrder.nativeOrder()).putLong(value).array();
    }

    /** Reads a 64-bit host-order value from bytes. */
    protected static long hostLong(byte[] bytes) {
        return ByteBuffer.wrap(bytes).order(ByteOrder.nativeOrder()).getLong();
    }

    private static int mask(AccessFlag... flags) {
        return AccessFlag.toMask(flags);
    }

    private static final int ALL_REMOTE = mask(AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE,
        AccessFlag.REMOTE_READ, AccessFlag.REMOTE_ATOMIC);

    private static void assumeAtomics(LocalEnd local) {
        assumeTrue(local.attributes().atomicCapability() != AtomicCapability.ATOMIC_NONE,
            "device reports no atomic support");
    }

    // =============================================================================================== device

    @Test
    void shouldFindTheDeviceAndReportSaneAttributes() {
        Device device = Verbs.device(deviceName());
        assertTrue(Verbs.devices().stream().anyMatch(d -> d.name().equals(device.name())),
            "Verbs.devices() lists the device");
        assertFalse(device.name().isBlank(), "device name");
        assertFalse(device.providerName().isBlank(), "provider name");
        try (Context context = device.open()) {
            DeviceAttributes a = context.query();
            assertEquals(device.name(), context.device().name());
            assertEquals(device.name(), a.deviceName(), "hca_id");
            assertEquals(device.providerName(), a.providerName());
            assertEquals(device.guid(), a.nodeGuid(), "node_guid matches the device's GUID");
            assertNotNull(a.transport(), "transport");
            assertNotNull(a.firmwareVersion(), "fw_ver");
            assertTrue(a.maxMemoryRegionSize() >= 1 << 20, "max_mr_size >= 1 MiB: " + a.maxMemoryRegionSize());
            assertNotEquals(0, a.pageSizeCapability(), "page_size_cap");
            assertTrue(a.maxQueuePairs() >= 64, "max_qp >= 64: " + a.maxQueuePairs());
            assertTrue(a.maxQueuePairWorkRequests() >= 64, "max_qp_wr >= 64: " + a.maxQueuePairWorkRequests());
            assertTrue(a.maxSge() >= 4, "max_sge >= 4: " + a.maxSge());
            assertTrue(a.maxCompletionQueues() >= 1, "max_cq");
            assertTrue(a.maxCompletionQueueEntries() >= 1024, "max_cqe >= 1024: " + a.maxCompletionQueueEntries());
            assertTrue(a.maxMemoryRegions() >= 128, "max_mr >= 128: " + a.maxMemoryRegions());
            assertTrue(a.maxProtectionDomains() >= 1, "max_pd");
            assertTrue(a.maxInlineData() >= 0, "max_inline_data");
            assertNotNull(a.atomicCapability(), "atomic_cap");
            if (a.atomicCapability() != AtomicCapability.ATOMIC_NONE) {
                assertTrue(a.maxQueuePairReadAtomic() >= 1, "max_qp_rd_atom");
                assertTrue(a.maxQueuePairInitiatorReadAtomic() >= 1, "max_qp_init_rd_atom");
            }
            assertFalse(a.ports().isEmpty(), "phys_port_cnt >= 1");
            PortAttributes port = a.ports().getFirst();
            assertEquals(1, port.portNumber(), "ports are numbered from 1");
            assertEquals(PortState.ACTIVE, port.state(), "port 1 state");
            assertNotNull(port.activeMtu(), "active_mtu");
            assertTrue(port.activeMtu().bytes() <= port.maxMtu().bytes(), "active_mtu <= max_mtu");
            assertFalse(port.linkLayer() == null || port.linkLayer().isBlank(), "link_layer");
            assertNotNull(port.gid(), "GID");
            assertTrue(a.maxMessageSize() >= 1 << 20, "max_msg_sz >= 1 MiB: " + a.maxMessageSize());
            assertEquals(a, context.query(), "query is stable");
            assertNotNull(context.counters(), "counters");
        }
    }

    @Test
    void shouldRefuseHeapMemoryRegistration() {
        LocalEnd local = openLocal();
        VerbsException e = assertThrows(VerbsException.class,
            () -> local.domain().registerMemory(MemorySegment.ofArray(new byte[4096]), AccessFlag.LOCAL_WRITE));
        String message = String.valueOf(e.getMessage());
        assertTrue(message.toLowerCase(Locale.ROOT).contains("heap") || message.contains("allocateMemory"),
            "the message should say heap memory cannot be registered and point at allocateMemory: " + message);
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment offHeap = arena.allocate(4096, 4096);
            try (MemoryRegion region = local.domain().registerMemory(offHeap, AccessFlag.LOCAL_WRITE)) {
                assertEquals(offHeap.address(), region.address(), "a registered segment keeps its address");
                assertEquals(4096, region.length());
                assertTrue(region.isValid());
            }
        }
    }

    @Test
    void shouldRefuseRemoteWriteOrAtomicWithoutLocalWrite() {
        LocalEnd local = openLocal();
        // InfiniBand spec o10-9 / ibv_reg_mr(3): REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE (EINVAL).
        assertThrows(VerbsException.class, () -> local.region(4096, AccessFlag.REMOTE_WRITE));
        assertThrows(VerbsException.class, () -> local.region(4096, AccessFlag.REMOTE_ATOMIC, AccessFlag.REMOTE_READ));
        try (MemoryRegion ok = local.region(4096, AccessFlag.REMOTE_READ)) {
            assertEquals(AccessFlag.REMOTE_READ.bit(), ok.access(), "access mask as registered");
        }
    }

    @Test
    void shouldDrawUnpredictableKeysQueuePairNumbersAndPsns() {
        LocalEnd local = openLocal();
        int n = 100;
        int[] rkeys = new int[n];
        int[] lkeys = new int[n];
        for (int i = 0; i < n; i++) {
            MemoryRegion region = local.region(64, AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE);
            rkeys[i] = region.rkey();
            lkeys[i] = region.lkey();
        }
        int qps = Math.min(64, local.attributes().maxQueuePairs());
        int[] qpns = new int[qps];
        int[] psns = new int[qps];
        for (int i = 0; i < qps; i++) {
            QueuePair qp = local.queuePair(spec(local).withDepths(1, 1));
            qpns[i] = qp.queuePairNumber();
            psns[i] = qp.initialPsn();
            assertEquals(qpns[i], qpns[i] & 0xFFFFFF, "QPN is a 24-bit value");
            assertEquals(psns[i], psns[i] & 0xFFFFFF, "PSN is a 24-bit value");
        }
        // ReDMArk (USENIX Security '21) V1/V5/V6: sequential or constant-stride keys, QPNs and PSNs are guessable.
        assertUnpredictable("rkeys", rkeys);
        assertUnpredictable("lkeys", lkeys);
        assertUnpredictable("QP numbers", qpns);
        assertUnpredictable("initial PSNs", psns);
    }

    private static void assertUnpredictable(String what, int[] values) {
        assertEquals(values.length, Arrays.stream(values).distinct().count(), what + " are unique");
        Set<Integer> strides = new HashSet<>();
        for (int i = 1; i < values.length; i++) {
            strides.add(values[i] - values[i - 1]);
        }
        assertTrue(strides.size() >= (values.length - 1) * 9 / 10,
            what + ": consecutive values must not differ by a constant (only " + strides.size() + " distinct strides"
                + " among " + (values.length - 1) + "): " + Arrays.toString(values));
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldPollWithoutBlockingAndHonourTheTimeout(PeerMode mode) {
        LocalEnd local = openLocal();
        PeerSide peer = peer(mode);
        CompletionQueue raw = local.context().createCompletionQueue(64);
        assertTrue(raw.capacity() >= 64, "capacity holds at least what was asked");
        WorkCompletion[] out = WorkCompletion.array(4);
        assertEquals(0, raw.poll(out, 4), "an empty queue polls 0 at once");
        long start = System.nanoTime();
        assertEquals(0, raw.poll(out, 4, TimeUnit.MILLISECONDS.toNanos(50)), "nothing arrives on an idle queue");
        long waitedNs = System.nanoTime() - start;
        assertTrue(waitedNs >= TimeUnit.MILLISECONDS.toNanos(25), "poll with a 50 ms timeout returned after "
            + waitedNs / 1000 + " µs");

        // A queue pair whose completions nobody else polls: the timed poll alone must drive progress.
        QueuePair qp = local.domain().createQueuePair(new QueuePairInitAttributes(raw, raw, 16, 16, 4, 4, 0, false));
        PeerQueuePair peerQp = peer.createQueuePair(spec(local));
        Future<?> peerConnect = BACKGROUND.submit(() -> peer.connect(peerQp.queuePairNumber(), qp.localEndpoint(),
            ConnectionSpec.defaults()));
        InProcessPeer.connect(qp, peerQp.endpoint(), ConnectionSpec.defaults());
        join(peerConnect);
        PeerRegion target = peer.allocate(4096, ALL_REMOTE);
        MemoryRegion source = local.region(4096);
        for (int i = 0; i < 3; i++) {
            qp.postSend(send(i, SendOpcode.RDMA_WRITE, SendFlag.SIGNALED, source, 0, 128)
                .remote(target.address() + 128L * i, target.rkey()));
        }
        List<Completion> done = new ArrayList<>();
        long deadline = System.nanoTime() + WAIT_NS;
        while (done.size() < 3 && System.nanoTime() - deadline < 0) {
            int n = raw.poll(out, 2, TimeUnit.SECONDS.toNanos(1));
            assertTrue(n <= 2, "poll returned " + n + " completions with max 2");
            for (int i = 0; i < n; i++) {
                done.add(Completion.of(out[i]));
            }
        }
        assertEquals(3, done.size(), "three signaled writes complete: " + done);
        for (int i = 0; i < 3; i++) {
            assertCompletion(done.get(i), i, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RDMA_WRITE);
            assertEquals(qp.queuePairNumber(), done.get(i).queuePairNumber(), "qp_num of the completion");
        }
        assertEquals(0, raw.poll(out, 4), "nothing left");
        qp.close();
        raw.close();
    }

    private static void join(Future<?> future) {
        try {
            future.get(60, TimeUnit.SECONDS);
        } catch (TimeoutException e) {
            future.cancel(true);
            throw new AssertionError("background step did not finish within 60 s", e);
        } catch (Exception e) {
            throw new AssertionError("background step failed: " + e, e);
        }
    }

    // =============================================================================================== QP states

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldRejectInvalidTransitionsAndKeepTheState(PeerMode mode) {
        LocalEnd local = openLocal();
        PeerSide peer = peer(mode);
        QueuePair qp = local.queuePair(spec(local));
        PeerQueuePair peerQp = peer.createQueuePair(spec(local));
        Future<?> peerConnect = BACKGROUND.submit(() -> peer.connect(peerQp.queuePairNumber(), qp.localEndpoint(),
            ConnectionSpec.defaults()));
        var remote = peerQp.endpoint();

        assertEquals(QueuePairState.RESET, qp.state(), "a new QP is in RESET");
        assertRejected(qp, QueuePairAttributes.toReadyToReceive(remote), "RESET -> RTR skips INIT");
        assertRejected(qp, QueuePairAttributes.toReadyToSend(qp.initialPsn()), "RESET -> RTS skips INIT and RTR");
        assertRejected(qp, new QueuePairAttributes().state(QueuePairState.INIT).pkeyIndex(0).port(1),
            "RESET -> INIT without ACCESS_FLAGS");
        assertRejected(qp, QueuePairAttributes.toInit().sqPsn(5), "RESET -> INIT with SQ_PSN, which it does not allow");
        assertRejected(qp, QueuePairAttributes.toInit().port(local.attributes().ports().size() + 1),
            "RESET -> INIT on a port that does not exist");
        assertRejected(qp, QueuePairAttributes.toInit().accessFlags(0x100), "RESET -> INIT with unknown access bits");

        qp.modify(QueuePairAttributes.toInit().accessFlags(ConnectionSpec.defaults().accessFlags()));
        assertEquals(QueuePairState.INIT, qp.state());
        assertRejected(qp, QueuePairAttributes.toReadyToSend(qp.initialPsn()), "INIT -> RTS skips RTR");
        assertRejected(qp, QueuePairAttributes.toReadyToReceive(remote).qkey(0x11), "RTR with Q_Key (UD only)");
        assertRejected(qp, QueuePairAttributes.toReadyToReceive(remote).minRnrTimer(32), "min_rnr_timer 32 > 31");
        assertRejected(qp, new QueuePairAttributes().state(QueuePairState.READY_TO_RECEIVE).remote(remote),
            "INIT -> RTR without DEST_QPN, RQ_PSN, PATH_MTU, ...");

        qp.modify(QueuePairAttributes.toReadyToReceive(remote));
        assertEquals(QueuePairState.READY_TO_RECEIVE, qp.state());
        assertRejected(qp, QueuePairAttributes.toReadyToSend(qp.initialPsn()).retryCount(8), "retry_cnt 8 > 7");
        assertRejected(qp, QueuePairAttributes.toReadyToSend(qp.initialPsn()).rnrRetry(8), "rnr_retry 8 > 7");
        assertRejected(qp, QueuePairAttributes.toReadyToSend(0x1000000), "sq_psn wider than 24 bits");
        assertRejected(qp, new QueuePairAttributes().state(QueuePairState.READY_TO_SEND).sqPsn(1),
            "RTR -> RTS without TIMEOUT, RETRY_CNT, RNR_RETRY, MAX_QP_RD_ATOMIC");

        qp.modify(QueuePairAttributes.toReadyToSend(qp.initialPsn()));
        assertEquals(QueuePairState.READY_TO_SEND, qp.state());
        assertRejected(qp, QueuePairAttributes.toInit(), "RTS -> INIT");
        assertRejected(qp, QueuePairAttributes.toReadyToReceive(remote), "RTS -> RTR");
        assertRejected(qp, new QueuePairAttributes().currentState(QueuePairState.INIT),
            "cur_qp_state that is not the QP's state");
        assertRejected(qp, new QueuePairAttributes().state(QueuePairState.READY_TO_SEND).pathMtu(
            PathMtu.MTU_1024), "RTS -> RTS with PATH_MTU, which it does not allow");
        qp.modify(new QueuePairAttributes().state(QueuePairState.READY_TO_SEND).minRnrTimer(2));
        assertEquals(QueuePairState.READY_TO_SEND, qp.state(), "RTS -> RTS with MIN_RNR_TIMER is allowed");
        join(peerConnect);

        qp.modify(new QueuePairAttributes().state(QueuePairState.ERROR));
        assertEquals(QueuePairState.ERROR, qp.state());
        assertRejected(qp, new QueuePairAttributes().state(QueuePairState.READY_TO_SEND), "ERR -> RTS");
        qp.modify(new QueuePairAttributes().state(QueuePairState.RESET));
        assertEquals(QueuePairState.RESET, qp.state(), "ERR -> RESET is allowed");
        qp.modify(QueuePairAttributes.toInit());
        assertEquals(QueuePairState.INIT, qp.state(), "a reset QP can be initialised again");
    }

    private static void assertRejected(QueuePair qp, QueuePairAttributes attributes, String why) {
        QueuePairState before = qp.state();
        assertThrows(VerbsException.class, () -> qp.modify(attributes), "ibv_modify_qp must refuse: " + why);
        assertEquals(before, qp.state(), "a refused modify changes nothing: " + why);
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldHoldNewSendsWhileTheSendQueueIsDrained(PeerMode mode) {
        LocalEnd local = openLocal();
        Link link = connect(local, peer(mode));
        PeerRegion target = link.peer().allocate(4096, ALL_REMOTE);
        MemoryRegion buffer = local.region(4096, AccessFlag.LOCAL_WRITE);
        Patterns.fill(buffer.segment(), 0, 64, 95);
        link.qp().modify(new QueuePairAttributes().state(QueuePairState.SEND_QUEUE_DRAINED));
        assertEquals(QueuePairState.SEND_QUEUE_DRAINED, link.qp().state(), "RTS -> SQD");
        // QueuePairState.SEND_QUEUE_DRAINED: "new sends are queued but not started" (rxe_req.c stops at SQD).
        link.qp().postSend(send(1, SendOpcode.RDMA_WRITE, SendFlag.SIGNALED, buffer, 0, 64)
            .remote(target.address(), target.rkey()));
        assertNoLocalCompletion(local, link.qp());
        assertArrayEquals(new byte[64], link.peer().read(target.id(), 0, 64), "a send posted in SQD did not start");
        // The receive side keeps working while the send queue is drained.
        link.qp().postReceive(new ReceiveWorkRequest().wrId(100).local(buffer, 1024, 64));
        link.peer().postSend(link.peerQpn(), PeerSend.of(7, SendOpcode.SEND, SendFlag.SIGNALED, 0, 0,
            List.of(new PeerSge(target.id(), 2048, 16))));
        assertCompletion(awaitLocal(local, link.qp()), 100, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV);
        assertCompletion(awaitPeer(link), 7, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.SEND);

        link.qp().modify(new QueuePairAttributes().state(QueuePairState.READY_TO_SEND));
        assertCompletion(awaitLocal(local, link.qp()), 1, WorkCompletionStatus.SUCCESS,
            WorkCompletionOpcode.RDMA_WRITE);
        assertEquals(-1, link.peer().firstPatternMismatch(target.id(), 0, 64, 95),
            "the held WRITE ran after SQD -> RTS");
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldRefusePostingInStatesThatDoNotAllowIt(PeerMode mode) {
        LocalEnd local = openLocal();
        PeerSide peer = peer(mode);
        QueuePair qp = local.queuePair(spec(local));
        PeerQueuePair peerQp = peer.createQueuePair(spec(local));
        Future<?> peerConnect = BACKGROUND.submit(() -> peer.connect(peerQp.queuePairNumber(), qp.localEndpoint(),
            ConnectionSpec.defaults()));
        MemoryRegion buffer = local.region(4096, AccessFlag.LOCAL_WRITE);
        SendWorkRequest sendRequest = send(1, SendOpcode.SEND, SendFlag.SIGNALED, buffer, 0, 16);
        ReceiveWorkRequest receiveRequest = new ReceiveWorkRequest().wrId(2).local(buffer, 1024, 64);

        assertThrows(VerbsException.class, () -> qp.postReceive(receiveRequest), "ibv_post_recv in RESET");
        assertThrows(VerbsException.class, () -> qp.postSend(sendRequest), "ibv_post_send in RESET");
        assertEquals(QueuePairState.RESET, qp.state());

        qp.modify(QueuePairAttributes.toInit());
        assertThrows(VerbsException.class, () -> qp.postSend(sendRequest), "ibv_post_send in INIT");
        qp.postReceive(receiveRequest); // receives may be posted from INIT on
        assertEquals(QueuePairState.INIT, qp.state());

        qp.modify(QueuePairAttributes.toReadyToReceive(peerQp.endpoint()));
        assertThrows(VerbsException.class, () -> qp.postSend(sendRequest), "ibv_post_send in RTR");
        assertEquals(QueuePairState.READY_TO_RECEIVE, qp.state());
        qp.modify(QueuePairAttributes.toReadyToSend(qp.initialPsn()));
        join(peerConnect);
        assertNoLocalCompletion(local, qp);
    }

    @Test
    void shouldFlushPostedReceivesWhenModifiedToError() {
        LocalEnd local = openLocal();
        QueuePair qp = local.queuePair(spec(local));
        MemoryRegion buffer = local.region(4096, AccessFlag.LOCAL_WRITE);
        qp.modify(QueuePairAttributes.toInit());
        for (int i = 1; i <= 3; i++) {
            qp.postReceive(new ReceiveWorkRequest().wrId(i).local(buffer, 64L * i, 64));
        }
        assertNoLocalCompletion(local, qp);
        qp.modify(new QueuePairAttributes().state(QueuePairState.ERROR));
        assertEquals(QueuePairState.ERROR, qp.state());
        List<Completion> flushed = awaitLocal(local, qp, 3);
        for (int i = 0; i < 3; i++) {
            assertCompletion(flushed.get(i), i + 1, WorkCompletionStatus.WR_FLUSH_ERR, null);
            assertEquals(qp.queuePairNumber(), flushed.get(i).queuePairNumber(), "qp_num of a flushed receive");
        }
        // Posting to a QP in ERR is allowed and completes at once with a flush error, even unsignaled.
        qp.postReceive(new ReceiveWorkRequest().wrId(4).local(buffer, 0, 64));
        assertCompletion(awaitLocal(local, qp), 4, WorkCompletionStatus.WR_FLUSH_ERR, null);
        qp.postSend(send(5, SendOpcode.SEND, 0, buffer, 0, 64));
        assertCompletion(awaitLocal(local, qp), 5, WorkCompletionStatus.WR_FLUSH_ERR, null);
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldReportConnectionAttributesInQuery(PeerMode mode) {
        LocalEnd local = openLocal();
        PeerSide peer = peer(mode);
        int access = mask(AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ);
        ConnectionSpec connection = new ConnectionSpec(access, 5, 3, 6, 12);
        Link link = connect(local, peer, spec(local), connection, spec(local), ConnectionSpec.defaults());
        QueuePairAttributes a = link.qp().query();
        assertEquals(QueuePairState.READY_TO_SEND, a.state());
        assertEquals(access, a.accessFlags(), "qp_access_flags");
        assertEquals(5, a.minRnrTimer(), "min_rnr_timer");
        assertEquals(3, a.rnrRetry(), "rnr_retry");
        assertEquals(6, a.retryCount(), "retry_cnt");
        assertEquals(12, a.timeout(), "timeout");
        assertEquals(link.peerQpn(), a.destQpNumber(), "dest_qp_num");
        assertEquals(link.peerQp().endpoint().packetSequenceNumber(), a.rqPsn(), "rq_psn");
        assertEquals(link.qp().initialPsn(), a.sqPsn(), "sq_psn");
        assertEquals(QueuePairState.READY_TO_SEND, peer.state(link.peerQpn()), "peer QP state");
        assertEquals(local.domain(), link.qp().protectionDomain());
    }

    // =============================================================================================== opcodes

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldDeliverSendAndSendWithImmediate(PeerMode mode) {
        LocalEnd local = openLocal();
        Link link = connect(local, peer(mode));
        long ourPid = ProcessHandle.current().pid();
        if (mode == PeerMode.IN_PROCESS) {
            assertEquals(ourPid, link.peer().processId(), "an in-process peer lives in this JVM");
        } else {
            assertNotEquals(ourPid, link.peer().processId(), "a separate-JVM peer lives in another process");
        }
        PeerRegion inbox = link.peer().allocate(4096, mask(AccessFlag.LOCAL_WRITE));
        link.peer().postReceive(link.peerQpn(), 11, List.of(new PeerSge(inbox.id(), 0, 256)));
        link.peer().postReceive(link.peerQpn(), 12, List.of(new PeerSge(inbox.id(), 256, 256)));
        MemoryRegion source = local.region(4096); // sending needs no access right on the source
        byte[] first = Patterns.bytes(1, 100);
        byte[] second = Patterns.bytes(2, 200);
        put(source, 0, first);
        put(source, 1024, second);
        link.qp().postSend(send(1, SendOpcode.SEND, SendFlag.SIGNALED, source, 0, 100));
        link.qp().postSend(send(2, SendOpcode.SEND_WITH_IMM, SendFlag.SIGNALED, source, 1024, 200)
            .immediateData(0xCAFEBABE));

        List<Completion> sent = awaitLocal(local, link.qp(), 2);
        assertCompletion(sent.get(0), 1, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.SEND);
        assertCompletion(sent.get(1), 2, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.SEND);
        assertEquals(link.qp().queuePairNumber(), sent.get(0).queuePairNumber(), "qp_num of a send completion");

        List<Completion> received = awaitPeer(link, 2);
        Completion plain = received.get(0);
        assertCompletion(plain, 11, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV);
        assertEquals(100, plain.byteLength(), "byte_len of the SEND");
        assertFalse(plain.withImmediate(), "a SEND carries no immediate");
        assertEquals(link.qp().queuePairNumber(), plain.sourceQueuePairNumber(), "src_qp of the receive");
        assertEquals(link.peerQpn(), plain.queuePairNumber(), "qp_num of the receive");
        Completion withImm = received.get(1);
        assertCompletion(withImm, 12, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV);
        assertEquals(200, withImm.byteLength(), "byte_len of the SEND_WITH_IMM");
        assertTrue(withImm.withImmediate(), "IBV_WC_WITH_IMM");
        assertEquals(0xCAFEBABE, withImm.immediateData(), "imm_data");
        assertArrayEquals(first, link.peer().read(inbox.id(), 0, 100));
        assertArrayEquals(second, link.peer().read(inbox.id(), 256, 200));
        assertArrayEquals(new byte[156], link.peer().read(inbox.id(), 100, 156), "bytes past the message untouched");
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldWriteRemoteMemoryWithoutConsumingAReceive(PeerMode mode) {
        LocalEnd local = openLocal();
        Link link = connect(local, peer(mode));
        PeerRegion target = link.peer().allocate(4096, mask(AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE));
        PeerRegion inbox = link.peer().allocate(64, mask(AccessFlag.LOCAL_WRITE));
        link.peer().postReceive(link.peerQpn(), 21, List.of(new PeerSge(inbox.id(), 0, 64)));
        MemoryRegion source = local.region(4096);
        byte[] data = Patterns.bytes(12, 300);
        put(source, 0, data);
        link.qp().postSend(send(1, SendOpcode.RDMA_WRITE, SendFlag.SIGNALED, source, 0, 300)
            .remote(target.address() + 100, target.rkey()));
        assertCompletion(awaitLocal(local, link.qp()), 1, WorkCompletionStatus.SUCCESS,
            WorkCompletionOpcode.RDMA_WRITE);
        assertArrayEquals(data, link.peer().read(target.id(), 100, 300), "written bytes");
        assertArrayEquals(new byte[100], link.peer().read(target.id(), 0, 100), "bytes before untouched");
        assertArrayEquals(new byte[100], link.peer().read(target.id(), 400, 100), "bytes after untouched");

        link.qp().postSend(send(2, SendOpcode.SEND, SendFlag.SIGNALED, source, 0, 8));
        assertCompletion(awaitLocal(local, link.qp()), 2, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.SEND);
        Completion received = awaitPeer(link);
        assertCompletion(received, 21, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV);
        assertEquals(8, received.byteLength(), "the receive was still there for the SEND after the WRITE");
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldWriteWithImmediateAndConsumeAReceive(PeerMode mode) {
        LocalEnd local = openLocal();
        Link link = connect(local, peer(mode));
        PeerRegion target = link.peer().allocate(4096, mask(AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE));
        link.peer().postReceive(link.peerQpn(), 31, List.of()); // WRITE_WITH_IMM needs no receive buffer
        MemoryRegion source = local.region(4096);
        byte[] data = Patterns.bytes(13, 512);
        put(source, 0, data);
        link.qp().postSend(send(1, SendOpcode.RDMA_WRITE_WITH_IMM, SendFlag.SIGNALED, source, 0, 512)
            .remote(target.address() + 1024, target.rkey()).immediateData(0x12345678));
        assertCompletion(awaitLocal(local, link.qp()), 1, WorkCompletionStatus.SUCCESS,
            WorkCompletionOpcode.RDMA_WRITE);
        Completion received = awaitPeer(link);
        assertCompletion(received, 31, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV_RDMA_WITH_IMM);
        assertTrue(received.withImmediate(), "IBV_WC_WITH_IMM");
        assertEquals(0x12345678, received.immediateData(), "imm_data");
        // rxe_resp.c do_complete(): for RDMA WRITE with immediate, byte_len is the length written.
        assertEquals(512, received.byteLength(), "byte_len of RECV_RDMA_WITH_IMM");
        assertEquals(link.qp().queuePairNumber(), received.sourceQueuePairNumber(), "src_qp");
        assertArrayEquals(data, link.peer().read(target.id(), 1024, 512));
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldReadRemoteMemory(PeerMode mode) {
        LocalEnd local = openLocal();
        Link link = connect(local, peer(mode));
        PeerRegion source = link.peer().allocate(4096, mask(AccessFlag.REMOTE_READ));
        link.peer().fillPattern(source.id(), 0, 3000, 14);
        MemoryRegion sink = local.region(4096, AccessFlag.LOCAL_WRITE);
        link.qp().postSend(send(1, SendOpcode.RDMA_READ, SendFlag.SIGNALED, sink, 50, 3000)
            .remote(source.address(), source.rkey()));
        Completion c = awaitLocal(local, link.qp());
        assertCompletion(c, 1, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RDMA_READ);
        assertEquals(3000, c.byteLength(), "byte_len of an RDMA READ");
        assertEquals(-1, Patterns.firstMismatch(sink.segment(), 50, 3000, 14), "read bytes");
        assertArrayEquals(new byte[50], get(sink, 0, 50), "bytes before the READ's target untouched");
        assertArrayEquals(new byte[100], get(sink, 3050, 100), "bytes after the READ's target untouched");
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldCompareAndSwap(PeerMode mode) {
        LocalEnd local = openLocal();
        assumeAtomics(local);
        Link link = connect(local, peer(mode));
        PeerRegion target = link.peer().allocate(64, mask(AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_ATOMIC));
        link.peer().write(target.id(), 8, hostLong(0x1111));
        MemoryRegion result = local.region(64, AccessFlag.LOCAL_WRITE);
        // Atomics act on the 64-bit value in the responder's host byte order, as a CPU atomic on that memory would.
        link.qp().postSend(send(1, SendOpcode.ATOMIC_CMP_AND_SWP, SendFlag.SIGNALED, result, 0, 8)
            .remote(target.address() + 8, target.rkey()).atomic(0x1111, 0x2222));
        link.qp().postSend(send(2, SendOpcode.ATOMIC_CMP_AND_SWP, SendFlag.SIGNALED, result, 8, 8)
            .remote(target.address() + 8, target.rkey()).atomic(0x1111, 0x3333));
        List<Completion> done = awaitLocal(local, link.qp(), 2);
        assertCompletion(done.get(0), 1, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.COMP_SWAP);
        assertCompletion(done.get(1), 2, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.COMP_SWAP);
        assertEquals(8, done.get(0).byteLength(), "byte_len of an atomic");
        assertEquals(0x1111, result.segment().get(HOST_LONG, 0), "a successful CAS returns the original value");
        assertEquals(0x2222, result.segment().get(HOST_LONG, 8), "a failed CAS returns the current value");
        assertEquals(0x2222, hostLong(link.peer().read(target.id(), 8, 8)), "swapped once, not twice");
        assertArrayEquals(new byte[8], link.peer().read(target.id(), 0, 8), "neighbouring bytes untouched");
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldFetchAndAdd(PeerMode mode) {
        LocalEnd local = openLocal();
        assumeAtomics(local);
        Link link = connect(local, peer(mode));
        PeerRegion target = link.peer().allocate(64, mask(AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_ATOMIC));
        link.peer().write(target.id(), 16, hostLong(40));
        MemoryRegion result = local.region(64, AccessFlag.LOCAL_WRITE);
        link.qp().postSend(send(1, SendOpcode.ATOMIC_FETCH_AND_ADD, SendFlag.SIGNALED, result, 0, 8)
            .remote(target.address() + 16, target.rkey()).atomic(2, 0));
        link.qp().postSend(send(2, SendOpcode.ATOMIC_FETCH_AND_ADD, SendFlag.SIGNALED, result, 8, 8)
            .remote(target.address() + 16, target.rkey()).atomic(-50, 0));
        List<Completion> done = awaitLocal(local, link.qp(), 2);
        assertCompletion(done.get(0), 1, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.FETCH_ADD);
        assertCompletion(done.get(1), 2, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.FETCH_ADD);
        assertEquals(40, result.segment().get(HOST_LONG, 0), "original value of the first add");
        assertEquals(42, result.segment().get(HOST_LONG, 8), "original value of the second add");
        assertEquals(-8, hostLong(link.peer().read(target.id(), 16, 8)), "40 + 2 - 50");
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldRejectMalformedAtomicsAtPost(PeerMode mode) {
        LocalEnd local = openLocal();
        assumeAtomics(local);
        Link link = connect(local, peer(mode));
        PeerRegion target = link.peer().allocate(64, mask(AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_ATOMIC));
        MemoryRegion result = local.region(64, AccessFlag.LOCAL_WRITE);
        for (SendOpcode opcode : List.of(SendOpcode.ATOMIC_CMP_AND_SWP, SendOpcode.ATOMIC_FETCH_AND_ADD)) {
            VerbsException misaligned = assertThrows(VerbsException.class, () -> link.qp().postSend(
                send(1, opcode, SendFlag.SIGNALED, result, 0, 8).remote(target.address() + 4, target.rkey())),
                opcode + " on an address that is not 8-byte aligned");
            assertEquals(VerbsException.Reason.INVALID_ARGUMENT, misaligned.reason());
            assertThrows(VerbsException.class, () -> link.qp().postSend(
                send(2, opcode, SendFlag.SIGNALED, result, 0, 4).remote(target.address(), target.rkey())),
                opcode + " with a 4-byte local buffer");
        }
        assertEquals(QueuePairState.READY_TO_SEND, link.qp().state(), "a refused post leaves the QP alone");
        link.qp().postSend(send(3, SendOpcode.ATOMIC_FETCH_AND_ADD, SendFlag.SIGNALED, result, 0, 8)
            .remote(target.address() + 8, target.rkey()).atomic(1, 0));
        assertCompletion(awaitLocal(local, link.qp()), 3, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.FETCH_ADD);
    }

    // =============================================================================================== sges & flags

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldGatherAndScatterFourEntriesOnBothSides(PeerMode mode) {
        LocalEnd local = openLocal();
        Link link = connect(local, peer(mode));
        PeerSide peer = link.peer();
        MemoryRegion a = local.region(4096, AccessFlag.LOCAL_WRITE);
        MemoryRegion b = local.region(4096, AccessFlag.LOCAL_WRITE);
        Patterns.fill(a.segment(), 0, 4096, 101);
        Patterns.fill(b.segment(), 0, 4096, 102);
        // Four local pieces from two regions: 10 + 1000 + 1 + 500 = 1511 bytes.
        long[][] pieces = {{0, 0, 10}, {1, 100, 1000}, {0, 2000, 1}, {1, 3000, 500}};
        MemoryRegion[] regions = {a, b};
        byte[] message = new byte[1511];
        int at = 0;
        for (long[] p : pieces) {
            byte[] piece = get(regions[(int) p[0]], p[1], (int) p[2]);
            System.arraycopy(piece, 0, message, at, piece.length);
            at += piece.length;
        }

        // SEND gathered from four entries into a receive scattered over four entries (7 + 1000 + 300 + 300 bytes).
        PeerRegion inbox = peer.allocate(4096, mask(AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE,
            AccessFlag.REMOTE_READ));
        peer.postReceive(link.peerQpn(), 1, List.of(new PeerSge(inbox.id(), 0, 7), new PeerSge(inbox.id(), 100, 1000),
            new PeerSge(inbox.id(), 2000, 300), new PeerSge(inbox.id(), 3000, 300)));
        SendWorkRequest gathered = new SendWorkRequest(4).wrId(1).opcode(SendOpcode.SEND).flags(SendFlag.SIGNALED);
        for (int i = 0; i < 4; i++) {
            gathered.sge(i).set(regions[(int) pieces[i][0]], pieces[i][1], (int) pieces[i][2]);
        }
        gathered.setSgeCount(4);
        link.qp().postSend(gathered);
        assertCompletion(awaitLocal(local, link.qp()), 1, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.SEND);
        Completion received = awaitPeer(link);
        assertCompletion(received, 1, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV);
        assertEquals(1511, received.byteLength());
        assertArrayEquals(Arrays.copyOfRange(message, 0, 7), peer.read(inbox.id(), 0, 7), "receive entry 1");
        assertArrayEquals(Arrays.copyOfRange(message, 7, 1007), peer.read(inbox.id(), 100, 1000), "receive entry 2");
        assertArrayEquals(Arrays.copyOfRange(message, 1007, 1307), peer.read(inbox.id(), 2000, 300), "entry 3");
        assertArrayEquals(Arrays.copyOfRange(message, 1307, 1511), peer.read(inbox.id(), 3000, 204), "entry 4");
        assertArrayEquals(new byte[96], peer.read(inbox.id(), 3204, 96), "the unused tail of entry 4 is untouched");

        // RDMA WRITE gathered from four entries lands contiguously.
        PeerRegion target = peer.allocate(4096, mask(AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE,
            AccessFlag.REMOTE_READ));
        gathered.wrId(2).opcode(SendOpcode.RDMA_WRITE).remote(target.address() + 10, target.rkey());
        link.qp().postSend(gathered);
        assertCompletion(awaitLocal(local, link.qp()), 2, WorkCompletionStatus.SUCCESS,
            WorkCompletionOpcode.RDMA_WRITE);
        assertArrayEquals(message, peer.read(target.id(), 10, 1511), "gathered WRITE");

        // RDMA READ scattered into four local entries.
        MemoryRegion sink = local.region(8192, AccessFlag.LOCAL_WRITE);
        SendWorkRequest scattered = new SendWorkRequest(4).wrId(3).opcode(SendOpcode.RDMA_READ)
            .flags(SendFlag.SIGNALED).remote(target.address() + 10, target.rkey());
        int[][] sinks = {{0, 500}, {1000, 11}, {2000, 700}, {5000, 300}};
        for (int i = 0; i < 4; i++) {
            scattered.sge(i).set(sink, sinks[i][0], sinks[i][1]);
        }
        scattered.setSgeCount(4);
        link.qp().postSend(scattered);
        Completion read = awaitLocal(local, link.qp());
        assertCompletion(read, 3, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RDMA_READ);
        assertEquals(1511, read.byteLength(), "byte_len of the scattered READ");
        int from = 0;
        for (int i = 0; i < 4; i++) {
            assertArrayEquals(Arrays.copyOfRange(message, from, from + sinks[i][1]), get(sink, sinks[i][0],
                sinks[i][1]), "READ entry " + (i + 1));
            from += sinks[i][1];
        }
        assertArrayEquals(new byte[64], get(sink, 5300, 64), "nothing past the last entry");

        // And the other direction: the peer gathers four entries, this end scatters into four.
        byte[] reply = Patterns.bytes(103, 900);
        PeerRegion outbox = peer.allocate(4096, mask(AccessFlag.LOCAL_WRITE));
        peer.write(outbox.id(), 0, reply);
        MemoryRegion landing = local.region(4096, AccessFlag.LOCAL_WRITE);
        ReceiveWorkRequest receive = new ReceiveWorkRequest(4).wrId(4);
        receive.sge(0).set(landing, 0, 100);
        receive.sge(1).set(landing, 1000, 200);
        receive.sge(2).set(landing, 2000, 300);
        receive.sge(3).set(landing, 3000, 400);
        receive.setSgeCount(4);
        link.qp().postReceive(receive);
        peer.postSend(link.peerQpn(), PeerSend.of(5, SendOpcode.SEND, SendFlag.SIGNALED, 0, 0,
            List.of(new PeerSge(outbox.id(), 0, 450), new PeerSge(outbox.id(), 450, 50),
                new PeerSge(outbox.id(), 500, 1), new PeerSge(outbox.id(), 501, 399))));
        assertCompletion(awaitPeer(link), 5, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.SEND);
        Completion landed = awaitLocal(local, link.qp());
        assertCompletion(landed, 4, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV);
        assertEquals(900, landed.byteLength());
        assertEquals(link.peerQpn(), landed.sourceQueuePairNumber(), "src_qp");
        assertArrayEquals(Arrays.copyOfRange(reply, 0, 100), get(landing, 0, 100));
        assertArrayEquals(Arrays.copyOfRange(reply, 100, 300), get(landing, 1000, 200));
        assertArrayEquals(Arrays.copyOfRange(reply, 300, 600), get(landing, 2000, 300));
        assertArrayEquals(Arrays.copyOfRange(reply, 600, 900), get(landing, 3000, 300));
        assertArrayEquals(new byte[100], get(landing, 3300, 100), "the unused tail of entry 4 is untouched");
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldScatterLargeMessagesAcrossOddEntryBoundaries(PeerMode mode) {
        LocalEnd local = openLocal();
        int[] sendPieces = {300_001, 524_287, 224_291}; // 1 048 579 bytes: no piece lines up with any chunk size
        int[] receivePieces = {7, 655_357, 131_075, 262_140}; // exactly as many bytes
        int total = Arrays.stream(sendPieces).sum();
        assertEquals(total, Arrays.stream(receivePieces).sum());
        assumeTrue(local.attributes().maxMessageSize() >= total, "max_msg_sz >= 1 MiB");
        Link link = connect(local, peer(mode));
        PeerSide peer = link.peer();
        MemoryRegion source = local.region(2L << 20, AccessFlag.LOCAL_WRITE);
        Patterns.fill(source.segment(), 0, 2L << 20, 71);
        SendWorkRequest gathered = new SendWorkRequest(4).wrId(1).opcode(SendOpcode.SEND).flags(SendFlag.SIGNALED);
        long[] sendOffsets = {13, 400_000, 1_000_003};
        byte[] message = new byte[total];
        int at = 0;
        for (int i = 0; i < 3; i++) {
            gathered.sge(i).set(source, sendOffsets[i], sendPieces[i]);
            byte[] piece = get(source, sendOffsets[i], sendPieces[i]);
            System.arraycopy(piece, 0, message, at, piece.length);
            at += piece.length;
        }
        gathered.setSgeCount(3);
        PeerRegion inbox = peer.allocate(2L << 20, ALL_REMOTE);
        long[] receiveOffsets = {1, 100_000, 800_001, 1_200_000};
        List<PeerSge> scatter = new ArrayList<>();
        for (int i = 0; i < 4; i++) {
            scatter.add(new PeerSge(inbox.id(), receiveOffsets[i], receivePieces[i]));
        }
        peer.postReceive(link.peerQpn(), 1, scatter);
        link.qp().postSend(gathered);
        assertCompletion(awaitLocal(local, link.qp()), 1, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.SEND);
        Completion received = awaitPeer(link);
        assertCompletion(received, 1, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV);
        assertEquals(total, received.byteLength());
        int from = 0;
        for (int i = 0; i < 4; i++) {
            assertArrayEquals(Arrays.copyOfRange(message, from, from + receivePieces[i]),
                peer.read(inbox.id(), receiveOffsets[i], receivePieces[i]), "receive entry " + (i + 1));
            from += receivePieces[i];
        }

        // The same bytes back with one READ scattered over the send pieces' sizes at other offsets.
        MemoryRegion sink = local.region(2L << 20, AccessFlag.LOCAL_WRITE);
        SendWorkRequest scattered = new SendWorkRequest(4).wrId(2).opcode(SendOpcode.RDMA_READ)
            .flags(SendFlag.SIGNALED).remote(inbox.address() + receiveOffsets[1], inbox.rkey());
        long[] sinkOffsets = {3, 300_100, 900_000};
        int readTotal = receivePieces[1];
        int[] readPieces = {100_003, 400_001, readTotal - 500_004};
        for (int i = 0; i < 3; i++) {
            scattered.sge(i).set(sink, sinkOffsets[i], readPieces[i]);
        }
        scattered.setSgeCount(3);
        link.qp().postSend(scattered);
        Completion read = awaitLocal(local, link.qp());
        assertCompletion(read, 2, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RDMA_READ);
        assertEquals(readTotal, read.byteLength());
        byte[] expected = Arrays.copyOfRange(message, receivePieces[0], receivePieces[0] + readTotal);
        from = 0;
        for (int i = 0; i < 3; i++) {
            assertArrayEquals(Arrays.copyOfRange(expected, from, from + readPieces[i]),
                get(sink, sinkOffsets[i], readPieces[i]), "READ entry " + (i + 1));
            from += readPieces[i];
        }
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldReportOnlySignaledCompletionsUnlessSignalAll(PeerMode mode) {
        LocalEnd local = openLocal();
        PeerSide peer = peer(mode);
        Link link = connect(local, peer);
        PeerRegion target = peer.allocate(4096, ALL_REMOTE);
        MemoryRegion source = local.region(4096);
        Patterns.fill(source.segment(), 0, 4096, 19);
        link.qp().postSend(send(1, SendOpcode.RDMA_WRITE, 0, source, 0, 64).remote(target.address(), target.rkey()));
        link.qp().postSend(send(2, SendOpcode.RDMA_WRITE, 0, source, 64, 64)
            .remote(target.address() + 64, target.rkey()));
        link.qp().postSend(send(3, SendOpcode.RDMA_WRITE, SendFlag.SIGNALED, source, 128, 64)
            .remote(target.address() + 128, target.rkey()));
        // Completions come in posting order, so anything reported for 1 or 2 would come before 3.
        assertCompletion(awaitLocal(local, link.qp()), 3, WorkCompletionStatus.SUCCESS,
            WorkCompletionOpcode.RDMA_WRITE);
        assertNoLocalCompletion(local, link.qp());
        assertEquals(-1, link.peer().firstPatternMismatch(target.id(), 0, 192, 19), "unsignaled writes happened");

        Link all = connect(local, peer, spec(local).withSignalAll(true), ConnectionSpec.defaults(), spec(local),
            ConnectionSpec.defaults());
        all.qp().postSend(send(4, SendOpcode.RDMA_WRITE, 0, source, 0, 64).remote(target.address(), target.rkey()));
        all.qp().postSend(send(5, SendOpcode.RDMA_WRITE, 0, source, 0, 64).remote(target.address(), target.rkey()));
        List<Completion> done = awaitLocal(local, all.qp(), 2);
        assertCompletion(done.get(0), 4, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RDMA_WRITE);
        assertCompletion(done.get(1), 5, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RDMA_WRITE);
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldCopyInlineDataAtPostWithoutCheckingTheLkey(PeerMode mode) {
        LocalEnd local = openLocal();
        int inline = Math.min(64, local.attributes().maxInlineData());
        assumeTrue(inline >= 16, "device supports at least 16 inline bytes");
        Link link = connect(local, peer(mode));
        PeerRegion inbox = link.peer().allocate(4096, mask(AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE));
        link.peer().postReceive(link.peerQpn(), 1, List.of(new PeerSge(inbox.id(), 0, 256)));
        byte[] data = Patterns.bytes(20, inline);
        try (Arena arena = Arena.ofConfined()) {
            // Never registered: ibv_post_send(3) says the L_Key of inline data is not checked.
            MemorySegment scratch = arena.allocate(inline);
            MemorySegment.copy(data, 0, scratch, ValueLayout.JAVA_BYTE, 0, inline);
            SendWorkRequest request = new SendWorkRequest().wrId(1).opcode(SendOpcode.SEND)
                .flags(SendFlag.INLINE | SendFlag.SIGNALED);
            request.sge(0).set(scratch.address(), inline, 0x0BADBAD);
            request.setSgeCount(1);
            link.qp().postSend(request);
            scratch.fill((byte) 0x5A); // the buffer is reusable as soon as post_send returns
            request.wrId(2).opcode(SendOpcode.RDMA_WRITE).remote(inbox.address() + 1024, inbox.rkey());
            MemorySegment.copy(data, 0, scratch, ValueLayout.JAVA_BYTE, 0, inline);
            link.qp().postSend(request);
            scratch.fill((byte) 0x5A);
            List<Completion> done = awaitLocal(local, link.qp(), 2);
            assertCompletion(done.get(0), 1, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.SEND);
            assertCompletion(done.get(1), 2, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RDMA_WRITE);
            Completion received = awaitPeer(link);
            assertCompletion(received, 1, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV);
            assertEquals(inline, received.byteLength());
            assertArrayEquals(data, link.peer().read(inbox.id(), 0, inline), "inline SEND carried the bytes at post");
            assertArrayEquals(data, link.peer().read(inbox.id(), 1024, inline), "inline WRITE carried them too");

            MemorySegment tooLong = arena.allocate(inline + 1);
            SendWorkRequest oversize = new SendWorkRequest().wrId(3).opcode(SendOpcode.SEND)
                .flags(SendFlag.INLINE | SendFlag.SIGNALED);
            oversize.sge(0).set(tooLong.address(), inline + 1, 0);
            oversize.setSgeCount(1);
            assertThrows(VerbsException.class, () -> link.qp().postSend(oversize),
                "INLINE above the QP's max_inline_data is refused at post");
            assertEquals(QueuePairState.READY_TO_SEND, link.qp().state());
        }
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldHonourFenceAndAcceptSolicited(PeerMode mode) {
        LocalEnd local = openLocal();
        assumeAtomics(local);
        Link link = connect(local, peer(mode));
        PeerSide peer = link.peer();
        PeerRegion target = peer.allocate(4096, ALL_REMOTE);
        peer.fillPattern(target.id(), 0, 64, 21);
        MemoryRegion scratch = local.region(4096, AccessFlag.LOCAL_WRITE);
        Patterns.fill(scratch.segment(), 1024, 64, 22);
        // READ, then a fenced WRITE over the same bytes: the READ must see the old bytes.
        link.qp().postSend(send(1, SendOpcode.RDMA_READ, SendFlag.SIGNALED, scratch, 0, 64)
            .remote(target.address(), target.rkey()));
        link.qp().postSend(send(2, SendOpcode.RDMA_WRITE, SendFlag.FENCE | SendFlag.SIGNALED, scratch, 1024, 64)
            .remote(target.address(), target.rkey()));
        // A fetch-and-add, then a fenced READ of the same word: the READ sees the sum.
        link.qp().postSend(send(3, SendOpcode.ATOMIC_FETCH_AND_ADD, SendFlag.SIGNALED, scratch, 2048, 8)
            .remote(target.address() + 128, target.rkey()).atomic(5, 0));
        link.qp().postSend(send(4, SendOpcode.RDMA_READ, SendFlag.FENCE | SendFlag.SIGNALED, scratch, 2056, 8)
            .remote(target.address() + 128, target.rkey()));
        peer.postReceive(link.peerQpn(), 10, List.of(new PeerSge(target.id(), 512, 64)));
        peer.postReceive(link.peerQpn(), 11, List.of());
        link.qp().postSend(send(5, SendOpcode.SEND, SendFlag.SOLICITED | SendFlag.SIGNALED, scratch, 1024, 16));
        link.qp().postSend(send(6, SendOpcode.RDMA_WRITE_WITH_IMM, SendFlag.SOLICITED | SendFlag.SIGNALED, scratch,
            1024, 16).remote(target.address() + 1024, target.rkey()).immediateData(6));

        List<Completion> done = awaitLocal(local, link.qp(), 6);
        WorkCompletionOpcode[] opcodes = {WorkCompletionOpcode.RDMA_READ, WorkCompletionOpcode.RDMA_WRITE,
            WorkCompletionOpcode.FETCH_ADD, WorkCompletionOpcode.RDMA_READ, WorkCompletionOpcode.SEND,
            WorkCompletionOpcode.RDMA_WRITE};
        for (int i = 0; i < 6; i++) {
            assertCompletion(done.get(i), i + 1, WorkCompletionStatus.SUCCESS, opcodes[i]);
        }
        assertEquals(-1, Patterns.firstMismatch(scratch.segment(), 0, 64, 21), "the READ ran before the fenced WRITE");
        assertEquals(-1, link.peer().firstPatternMismatch(target.id(), 0, 64, 22), "the fenced WRITE happened");
        assertEquals(5, scratch.segment().get(HOST_LONG, 2056), "the fenced READ saw the atomic's result");
        List<Completion> received = awaitPeer(link, 2);
        assertCompletion(received.get(0), 10, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV);
        assertCompletion(received.get(1), 11, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV_RDMA_WITH_IMM);
        assertEquals(6, received.get(1).immediateData());
    }

    // =============================================================================================== ordering

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldMakeWriteDataVisibleBeforeTheFollowingWriteWithImmediateCompletes(PeerMode mode) {
        LocalEnd local = openLocal();
        Link link = connect(local, peer(mode));
        int size = (int) Math.min(local.attributes().maxMessageSize(), 8 << 20);
        PeerRegion target = link.peer().allocate(size, mask(AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE));
        MemoryRegion source = local.region(size);
        for (int round = 0; round < 3; round++) {
            long seed = 220 + round;
            Patterns.fill(source.segment(), 0, size, seed);
            link.peer().postReceive(link.peerQpn(), round, List.of());
            link.qp().postSend(send(100 + round, SendOpcode.RDMA_WRITE, 0, source, 0, size)
                .remote(target.address(), target.rkey()));
            link.qp().postSend(send(200 + round, SendOpcode.RDMA_WRITE_WITH_IMM, SendFlag.SIGNALED, null, 0, 0)
                .remote(target.address(), target.rkey()).immediateData(round));
            Completion notice = awaitPeer(link);
            assertCompletion(notice, round, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV_RDMA_WITH_IMM);
            // Only now look at the data: RC executes a QP's requests in order at the responder.
            assertEquals(-1, link.peer().firstPatternMismatch(target.id(), 0, size, seed),
                "all " + size + " bytes of the preceding WRITE are visible when the WRITE_WITH_IMM completes");
            assertCompletion(awaitLocal(local, link.qp()), 200 + round, WorkCompletionStatus.SUCCESS,
                WorkCompletionOpcode.RDMA_WRITE);
        }
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldCompleteSendsAtTheReceiverInPostingOrder(PeerMode mode) {
        LocalEnd local = openLocal();
        Link link = connect(local, peer(mode));
        int n = 48;
        PeerRegion inbox = link.peer().allocate(64L * n, mask(AccessFlag.LOCAL_WRITE));
        for (int i = 0; i < n; i++) {
            link.peer().postReceive(link.peerQpn(), 1000 + i, List.of(new PeerSge(inbox.id(), 64L * i, 64)));
        }
        MemoryRegion source = local.region(64L * n);
        for (int i = 0; i < n; i++) {
            put(source, 64L * i, Patterns.bytes(300 + i, 8 + i));
            link.qp().postSend(send(i, SendOpcode.SEND, i == n - 1 ? SendFlag.SIGNALED : 0, source, 64L * i, 8 + i));
        }
        assertCompletion(awaitLocal(local, link.qp()), n - 1, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.SEND);
        List<Completion> received = awaitPeer(link, n);
        for (int i = 0; i < n; i++) {
            Completion c = received.get(i);
            assertCompletion(c, 1000 + i, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV);
            assertEquals(8 + i, c.byteLength(), "message " + i + " consumed receive " + i);
            assertArrayEquals(Patterns.bytes(300 + i, 8 + i), link.peer().read(inbox.id(), 64L * i, 8 + i),
                "message " + i);
        }
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldReadBackWhatTheSameQueuePairJustWrote(PeerMode mode) {
        LocalEnd local = openLocal();
        Link link = connect(local, peer(mode));
        PeerRegion target = link.peer().allocate(1 << 16, ALL_REMOTE);
        MemoryRegion buffer = local.region(1 << 17, AccessFlag.LOCAL_WRITE);
        Patterns.fill(buffer.segment(), 0, 1 << 16, 51);
        // No fence and no wait: RC responders execute one QP's requests in order, so the READ sees the WRITE.
        link.qp().postSend(send(1, SendOpcode.RDMA_WRITE, 0, buffer, 0, 1 << 16).remote(target.address(),
            target.rkey()));
        link.qp().postSend(send(2, SendOpcode.RDMA_READ, SendFlag.SIGNALED, buffer, 1 << 16, 1 << 16)
            .remote(target.address(), target.rkey()));
        assertCompletion(awaitLocal(local, link.qp()), 2, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RDMA_READ);
        assertEquals(-1, Patterns.firstMismatch(buffer.segment(), 1 << 16, 1 << 16, 51),
            "a READ posted after a WRITE of the same bytes returns the written bytes");
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldCompleteMoreReadsAndAtomicsThanMaxRdAtomicInOrder(PeerMode mode) {
        LocalEnd local = openLocal();
        assumeAtomics(local);
        Link link = connect(local, peer(mode));
        int n = 48; // three times the max_rd_atomic of 16 that QueuePairAttributes.toReadyToSend sets
        PeerRegion target = link.peer().allocate(4096, ALL_REMOTE);
        link.peer().fillPattern(target.id(), 0, 64L * n, 52);
        MemoryRegion sink = local.region(64L * n + 8L * n, AccessFlag.LOCAL_WRITE);
        for (int i = 0; i < n; i++) {
            if (i % 3 == 2) {
                link.qp().postSend(send(i, SendOpcode.ATOMIC_FETCH_AND_ADD, SendFlag.SIGNALED, sink, 64L * n + 8L * i,
                    8).remote(target.address() + 4000, target.rkey()).atomic(1, 0));
            } else {
                link.qp().postSend(send(i, SendOpcode.RDMA_READ, SendFlag.SIGNALED, sink, 64L * i, 64)
                    .remote(target.address() + 64L * i, target.rkey()));
            }
        }
        List<Completion> done = awaitLocal(local, link.qp(), n);
        byte[] whole = Patterns.bytes(52, 64 * n);
        long expectedFetch = 0;
        for (int i = 0; i < n; i++) {
            boolean atomic = i % 3 == 2;
            assertCompletion(done.get(i), i, WorkCompletionStatus.SUCCESS,
                atomic ? WorkCompletionOpcode.FETCH_ADD : WorkCompletionOpcode.RDMA_READ);
            if (atomic) {
                assertEquals(expectedFetch++, sink.segment().get(HOST_LONG, 64L * n + 8L * i), "fetch-add " + i);
            } else {
                assertArrayEquals(Arrays.copyOfRange(whole, 64 * i, 64 * i + 64), get(sink, 64L * i, 64),
                    "READ " + i);
            }
        }
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldPostAListInOrderAndStopAtTheFirstRequestItRefuses(PeerMode mode) {
        LocalEnd local = openLocal();
        Link link = connect(local, peer(mode));
        int n = 40; // more READs than the max_rd_atomic of 16: the list's tail waits for the first responses
        PeerRegion target = link.peer().allocate(4096, ALL_REMOTE);
        link.peer().fillPattern(target.id(), 0, 64L * n, 53);
        MemoryRegion sink = local.region(64L * n, AccessFlag.LOCAL_WRITE);
        SendWorkRequest[] list = new SendWorkRequest[n];
        for (int i = 0; i < n; i++) {
            list[i] = send(i, SendOpcode.RDMA_READ, SendFlag.SIGNALED, sink, 64L * i, 64)
                .remote(target.address() + 64L * i, target.rkey());
        }
        assertEquals(n, link.qp().postSend(list, n), "ibv_post_send of a chain posts every request");
        List<Completion> done = awaitLocal(local, link.qp(), n);
        byte[] whole = Patterns.bytes(53, 64 * n);
        for (int i = 0; i < n; i++) {
            assertCompletion(done.get(i), i, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RDMA_READ);
            assertArrayEquals(Arrays.copyOfRange(whole, 64 * i, 64 * i + 64), get(sink, 64L * i, 64), "READ " + i);
        }
        // bad_wr: the third request has more entries than max_send_sge; the two before it are posted, nothing after.
        SendWorkRequest tooManySges = new SendWorkRequest(5).wrId(102).opcode(SendOpcode.RDMA_READ)
            .flags(SendFlag.SIGNALED).remote(target.address(), target.rkey());
        for (int i = 0; i < 5; i++) {
            tooManySges.sge(i).set(sink, 8L * i, 8);
        }
        tooManySges.setSgeCount(5);
        SendWorkRequest[] bad = {list[0].wrId(100), list[1].wrId(101), tooManySges, list[3].wrId(103)};
        assertEquals(2, link.qp().postSend(bad, bad.length), "posted up to the refused request (bad_wr)");
        assertThrows(VerbsException.class, () -> link.qp().postSend(Arrays.copyOfRange(bad, 2, 4), 2),
            "the refused request at the head of a list throws its reason");
        List<Completion> two = awaitLocal(local, link.qp(), 2);
        assertCompletion(two.get(0), 100, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RDMA_READ);
        assertCompletion(two.get(1), 101, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RDMA_READ);
        assertNoLocalCompletion(local, link.qp());
        assertEquals(QueuePairState.READY_TO_SEND, link.qp().state(), "a refused post leaves the QP alone");
        assertThrows(IllegalArgumentException.class, () -> link.qp().postSend(bad, 5), "count beyond the array");
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldCarrySendsBothWaysAtOnce(PeerMode mode) throws Exception {
        LocalEnd local = openLocal();
        Link link = connect(local, peer(mode));
        PeerSide peer = link.peer();
        int n = 32;
        PeerRegion peerBuffer = peer.allocate(128L * n * 2, mask(AccessFlag.LOCAL_WRITE));
        MemoryRegion localBuffer = local.region(128L * n * 2, AccessFlag.LOCAL_WRITE);
        for (int i = 0; i < n; i++) {
            peer.postReceive(link.peerQpn(), 500 + i, List.of(new PeerSge(peerBuffer.id(), 128L * i, 128)));
            link.qp().postReceive(new ReceiveWorkRequest().wrId(500 + i).local(localBuffer, 128L * i, 128));
            peer.write(peerBuffer.id(), 128L * (n + i), Patterns.bytes(600 + i, 100));
            put(localBuffer, 128L * (n + i), Patterns.bytes(700 + i, 100));
        }
        Future<?> peerSends = BACKGROUND.submit(() -> {
            for (int i = 0; i < n; i++) {
                peer.postSend(link.peerQpn(), PeerSend.of(i, SendOpcode.SEND, SendFlag.SIGNALED, 0, 0,
                    List.of(new PeerSge(peerBuffer.id(), 128L * (n + i), 100))));
            }
        });
        for (int i = 0; i < n; i++) {
            link.qp().postSend(send(i, SendOpcode.SEND, SendFlag.SIGNALED, localBuffer, 128L * (n + i), 100));
        }
        join(peerSends);
        List<Completion> localDone = awaitLocal(local, link.qp(), 2 * n);
        List<Completion> localSends = localDone.stream().filter(c -> c.wrId() < 500).toList();
        List<Completion> localReceives = localDone.stream().filter(c -> c.wrId() >= 500).toList();
        List<Completion> peerDone = awaitPeer(link, 2 * n);
        List<Completion> peerSendsDone = peerDone.stream().filter(c -> c.wrId() < 500).toList();
        List<Completion> peerReceives = peerDone.stream().filter(c -> c.wrId() >= 500).toList();
        for (int i = 0; i < n; i++) {
            assertCompletion(localSends.get(i), i, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.SEND);
            assertCompletion(peerSendsDone.get(i), i, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.SEND);
            assertCompletion(localReceives.get(i), 500 + i, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV);
            assertCompletion(peerReceives.get(i), 500 + i, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV);
            assertArrayEquals(Patterns.bytes(600 + i, 100), get(localBuffer, 128L * i, 100), "peer -> local " + i);
            assertArrayEquals(Patterns.bytes(700 + i, 100), peer.read(peerBuffer.id(), 128L * i, 100),
                "local -> peer " + i);
        }
    }

    // =============================================================================================== memory kinds

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldServeRegisteredCallerOwnedMemoryLikeAllocatedMemory(PeerMode mode) {
        Arena arena = Arena.ofShared();
        cleanup.push(arena::close); // closed after the local end, so never while still registered
        LocalEnd local = openLocal();
        Link link = connect(local, peer(mode));
        PeerSide peer = link.peer();
        int size = 64 << 10;
        PeerRegion remote = peer.registerCallerOwned(size, mask(AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE,
            AccessFlag.REMOTE_READ));
        MemoryRegion mine = local.domain().registerMemory(arena.allocate(2L * size, 4096), AccessFlag.LOCAL_WRITE,
            AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ);

        Patterns.fill(mine.segment(), 0, 40_000, 61);
        link.qp().postSend(send(1, SendOpcode.RDMA_WRITE, SendFlag.SIGNALED, mine, 0, 40_000)
            .remote(remote.address() + 100, remote.rkey()));
        assertCompletion(awaitLocal(local, link.qp()), 1, WorkCompletionStatus.SUCCESS,
            WorkCompletionOpcode.RDMA_WRITE);
        assertEquals(-1, peer.firstPatternMismatch(remote.id(), 100, 40_000, 61), "WRITE into registered memory");

        peer.fillPattern(remote.id(), 0, 30_000, 62);
        link.qp().postSend(send(2, SendOpcode.RDMA_READ, SendFlag.SIGNALED, mine, size, 30_000)
            .remote(remote.address(), remote.rkey()));
        assertCompletion(awaitLocal(local, link.qp()), 2, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RDMA_READ);
        assertEquals(-1, Patterns.firstMismatch(mine.segment(), size, 30_000, 62), "READ of registered memory");

        peer.postReceive(link.peerQpn(), 3, List.of(new PeerSge(remote.id(), 50_000, 10_000)));
        link.qp().postSend(send(3, SendOpcode.SEND, SendFlag.SIGNALED, mine, 0, 9_000));
        assertCompletion(awaitLocal(local, link.qp()), 3, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.SEND);
        assertEquals(9_000, awaitPeer(link).byteLength());
        assertEquals(-1, peer.firstPatternMismatch(remote.id(), 50_000, 9_000, 61), "SEND into registered memory");

        link.qp().postReceive(new ReceiveWorkRequest().wrId(4).local(mine, 100_000, 20_000));
        peer.postSend(link.peerQpn(), PeerSend.of(4, SendOpcode.SEND, SendFlag.SIGNALED, 0, 0,
            List.of(new PeerSge(remote.id(), 0, 12_000))));
        assertCompletion(awaitPeer(link), 4, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.SEND);
        assertEquals(12_000, awaitLocal(local, link.qp()).byteLength());
        assertEquals(-1, Patterns.firstMismatch(mine.segment(), 100_000, 12_000, 62), "SEND from registered memory");

        // The peer as requester, into and out of memory this end registered.
        peer.postSend(link.peerQpn(), PeerSend.of(5, SendOpcode.RDMA_WRITE, SendFlag.SIGNALED,
            mine.address() + 70_000, mine.rkey(), List.of(new PeerSge(remote.id(), 0, 5_000))));
        assertCompletion(awaitPeer(link), 5, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RDMA_WRITE);
        assertEquals(-1, Patterns.firstMismatch(mine.segment(), 70_000, 5_000, 62), "peer WRITE into our memory");
        peer.postSend(link.peerQpn(), PeerSend.of(6, SendOpcode.RDMA_READ, SendFlag.SIGNALED, mine.address(),
            mine.rkey(), List.of(new PeerSge(remote.id(), 60_000, 4_000))));
        assertCompletion(awaitPeer(link), 6, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RDMA_READ);
        assertEquals(-1, peer.firstPatternMismatch(remote.id(), 60_000, 4_000, 61), "peer READ of our memory");

        peer.deregister(remote.id());
        link.qp().postSend(send(9, SendOpcode.RDMA_WRITE, SendFlag.SIGNALED, mine, 0, 64)
            .remote(remote.address(), remote.rkey()));
        assertCompletion(awaitLocal(local, link.qp()), 9, WorkCompletionStatus.REM_ACCESS_ERR, null);
        mine.close();
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldServeMemoryOfAConfinedArena(PeerMode mode) {
        // A confined arena's segment may only be touched by the thread that made it, yet the provider's own
        // threads (tcp's progress thread, shm's peers) serve requests into it: registration must still work.
        LocalEnd local = openLocal();
        Link link = connect(local, peer(mode));
        PeerSide peer = link.peer();
        PeerRegion remote = peer.allocate(8192, mask(AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE,
            AccessFlag.REMOTE_READ));
        Arena arena = Arena.ofConfined();
        MemoryRegion mine;
        try {
            mine = local.domain().registerMemory(arena.allocate(8192, 4096), AccessFlag.LOCAL_WRITE,
                AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ);
        } catch (RuntimeException e) {
            arena.close();
            throw e;
        }
        peer.fillPattern(remote.id(), 0, 4096, 81);
        peer.postSend(link.peerQpn(), PeerSend.of(1, SendOpcode.RDMA_WRITE, SendFlag.SIGNALED,
            mine.address() + 100, mine.rkey(), List.of(new PeerSge(remote.id(), 0, 4096))));
        assertCompletion(awaitPeer(link), 1, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RDMA_WRITE);
        assertEquals(-1, Patterns.firstMismatch(mine.segment(), 100, 4096, 81), "peer WRITE into confined memory");
        Patterns.fill(mine.segment(), 5000, 1000, 82);
        peer.postSend(link.peerQpn(), PeerSend.of(2, SendOpcode.RDMA_READ, SendFlag.SIGNALED,
            mine.address() + 5000, mine.rkey(), List.of(new PeerSge(remote.id(), 6000, 1000))));
        assertCompletion(awaitPeer(link), 2, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RDMA_READ);
        assertEquals(-1, peer.firstPatternMismatch(remote.id(), 6000, 1000, 82), "peer READ of confined memory");

        // Closing the arena ends the memory: its lkey is refused locally from then on.
        arena.close();
        link.qp().postSend(send(3, SendOpcode.RDMA_WRITE, SendFlag.SIGNALED, mine, 0, 64)
            .remote(remote.address(), remote.rkey()));
        assertCompletion(awaitLocal(local, link.qp()), 3, WorkCompletionStatus.LOC_PROT_ERR, null);
        mine.close();
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldRunAtomicsOnRegisteredCallerOwnedMemory(PeerMode mode) {
        LocalEnd local = openLocal();
        assumeAtomics(local);
        Link link = connect(local, peer(mode));
        PeerSide peer = link.peer();
        // ibv_reg_mr(3) accepts IBV_ACCESS_REMOTE_ATOMIC on any memory of a device whose atomic_cap is not
        // ATOMIC_NONE; registerMemory documents no exception for caller-owned memory.
        PeerRegion remote = peer.registerCallerOwned(4096, ALL_REMOTE);
        MemoryRegion mine = local.region(64, AccessFlag.LOCAL_WRITE);
        peer.write(remote.id(), 64, hostLong(10));
        link.qp().postSend(send(7, SendOpcode.ATOMIC_FETCH_AND_ADD, SendFlag.SIGNALED, mine, 0, 8)
            .remote(remote.address() + 64, remote.rkey()).atomic(5, 0));
        link.qp().postSend(send(8, SendOpcode.ATOMIC_CMP_AND_SWP, SendFlag.SIGNALED, mine, 8, 8)
            .remote(remote.address() + 64, remote.rkey()).atomic(15, 99));
        List<Completion> atomics = awaitLocal(local, link.qp(), 2);
        assertCompletion(atomics.get(0), 7, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.FETCH_ADD);
        assertCompletion(atomics.get(1), 8, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.COMP_SWAP);
        assertEquals(10, mine.segment().get(HOST_LONG, 0), "fetch-add on registered memory");
        assertEquals(15, mine.segment().get(HOST_LONG, 8), "compare-and-swap on registered memory");
        assertEquals(99, hostLong(peer.read(remote.id(), 64, 8)));
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldAcceptPostsFromSeveralThreadsOnOneQueuePair(PeerMode mode) throws Exception {
        LocalEnd local = openLocal();
        int threads = 4;
        int perThread = 100;
        int depth = Math.min(threads * perThread, local.attributes().maxQueuePairWorkRequests());
        assumeTrue(depth == threads * perThread, "device allows " + threads * perThread + " outstanding sends");
        Link link = connect(local, peer(mode), spec(local).withDepths(depth, 4), ConnectionSpec.defaults(),
            spec(local), ConnectionSpec.defaults());
        PeerRegion target = link.peer().allocate(16L * threads * perThread, ALL_REMOTE);
        MemoryRegion source = local.region(16L * threads * perThread);
        for (int i = 0; i < threads * perThread; i++) {
            put(source, 16L * i, Patterns.bytes(800 + i, 16));
        }
        // "Posting is thread-safe" (QueuePair): each thread reuses its own request object.
        List<Future<?>> posters = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            int thread = t;
            posters.add(BACKGROUND.submit(() -> {
                SendWorkRequest request = new SendWorkRequest().opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED);
                for (int k = 0; k < perThread; k++) {
                    int i = thread * perThread + k;
                    link.qp().postSend(request.wrId(i).local(source, 16L * i, 16)
                        .remote(target.address() + 16L * i, target.rkey()));
                }
            }));
        }
        for (Future<?> poster : posters) {
            join(poster);
        }
        List<Completion> done = awaitLocal(local, link.qp(), threads * perThread);
        int[] lastOfThread = new int[threads];
        Arrays.fill(lastOfThread, -1);
        Set<Long> ids = new HashSet<>();
        for (Completion c : done) {
            assertCompletion(c, c.wrId(), WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RDMA_WRITE);
            assertTrue(ids.add(c.wrId()), "wr_id " + c.wrId() + " completed twice");
            int thread = (int) (c.wrId() / perThread);
            assertTrue(c.wrId() > lastOfThread[thread], "one thread's requests complete in its posting order");
            lastOfThread[thread] = (int) c.wrId();
        }
        byte[] landed = link.peer().read(target.id(), 0, 16 * threads * perThread);
        for (int i = 0; i < threads * perThread; i++) {
            assertArrayEquals(Patterns.bytes(800 + i, 16), Arrays.copyOfRange(landed, 16 * i, 16 * i + 16),
                "WRITE " + i);
        }
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldReconnectAQueuePairAfterResettingIt(PeerMode mode) {
        LocalEnd local = openLocal();
        PeerSide peer = peer(mode);
        Link first = connect(local, peer);
        QueuePair qp = first.qp();
        qp.modify(new QueuePairAttributes().state(QueuePairState.ERROR));
        qp.modify(new QueuePairAttributes().state(QueuePairState.RESET));
        assertEquals(QueuePairState.RESET, qp.state());
        // ERR -> RESET -> INIT -> RTR -> RTS towards a new peer QP: the same QP object carries traffic again.
        PeerQueuePair fresh = peer.createQueuePair(spec(local));
        Future<?> peerConnect = BACKGROUND.submit(() -> peer.connect(fresh.queuePairNumber(), qp.localEndpoint(),
            ConnectionSpec.defaults()));
        InProcessPeer.connect(qp, fresh.endpoint(), ConnectionSpec.defaults());
        join(peerConnect);
        Link second = new Link(qp, fresh, peer);
        PeerRegion inbox = peer.allocate(4096, mask(AccessFlag.LOCAL_WRITE));
        peer.postReceive(second.peerQpn(), 1, List.of(new PeerSge(inbox.id(), 0, 64)));
        MemoryRegion source = local.region(4096);
        put(source, 0, Patterns.bytes(90, 48));
        qp.postSend(send(1, SendOpcode.SEND, SendFlag.SIGNALED, source, 0, 48));
        assertCompletion(awaitLocal(local, qp), 1, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.SEND);
        Completion received = awaitPeer(second);
        assertCompletion(received, 1, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV);
        assertEquals(qp.queuePairNumber(), received.sourceQueuePairNumber(), "src_qp of the reconnected QP");
        assertArrayEquals(Patterns.bytes(90, 48), peer.read(inbox.id(), 0, 48));
    }

    // =============================================================================================== sizes

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldDeliverZeroLengthMessages(PeerMode mode) {
        LocalEnd local = openLocal();
        Link link = connect(local, peer(mode));
        PeerRegion inbox = link.peer().allocate(4096, mask(AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE));
        link.peer().postReceive(link.peerQpn(), 1, List.of(new PeerSge(inbox.id(), 0, 64)));
        link.peer().postReceive(link.peerQpn(), 2, List.of());
        link.peer().postReceive(link.peerQpn(), 3, List.of());
        link.qp().postSend(send(1, SendOpcode.SEND, SendFlag.SIGNALED, null, 0, 0));
        link.qp().postSend(send(2, SendOpcode.SEND_WITH_IMM, SendFlag.SIGNALED, null, 0, 0).immediateData(5));
        link.qp().postSend(send(3, SendOpcode.RDMA_WRITE_WITH_IMM, SendFlag.SIGNALED, null, 0, 0)
            .remote(inbox.address() + 128, inbox.rkey()).immediateData(9));
        List<Completion> sent = awaitLocal(local, link.qp(), 3);
        assertCompletion(sent.get(0), 1, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.SEND);
        assertCompletion(sent.get(1), 2, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.SEND);
        assertCompletion(sent.get(2), 3, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RDMA_WRITE);
        List<Completion> received = awaitPeer(link, 3);
        assertCompletion(received.get(0), 1, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV);
        assertEquals(0, received.get(0).byteLength());
        assertFalse(received.get(0).withImmediate());
        assertCompletion(received.get(1), 2, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV);
        assertEquals(0, received.get(1).byteLength());
        assertTrue(received.get(1).withImmediate());
        assertEquals(5, received.get(1).immediateData());
        assertCompletion(received.get(2), 3, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV_RDMA_WITH_IMM);
        assertEquals(0, received.get(2).byteLength());
        assertEquals(9, received.get(2).immediateData());
        assertArrayEquals(new byte[256], link.peer().read(inbox.id(), 0, 256), "zero-length messages write nothing");
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldTransferMaximumLengthMessages(PeerMode mode) {
        LocalEnd local = openLocal();
        DeviceAttributes attributes = local.attributes();
        int size = (int) Math.min(Math.min(attributes.maxMessageSize(), attributes.maxMemoryRegionSize()), 64 << 20);
        Link link = connect(local, peer(mode));
        PeerSide peer = link.peer();
        PeerRegion remote = peer.allocate(size, mask(AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE,
            AccessFlag.REMOTE_READ));
        MemoryRegion buffer = local.region(size, AccessFlag.LOCAL_WRITE);

        Patterns.fill(buffer.segment(), 0, size, 251);
        peer.postReceive(link.peerQpn(), 1, List.of(new PeerSge(remote.id(), 0, size)));
        link.qp().postSend(send(1, SendOpcode.SEND, SendFlag.SIGNALED, buffer, 0, size));
        assertCompletion(awaitLocal(local, link.qp()), 1, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.SEND);
        Completion received = awaitPeer(link);
        assertCompletion(received, 1, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV);
        assertEquals(size, received.byteLength(), "byte_len of a max_msg_sz SEND");
        assertEquals(-1, peer.firstPatternMismatch(remote.id(), 0, size, 251), "SEND payload");

        Patterns.fill(buffer.segment(), 0, size, 252);
        link.qp().postSend(send(2, SendOpcode.RDMA_WRITE, SendFlag.SIGNALED, buffer, 0, size)
            .remote(remote.address(), remote.rkey()));
        assertCompletion(awaitLocal(local, link.qp()), 2, WorkCompletionStatus.SUCCESS,
            WorkCompletionOpcode.RDMA_WRITE);
        assertEquals(-1, peer.firstPatternMismatch(remote.id(), 0, size, 252), "WRITE payload");

        peer.fillPattern(remote.id(), 0, size, 253);
        link.qp().postSend(send(3, SendOpcode.RDMA_READ, SendFlag.SIGNALED, buffer, 0, size)
            .remote(remote.address(), remote.rkey()));
        Completion read = awaitLocal(local, link.qp());
        assertCompletion(read, 3, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RDMA_READ);
        assertEquals(size, read.byteLength(), "byte_len of a max_msg_sz READ");
        assertEquals(-1, Patterns.firstMismatch(buffer.segment(), 0, size, 253), "READ payload");
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldConnectHundredsOfQueuePairs(PeerMode mode) {
        LocalEnd local = openLocal();
        int n = 256;
        assumeTrue(local.attributes().maxQueuePairs() >= n + 8, "device allows " + n + " QPs per context");
        PeerSide peer = peer(mode);
        QueuePairSpec small = spec(local).withDepths(2, 2);
        List<Link> links = connectMany(local, peer, n, small, ConnectionSpec.defaults(), small,
            ConnectionSpec.defaults());
        assertEquals(n, links.stream().mapToInt(l -> l.qp().queuePairNumber()).distinct().count(), "distinct QPNs");
        PeerRegion inbox = peer.allocate(16L * n, mask(AccessFlag.LOCAL_WRITE));
        MemoryRegion source = local.region(16L * n);
        for (int i = 0; i < n; i++) {
            peer.postReceive(links.get(i).peerQpn(), i, List.of(new PeerSge(inbox.id(), 16L * i, 16)));
        }
        for (int i = 0; i < n; i++) {
            put(source, 16L * i, Patterns.bytes(400 + i, 8));
            links.get(i).qp().postSend(send(i, SendOpcode.SEND, SendFlag.SIGNALED, source, 16L * i, 8));
        }
        for (int i = 0; i < n; i++) {
            Link link = links.get(i);
            assertCompletion(awaitLocal(local, link.qp()), i, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.SEND);
            Completion received = awaitPeer(link);
            assertCompletion(received, i, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV);
            assertEquals(link.qp().queuePairNumber(), received.sourceQueuePairNumber(), "pair " + i + " src_qp");
        }
        byte[] all = peer.read(inbox.id(), 0, 16 * n);
        for (int i = 0; i < n; i++) {
            assertArrayEquals(Patterns.bytes(400 + i, 8), Arrays.copyOfRange(all, 16 * i, 16 * i + 8),
                "message of pair " + i + " arrived on its own QP");
        }
    }

    // =============================================================================================== atomics

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldCountExactlyUnderFetchAndAddContentionFromSeveralPeers(PeerMode mode) throws Exception {
        LocalEnd local = openLocal();
        assumeAtomics(local);
        int peers = 3;
        int perPeer = 2000;
        long start = 1000;
        MemoryRegion counter = local.region(64, AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_ATOMIC);
        counter.segment().set(HOST_LONG, 8, start);
        List<Link> links = new ArrayList<>();
        for (int p = 0; p < peers; p++) {
            links.add(connect(local, peer(mode), spec(local), ConnectionSpec.defaults(), spec(local),
                ConnectionSpec.defaults()));
        }
        List<Future<long[]>> runs = new ArrayList<>();
        for (Link link : links) {
            runs.add(BACKGROUND.submit(() -> link.peer().fetchAndAdd(link.peerQpn(), counter.address() + 8,
                counter.rkey(), 1, perPeer)));
        }
        Set<Long> seen = new HashSet<>();
        for (int p = 0; p < peers; p++) {
            long[] originals = runs.get(p).get(120, TimeUnit.SECONDS);
            assertEquals(perPeer, originals.length);
            for (int i = 0; i < perPeer; i++) {
                if (i > 0) {
                    assertTrue(originals[i] > originals[i - 1], "one QP's atomics execute in posting order");
                }
                assertTrue(seen.add(originals[i]), "value " + originals[i] + " was fetched twice");
            }
        }
        long total = start + (long) peers * perPeer;
        assertEquals(total, counter.segment().get(HOST_LONG, 8), "every add counted exactly once");
        for (long v = start; v < total; v++) {
            assertTrue(seen.contains(v), "some add fetched " + v);
        }
        assertEquals(0, counter.segment().get(HOST_LONG, 0), "the neighbouring word is untouched");
        assertEquals(0, counter.segment().get(HOST_LONG, 16), "the neighbouring word is untouched");
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldStayAtomicAgainstTheOwnersCpuAtomicsWhenGlobal(PeerMode mode) throws Exception {
        LocalEnd local = openLocal();
        // IBV_ATOMIC_GLOB: verbs atomics are atomic against every other access, the owner's CPU atomics included.
        assumeTrue(local.attributes().atomicCapability() == AtomicCapability.ATOMIC_GLOB, "atomic_cap is GLOB");
        int peers = 2;
        int perPeer = 2000;
        int ownerAdds = 4000;
        MemoryRegion counter = local.region(64, AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_ATOMIC);
        List<Link> links = new ArrayList<>();
        for (int p = 0; p < peers; p++) {
            links.add(connect(local, peer(mode)));
        }
        List<Future<long[]>> runs = new ArrayList<>();
        for (Link link : links) {
            runs.add(BACKGROUND.submit(() -> link.peer().fetchAndAdd(link.peerQpn(), counter.address() + 8,
                counter.rkey(), 1, perPeer)));
        }
        VarHandle word = ValueLayout.JAVA_LONG.varHandle();
        long[] ownerFetched = new long[ownerAdds];
        for (int i = 0; i < ownerAdds; i++) {
            ownerFetched[i] = (long) word.getAndAdd(counter.segment(), 8L, 1L);
        }
        Set<Long> seen = new HashSet<>();
        for (long v : ownerFetched) {
            assertTrue(seen.add(v), "value " + v + " fetched twice");
        }
        for (Future<long[]> run : runs) {
            for (long v : run.get(120, TimeUnit.SECONDS)) {
                assertTrue(seen.add(v), "value " + v + " fetched twice");
            }
        }
        long total = (long) peers * perPeer + ownerAdds;
        assertEquals(total, counter.segment().get(HOST_LONG, 8), "no add lost between CPU and verbs atomics");
        for (long v = 0; v < total; v++) {
            assertTrue(seen.contains(v), "some add fetched " + v);
        }
    }

    // =============================================================================================== errors

    /** Ways a request can break its own (local) memory rules. */
    public enum LocalViolation {
        /** A scatter/gather entry with a key that names no region. */
        BAD_LKEY,
        /** A scatter/gather entry that runs past the end of its region. */
        SGE_PAST_REGION_END,
        /** An RDMA READ into memory registered without LOCAL_WRITE. */
        READ_INTO_REGION_WITHOUT_LOCAL_WRITE,
        /** A scatter/gather entry naming a region that was deregistered before the post. */
        DEREGISTERED_LKEY,
        /** A scatter/gather entry naming a region of another protection domain of the same context. */
        LKEY_OF_ANOTHER_PROTECTION_DOMAIN
    }

    static Stream<Arguments> modesAndLocalViolations() {
        return cross(LocalViolation.values());
    }

    private static Stream<Arguments> cross(Object[] values) {
        return Stream.of(PeerMode.values()).flatMap(m -> Stream.of(values).map(v -> Arguments.of(m, v)));
    }

    @ParameterizedTest
    @MethodSource("modesAndLocalViolations")
    void shouldFailWithLocalProtectionError(PeerMode mode, LocalViolation violation) {
        LocalEnd local = openLocal();
        Link link = connect(local, peer(mode));
        PeerRegion remote = link.peer().allocate(4096, ALL_REMOTE);
        link.peer().postReceive(link.peerQpn(), 1, List.of(new PeerSge(remote.id(), 0, 4096)));
        MemoryRegion buffer = local.region(4096, violation == LocalViolation.READ_INTO_REGION_WITHOUT_LOCAL_WRITE
            ? new AccessFlag[0] : new AccessFlag[] {AccessFlag.LOCAL_WRITE});
        SendWorkRequest request = switch (violation) {
            case BAD_LKEY -> {
                SendWorkRequest r = new SendWorkRequest().wrId(1).opcode(SendOpcode.SEND).flags(SendFlag.SIGNALED);
                r.sge(0).set(buffer.address(), 64, buffer.lkey() ^ 0x5A5A5A5A);
                r.setSgeCount(1);
                yield r;
            }
            case SGE_PAST_REGION_END -> send(1, SendOpcode.SEND, SendFlag.SIGNALED, buffer, 4096 - 32, 64);
            // rxe_comp.c do_read(): copying the READ response into the local MR fails -> IB_WC_LOC_PROT_ERR.
            case READ_INTO_REGION_WITHOUT_LOCAL_WRITE -> send(1, SendOpcode.RDMA_READ, SendFlag.SIGNALED, buffer, 0,
                64).remote(remote.address(), remote.rkey());
            case DEREGISTERED_LKEY -> {
                MemoryRegion gone = local.region(4096, AccessFlag.LOCAL_WRITE);
                SendWorkRequest r = send(1, SendOpcode.SEND, SendFlag.SIGNALED, gone, 0, 64);
                gone.close();
                yield r;
            }
            // A QP may only use memory of its own protection domain (ibv_alloc_pd(3)).
            case LKEY_OF_ANOTHER_PROTECTION_DOMAIN -> send(1, SendOpcode.SEND, SendFlag.SIGNALED,
                local.context().allocateProtectionDomain().allocateMemory(4096, AccessFlag.LOCAL_WRITE), 0, 64);
        };
        link.qp().postSend(request);
        assertCompletion(awaitLocal(local, link.qp()), 1, WorkCompletionStatus.LOC_PROT_ERR, null);
        assertErrorOnceCompleted("local QP after LOC_PROT_ERR", link.qp());
        link.qp().postSend(send(2, SendOpcode.SEND, SendFlag.SIGNALED, buffer, 0, 8));
        assertCompletion(awaitLocal(local, link.qp()), 2, WorkCompletionStatus.WR_FLUSH_ERR, null);
        if (violation == LocalViolation.READ_INTO_REGION_WITHOUT_LOCAL_WRITE) {
            assertArrayEquals(new byte[64], get(buffer, 0, 64), "nothing was written into the read-only region");
        }
    }

    /** Ways a one-sided request can break the responder's memory rules. */
    public enum RemoteViolation {
        /** An rkey that names no region. */
        BAD_RKEY,
        /** A range that runs past the end of the region. */
        RANGE_PAST_REGION_END,
        /** An RDMA WRITE into a region without REMOTE_WRITE. */
        WRITE_WITHOUT_REMOTE_WRITE,
        /** An RDMA READ of a region without REMOTE_READ. */
        READ_WITHOUT_REMOTE_READ,
        /** An atomic on a region without REMOTE_ATOMIC. */
        ATOMIC_WITHOUT_REMOTE_ATOMIC,
        /** A WRITE with the key of a region deregistered after an earlier WRITE succeeded. */
        DEREGISTERED_REGION,
        /** A WRITE with the key of a region in another protection domain than the responder QP's (ReDMArk V9). */
        RKEY_OF_ANOTHER_PROTECTION_DOMAIN
    }

    static Stream<Arguments> modesAndRemoteViolations() {
        return cross(RemoteViolation.values());
    }

    @ParameterizedTest
    @MethodSource("modesAndRemoteViolations")
    void shouldFailWithRemoteAccessErrorAndMoveBothQueuePairsToError(PeerMode mode, RemoteViolation violation) {
        LocalEnd local = openLocal();
        if (violation == RemoteViolation.ATOMIC_WITHOUT_REMOTE_ATOMIC) {
            assumeAtomics(local);
        }
        Link link = connect(local, peer(mode));
        PeerSide peer = link.peer();
        int regionAccess = switch (violation) {
            case WRITE_WITHOUT_REMOTE_WRITE -> mask(AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_READ,
                AccessFlag.REMOTE_ATOMIC);
            case READ_WITHOUT_REMOTE_READ -> mask(AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE,
                AccessFlag.REMOTE_ATOMIC);
            case ATOMIC_WITHOUT_REMOTE_ATOMIC -> mask(AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE,
                AccessFlag.REMOTE_READ);
            default -> ALL_REMOTE;
        };
        PeerRegion target = violation == RemoteViolation.RKEY_OF_ANOTHER_PROTECTION_DOMAIN
            ? peer.allocateInOtherDomain(4096, regionAccess) : peer.allocate(4096, regionAccess);
        PeerRegion inbox = peer.allocate(64, mask(AccessFlag.LOCAL_WRITE));
        peer.postReceive(link.peerQpn(), 77, List.of(new PeerSge(inbox.id(), 0, 64)));
        MemoryRegion buffer = local.region(4096, AccessFlag.LOCAL_WRITE);
        Patterns.fill(buffer.segment(), 0, 4096, 29);
        long address = target.address();
        int rkey = target.rkey();
        if (violation == RemoteViolation.DEREGISTERED_REGION) {
            link.qp().postSend(send(0, SendOpcode.RDMA_WRITE, SendFlag.SIGNALED, buffer, 0, 64).remote(address, rkey));
            assertCompletion(awaitLocal(local, link.qp()), 0, WorkCompletionStatus.SUCCESS,
                WorkCompletionOpcode.RDMA_WRITE);
            peer.deregister(target.id());
        }
        SendWorkRequest request = switch (violation) {
            case BAD_RKEY -> send(1, SendOpcode.RDMA_WRITE, SendFlag.SIGNALED, buffer, 0, 64)
                .remote(address, rkey ^ 0x5A5A5A5A);
            case RANGE_PAST_REGION_END -> send(1, SendOpcode.RDMA_WRITE, SendFlag.SIGNALED, buffer, 0, 64)
                .remote(address + 4096 - 32, rkey);
            case WRITE_WITHOUT_REMOTE_WRITE, DEREGISTERED_REGION, RKEY_OF_ANOTHER_PROTECTION_DOMAIN ->
                send(1, SendOpcode.RDMA_WRITE, SendFlag.SIGNALED, buffer, 0, 64).remote(address, rkey);
            case READ_WITHOUT_REMOTE_READ -> send(1, SendOpcode.RDMA_READ, SendFlag.SIGNALED, buffer, 0, 64)
                .remote(address, rkey);
            case ATOMIC_WITHOUT_REMOTE_ATOMIC -> send(1, SendOpcode.ATOMIC_FETCH_AND_ADD, SendFlag.SIGNALED, buffer,
                0, 8).remote(address, rkey).atomic(1, 0);
        };
        link.qp().postSend(request);
        assertCompletion(awaitLocal(local, link.qp()), 1, WorkCompletionStatus.REM_ACCESS_ERR, null);
        assertErrorOnceCompleted("requester QP after REM_ACCESS_ERR", link.qp());
        // rxe_resp.c: an rkey/bounds/permission violation is a class C error; the responder QP goes to ERR too.
        awaitState("responder QP after a remote access violation", QueuePairState.ERROR,
            () -> peer.state(link.peerQpn()));
        assertCompletion(awaitPeer(link), 77, WorkCompletionStatus.WR_FLUSH_ERR, null);
        if (violation == RemoteViolation.RANGE_PAST_REGION_END) {
            assertArrayEquals(new byte[32], peer.read(target.id(), 4096 - 32, 32), "no partial write");
        } else if (violation == RemoteViolation.WRITE_WITHOUT_REMOTE_WRITE
            || violation == RemoteViolation.RKEY_OF_ANOTHER_PROTECTION_DOMAIN) {
            assertArrayEquals(new byte[64], peer.read(target.id(), 0, 64), "nothing written");
        } else if (violation == RemoteViolation.ATOMIC_WITHOUT_REMOTE_ATOMIC) {
            assertArrayEquals(new byte[8], peer.read(target.id(), 0, 8), "no atomic executed");
        }
    }

    /** One-sided operations a queue pair may refuse through its qp_access_flags. */
    public enum RefusedOperation {
        /** RDMA WRITE to a QP without REMOTE_WRITE. */
        WRITE,
        /** RDMA READ from a QP without REMOTE_READ. */
        READ,
        /** Atomic to a QP without REMOTE_ATOMIC. */
        ATOMIC
    }

    static Stream<Arguments> modesAndRefusedOperations() {
        return cross(RefusedOperation.values());
    }

    @ParameterizedTest
    @MethodSource("modesAndRefusedOperations")
    void shouldFailWithRemoteInvalidRequestWhenTheQueuePairRefusesTheOperation(PeerMode mode,
                                                                              RefusedOperation operation) {
        LocalEnd local = openLocal();
        if (operation == RefusedOperation.ATOMIC) {
            assumeAtomics(local);
        }
        AccessFlag missing = switch (operation) {
            case WRITE -> AccessFlag.REMOTE_WRITE;
            case READ -> AccessFlag.REMOTE_READ;
            case ATOMIC -> AccessFlag.REMOTE_ATOMIC;
        };
        ConnectionSpec responder = ConnectionSpec.defaults().withAccessFlags(
            ConnectionSpec.defaults().accessFlags() & ~missing.bit());
        Link link = connect(local, peer(mode), spec(local), ConnectionSpec.defaults(), spec(local), responder);
        PeerRegion target = link.peer().allocate(4096, ALL_REMOTE); // the region would allow it; the QP does not
        MemoryRegion buffer = local.region(4096, AccessFlag.LOCAL_WRITE);
        Patterns.fill(buffer.segment(), 0, 4096, 31);
        SendWorkRequest request = switch (operation) {
            case WRITE -> send(1, SendOpcode.RDMA_WRITE, SendFlag.SIGNALED, buffer, 0, 64);
            case READ -> send(1, SendOpcode.RDMA_READ, SendFlag.SIGNALED, buffer, 0, 64);
            case ATOMIC -> send(1, SendOpcode.ATOMIC_FETCH_AND_ADD, SendFlag.SIGNALED, buffer, 0, 8).atomic(1, 0);
        };
        link.qp().postSend(request.remote(target.address(), target.rkey()));
        // rxe_resp.c check_op_valid(): an opcode the QP's access flags do not allow is answered with
        // NAK "invalid request", which the requester completes as IBV_WC_REM_INV_REQ_ERR.
        assertCompletion(awaitLocal(local, link.qp()), 1, WorkCompletionStatus.REM_INV_REQ_ERR, null);
        assertErrorOnceCompleted("requester QP after REM_INV_REQ_ERR", link.qp());
        assertArrayEquals(new byte[64], link.peer().read(target.id(), 0, 64), "the refused operation did nothing");
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldFailASendLargerThanTheReceiveBufferOnBothSides(PeerMode mode) {
        LocalEnd local = openLocal();
        Link link = connect(local, peer(mode));
        PeerRegion inbox = link.peer().allocate(4096, mask(AccessFlag.LOCAL_WRITE));
        link.peer().postReceive(link.peerQpn(), 5, List.of(new PeerSge(inbox.id(), 0, 16)));
        link.peer().postReceive(link.peerQpn(), 6, List.of(new PeerSge(inbox.id(), 1024, 1024)));
        MemoryRegion source = local.region(4096);
        link.qp().postSend(send(1, SendOpcode.SEND, SendFlag.SIGNALED, source, 0, 64));
        // rxe_resp.c: RESPST_ERR_LENGTH -> do_class_ac_error(NAK invalid request, IB_WC_LOC_LEN_ERR): the
        // requester sees REM_INV_REQ_ERR, the receive completes with LOC_LEN_ERR and the responder QP errors.
        assertCompletion(awaitLocal(local, link.qp()), 1, WorkCompletionStatus.REM_INV_REQ_ERR, null);
        List<Completion> received = awaitPeer(link, 2);
        assertCompletion(received.get(0), 5, WorkCompletionStatus.LOC_LEN_ERR, null);
        assertCompletion(received.get(1), 6, WorkCompletionStatus.WR_FLUSH_ERR, null);
        assertErrorOnceCompleted("requester QP after REM_INV_REQ_ERR", link.qp());
        awaitState("receiver QP after LOC_LEN_ERR", QueuePairState.ERROR, () -> link.peer().state(link.peerQpn()));
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldFailWithRnrRetryExceededWhenNoReceiveIsPosted(PeerMode mode) {
        LocalEnd local = openLocal();
        // Requester: 2 RNR retries. Responder: asks for the shortest RNR delay, code 1 = 10 µs.
        Link link = connect(local, peer(mode), spec(local), ConnectionSpec.defaults().withRnr(1, 2), spec(local),
            ConnectionSpec.defaults().withRnr(1, 7));
        MemoryRegion source = local.region(4096, AccessFlag.LOCAL_WRITE);
        link.qp().postReceive(new ReceiveWorkRequest().wrId(100).local(source, 2048, 64));
        link.qp().postSend(send(1, SendOpcode.SEND, SendFlag.SIGNALED, source, 0, 64));
        link.qp().postSend(send(2, SendOpcode.SEND, 0, source, 0, 64));
        List<Completion> done = awaitLocal(local, link.qp(), 3);
        List<Completion> sends = done.stream().filter(c -> c.wrId() < 100).toList();
        assertEquals(2, sends.size(), () -> "completions: " + done);
        assertCompletion(sends.get(0), 1, WorkCompletionStatus.RNR_RETRY_EXC_ERR, null);
        assertCompletion(sends.get(1), 2, WorkCompletionStatus.WR_FLUSH_ERR, null);
        assertCompletion(done.stream().filter(c -> c.wrId() == 100).findFirst().orElseThrow(), 100,
            WorkCompletionStatus.WR_FLUSH_ERR, null);
        assertEquals(QueuePairState.ERROR, link.qp().state());
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldRetryOnRnrUntilTheReceiveIsPosted(PeerMode mode) {
        LocalEnd local = openLocal();
        Link link = connect(local, peer(mode), spec(local), ConnectionSpec.defaults().withRnr(1, 7), spec(local),
            ConnectionSpec.defaults().withRnr(1, 7));
        MemoryRegion source = local.region(4096);
        byte[] data = Patterns.bytes(33, 64);
        put(source, 0, data);
        link.qp().postSend(send(1, SendOpcode.SEND, SendFlag.SIGNALED, source, 0, 64));
        // rnr_retry 7 retries forever, so without a receive the SEND can neither succeed nor fail.
        assertNoLocalCompletion(local, link.qp());
        assertEquals(QueuePairState.READY_TO_SEND, link.qp().state());
        PeerRegion inbox = link.peer().allocate(4096, mask(AccessFlag.LOCAL_WRITE));
        link.peer().postReceive(link.peerQpn(), 9, List.of(new PeerSge(inbox.id(), 0, 128)));
        assertCompletion(awaitLocal(local, link.qp()), 1, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.SEND);
        Completion received = awaitPeer(link);
        assertCompletion(received, 9, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV);
        assertEquals(64, received.byteLength());
        assertArrayEquals(data, link.peer().read(inbox.id(), 0, 64));
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldFlushEveryOutstandingRequestAfterAnError(PeerMode mode) {
        LocalEnd local = openLocal();
        Link link = connect(local, peer(mode));
        PeerRegion target = link.peer().allocate(4096, ALL_REMOTE);
        link.peer().postReceive(link.peerQpn(), 50, List.of(new PeerSge(target.id(), 2048, 1024)));
        MemoryRegion buffer = local.region(4096, AccessFlag.LOCAL_WRITE);
        link.qp().postReceive(new ReceiveWorkRequest().wrId(101).local(buffer, 2048, 64));
        link.qp().postReceive(new ReceiveWorkRequest().wrId(102).local(buffer, 3072, 64));
        // The failing request is unsignaled: IBA 10.7.3.1, an error always generates a completion.
        link.qp().postSend(send(1, SendOpcode.RDMA_WRITE, 0, buffer, 0, 64)
            .remote(target.address(), target.rkey() ^ 0x5A5A5A5A));
        link.qp().postSend(send(2, SendOpcode.RDMA_WRITE, SendFlag.SIGNALED, buffer, 0, 64)
            .remote(target.address(), target.rkey()));
        link.qp().postSend(send(3, SendOpcode.SEND, 0, buffer, 0, 64));
        link.qp().postSend(send(4, SendOpcode.RDMA_READ, SendFlag.SIGNALED, buffer, 1024, 64)
            .remote(target.address(), target.rkey()));
        List<Completion> done = awaitLocal(local, link.qp(), 6);
        List<Completion> sends = done.stream().filter(c -> c.wrId() < 100).toList();
        List<Completion> receives = done.stream().filter(c -> c.wrId() >= 100).toList();
        assertEquals(4, sends.size(), () -> "send completions: " + done);
        assertCompletion(sends.get(0), 1, WorkCompletionStatus.REM_ACCESS_ERR, null);
        for (int i = 1; i < 4; i++) {
            assertCompletion(sends.get(i), i + 1, WorkCompletionStatus.WR_FLUSH_ERR, null);
        }
        assertEquals(2, receives.size(), () -> "receive completions: " + done);
        assertCompletion(receives.get(0), 101, WorkCompletionStatus.WR_FLUSH_ERR, null);
        assertCompletion(receives.get(1), 102, WorkCompletionStatus.WR_FLUSH_ERR, null);
        assertEquals(QueuePairState.ERROR, link.qp().state());
        assertArrayEquals(new byte[64], link.peer().read(target.id(), 0, 64), "the flushed WRITE never ran");

        link.qp().postSend(send(5, SendOpcode.SEND, 0, buffer, 0, 8));
        assertCompletion(awaitLocal(local, link.qp()), 5, WorkCompletionStatus.WR_FLUSH_ERR, null);
        link.qp().postReceive(new ReceiveWorkRequest().wrId(103).local(buffer, 0, 64));
        assertCompletion(awaitLocal(local, link.qp()), 103, WorkCompletionStatus.WR_FLUSH_ERR, null);
        assertNoLocalCompletion(local, link.qp());
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldRefuseThePeerOnceTheRegionIsDeregistered(PeerMode mode) {
        LocalEnd local = openLocal();
        PeerSide peer = peer(mode);
        PeerRegion source = peer.allocate(4096, mask(AccessFlag.LOCAL_WRITE));
        peer.fillPattern(source.id(), 0, 4096, 35);
        for (SendOpcode opcode : List.of(SendOpcode.RDMA_WRITE, SendOpcode.RDMA_READ)) {
            Link link = connect(local, peer);
            MemoryRegion exposed = local.region(4096, AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE,
                AccessFlag.REMOTE_READ);
            PeerSend request = PeerSend.of(1, opcode, SendFlag.SIGNALED, exposed.address(), exposed.rkey(),
                List.of(new PeerSge(source.id(), 0, 256)));
            peer.postSend(link.peerQpn(), request);
            assertCompletion(awaitPeer(link), 1, WorkCompletionStatus.SUCCESS, opcode.completionOpcode());
            exposed.close();
            assertFalse(exposed.isValid(), "a closed region is no longer valid");
            peer.postSend(link.peerQpn(), PeerSend.of(2, opcode, SendFlag.SIGNALED, exposed.address(),
                exposed.rkey(), List.of(new PeerSge(source.id(), 0, 256))));
            assertCompletion(awaitPeer(link), 2, WorkCompletionStatus.REM_ACCESS_ERR, null);
            awaitState("requester (peer) QP after " + opcode + " with a withdrawn key", QueuePairState.ERROR,
                () -> peer.state(link.peerQpn()));
            awaitState("responder (local) QP", QueuePairState.ERROR, link.qp()::state);
        }
    }

    // =============================================================================================== resources

    @Test
    void shouldRefuseReceivesBeyondTheQueueDepth() {
        LocalEnd local = openLocal();
        QueuePair qp = local.queuePair(spec(local).withDepths(4, 4));
        MemoryRegion buffer = local.region(4096, AccessFlag.LOCAL_WRITE);
        qp.modify(QueuePairAttributes.toInit());
        for (int i = 0; i < 4; i++) {
            qp.postReceive(new ReceiveWorkRequest().wrId(i).local(buffer, 64L * i, 64));
        }
        VerbsException full = assertThrows(VerbsException.class,
            () -> qp.postReceive(new ReceiveWorkRequest().wrId(4).local(buffer, 0, 64)),
            "a fifth receive on a receive queue of depth 4 (nothing consumes receives in INIT)");
        assertEquals(VerbsException.Reason.NO_RESOURCES, full.reason(), "ibv_post_recv returns ENOMEM");
        ReceiveWorkRequest tooManySges = new ReceiveWorkRequest(5).wrId(5);
        for (int i = 0; i < 5; i++) {
            tooManySges.sge(i).set(buffer, 8L * i, 8);
        }
        tooManySges.setSgeCount(5);
        QueuePair other = local.queuePair(spec(local));
        other.modify(QueuePairAttributes.toInit());
        assertThrows(VerbsException.class, () -> other.postReceive(tooManySges), "5 sges on a QP with max_recv_sge 4");
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldRefuseSendsBeyondTheQueueDepth(PeerMode mode) {
        LocalEnd local = openLocal();
        // No receive at the peer and rnr_retry 7: the SENDs can neither complete nor fail, so they stay queued.
        Link link = connect(local, peer(mode), spec(local).withDepths(4, 4), ConnectionSpec.defaults().withRnr(1, 7),
            spec(local), ConnectionSpec.defaults());
        MemoryRegion source = local.region(4096);
        for (int i = 0; i < 4; i++) {
            link.qp().postSend(send(i, SendOpcode.SEND, SendFlag.SIGNALED, source, 0, 8));
        }
        VerbsException full = assertThrows(VerbsException.class,
            () -> link.qp().postSend(send(4, SendOpcode.SEND, SendFlag.SIGNALED, source, 0, 8)),
            "a fifth send on a send queue of depth 4 whose sends cannot complete");
        assertEquals(VerbsException.Reason.NO_RESOURCES, full.reason(), "ibv_post_send returns ENOMEM");
        SendWorkRequest tooManySges = new SendWorkRequest(5).wrId(5).opcode(SendOpcode.SEND);
        for (int i = 0; i < 5; i++) {
            tooManySges.sge(i).set(source, 8L * i, 8);
        }
        tooManySges.setSgeCount(5);
        assertThrows(VerbsException.class, () -> link.qp().postSend(tooManySges), "5 sges with max_send_sge 4");
        assertEquals(QueuePairState.READY_TO_SEND, link.qp().state(), "refused posts leave the QP alone");
        PeerRegion inbox = link.peer().allocate(4096, mask(AccessFlag.LOCAL_WRITE));
        for (int i = 0; i < 4; i++) {
            link.peer().postReceive(link.peerQpn(), i, List.of(new PeerSge(inbox.id(), 64L * i, 64)));
        }
        List<Completion> done = awaitLocal(local, link.qp(), 4);
        for (int i = 0; i < 4; i++) {
            assertCompletion(done.get(i), i, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.SEND);
        }
        link.qp().postSend(send(6, SendOpcode.SEND, 0, source, 0, 8)); // room again once completions were made
    }

    @Test
    void shouldDropPostedRequestsWithoutCompletionsOnResetAndDestroy() {
        LocalEnd local = openLocal();
        MemoryRegion buffer = local.region(4096, AccessFlag.LOCAL_WRITE);
        QueuePair reset = local.queuePair(spec(local));
        reset.modify(QueuePairAttributes.toInit());
        reset.postReceive(new ReceiveWorkRequest().wrId(1).local(buffer, 0, 64));
        reset.postReceive(new ReceiveWorkRequest().wrId(2).local(buffer, 64, 64));
        // ibv_modify_qp(3) to RESET: the queues are emptied, no completions are generated.
        reset.modify(new QueuePairAttributes().state(QueuePairState.RESET));
        assertNoLocalCompletion(local, reset);
        reset.modify(QueuePairAttributes.toInit());
        reset.modify(new QueuePairAttributes().state(QueuePairState.ERROR));
        assertNoLocalCompletion(local, reset); // nothing left to flush: RESET dropped the receives

        QueuePair destroyed = local.queuePair(spec(local));
        int qpn = destroyed.queuePairNumber();
        destroyed.modify(QueuePairAttributes.toInit());
        destroyed.postReceive(new ReceiveWorkRequest().wrId(3).local(buffer, 128, 64));
        // ibv_destroy_qp(3): outstanding requests disappear without completions.
        destroyed.close();
        List<Completion> after = local.await(destroyed, 1, QUIET_NS);
        assertTrue(after.isEmpty(), () -> "completions for destroyed QP 0x" + Integer.toHexString(qpn) + ": " + after);
        assertThrows(VerbsException.class, () -> destroyed.postReceive(new ReceiveWorkRequest().wrId(4)
            .local(buffer, 0, 64)), "posting to a destroyed QP");
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldRouteSendAndReceiveCompletionsToTheirOwnQueues(PeerMode mode) {
        LocalEnd local = openLocal();
        PeerSide peer = peer(mode);
        CompletionQueue sendQueue = local.context().createCompletionQueue(16);
        CompletionQueue receiveQueue = local.context().createCompletionQueue(16);
        QueuePair qp = local.domain().createQueuePair(new QueuePairInitAttributes(sendQueue, receiveQueue, 8, 8, 4, 4,
            0, false));
        PeerQueuePair peerQp = peer.createQueuePair(spec(local));
        Future<?> peerConnect = BACKGROUND.submit(() -> peer.connect(peerQp.queuePairNumber(), qp.localEndpoint(),
            ConnectionSpec.defaults()));
        InProcessPeer.connect(qp, peerQp.endpoint(), ConnectionSpec.defaults());
        join(peerConnect);
        MemoryRegion buffer = local.region(4096, AccessFlag.LOCAL_WRITE);
        PeerRegion inbox = peer.allocate(4096, mask(AccessFlag.LOCAL_WRITE));
        qp.postReceive(new ReceiveWorkRequest().wrId(7).local(buffer, 1024, 64));
        peer.postReceive(peerQp.queuePairNumber(), 1, List.of(new PeerSge(inbox.id(), 0, 64)));
        qp.postSend(send(8, SendOpcode.SEND, SendFlag.SIGNALED, buffer, 0, 16));
        peer.postSend(peerQp.queuePairNumber(), PeerSend.of(2, SendOpcode.SEND, SendFlag.SIGNALED, 0, 0,
            List.of(new PeerSge(inbox.id(), 512, 16))));
        WorkCompletion[] out = WorkCompletion.array(4);
        assertEquals(1, pollOne(sendQueue, out), "one completion on the send queue's CQ");
        assertCompletion(Completion.of(out[0]), 8, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.SEND);
        assertEquals(1, pollOne(receiveQueue, out), "one completion on the receive queue's CQ");
        assertCompletion(Completion.of(out[0]), 7, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.RECV);
        assertEquals(0, sendQueue.poll(out, 4), "the receive completion did not go to the send CQ");
        assertEquals(0, receiveQueue.poll(out, 4), "the send completion did not go to the receive CQ");
        qp.close();
    }

    private static int pollOne(CompletionQueue queue, WorkCompletion[] out) {
        return queue.poll(out, 1, WAIT_NS);
    }

    @Test
    void shouldRefuseToCloseObjectsStillInUse() {
        try (Context context = Verbs.device(deviceName()).open()) {
            var domain = context.allocateProtectionDomain();
            CompletionQueue queue = context.createCompletionQueue(16);
            MemoryRegion region = domain.allocateMemory(4096, AccessFlag.LOCAL_WRITE);
            QueuePair qp = domain.createQueuePair(QueuePairInitAttributes.of(queue).withDepths(4, 4)
                .withMaxInlineData(0));
            assertThrows(VerbsException.class, domain::close, "ibv_dealloc_pd with a QP and an MR: EBUSY");
            assertThrows(VerbsException.class, queue::close, "ibv_destroy_cq with a QP on it: EBUSY");
            qp.close();
            assertThrows(VerbsException.class, domain::close, "ibv_dealloc_pd with an MR: EBUSY");
            region.close();
            assertFalse(region.isValid(), "a deregistered region says so");
            region.close(); // idempotent
            domain.close();
            queue.close();
        }
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldFailRequestsToAPeerThatWentAway(PeerMode mode) {
        LocalEnd local = openLocal();
        PeerSide peer = peer(mode);
        // retry_cnt 2 with a short ACK timeout: rxe treats retry_cnt 7 as "retry forever".
        Link link = connect(local, peer, spec(local), ConnectionSpec.defaults().withRetry(2, 10), spec(local),
            ConnectionSpec.defaults());
        PeerRegion target = peer.allocate(4096, ALL_REMOTE);
        MemoryRegion buffer = local.region(4096, AccessFlag.LOCAL_WRITE);
        link.qp().postSend(send(1, SendOpcode.RDMA_WRITE, SendFlag.SIGNALED, buffer, 0, 64)
            .remote(target.address(), target.rkey()));
        assertCompletion(awaitLocal(local, link.qp()), 1, WorkCompletionStatus.SUCCESS,
            WorkCompletionOpcode.RDMA_WRITE);
        if (peer instanceof RemotePeer remote) {
            remote.killProcess(); // the kernel destroys a dead process's QPs and MRs
        } else {
            peer.destroyQueuePair(link.peerQpn()); // ibv_destroy_qp: the QP stops answering
        }
        link.qp().postSend(send(2, SendOpcode.RDMA_WRITE, SendFlag.SIGNALED, buffer, 0, 64)
            .remote(target.address(), target.rkey()));
        link.qp().postSend(send(3, SendOpcode.RDMA_READ, SendFlag.SIGNALED, buffer, 1024, 64)
            .remote(target.address(), target.rkey()));
        List<Completion> done = awaitLocal(local, link.qp(), 2);
        // A QP that no longer exists does not answer: the request exhausts its retries (RETRY_EXC_ERR). A provider
        // whose transport noticed the loss first (a closed connection) may already have moved the QP to ERR, in
        // which case the request is flushed. Success is never right: the responder's memory is gone.
        assertTrue(done.get(0).status() == WorkCompletionStatus.RETRY_EXC_ERR
                || done.get(0).status() == WorkCompletionStatus.WR_FLUSH_ERR,
            "a WRITE to a peer that went away fails with RETRY_EXC_ERR (or is flushed), got " + done.get(0));
        assertEquals(2, done.get(0).wrId());
        assertCompletion(done.get(1), 3, WorkCompletionStatus.WR_FLUSH_ERR, null);
        awaitState("QP connected to a peer that went away", QueuePairState.ERROR, link.qp()::state);
    }

    // =============================================================================================== counters

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldCountTrafficAndErrorsOnTheRightSide(PeerMode mode) {
        LocalEnd local = openLocal();
        PeerSide peer = peer(mode);
        Map<Counter, Long> localBefore = local.context().counters();
        Map<Counter, Long> peerBefore = peer.counters();
        Link link = connect(local, peer);
        PeerRegion inbox = peer.allocate(4096, ALL_REMOTE);
        MemoryRegion source = local.region(4096);
        peer.postReceive(link.peerQpn(), 1, List.of(new PeerSge(inbox.id(), 0, 4096)));
        link.qp().postSend(send(1, SendOpcode.SEND, SendFlag.SIGNALED, source, 0, 1000));
        assertCompletion(awaitLocal(local, link.qp()), 1, WorkCompletionStatus.SUCCESS, WorkCompletionOpcode.SEND);
        awaitPeer(link);
        assertCounted(local.context().counters(), localBefore, Counter.PORT_XMIT_DATA, 1000, "sender");
        assertCounted(local.context().counters(), localBefore, Counter.RDMA_SENDS, 1, "sender");
        assertCounted(peer.counters(), peerBefore, Counter.PORT_RCV_DATA, 1000, "receiver");
        assertCounted(peer.counters(), peerBefore, Counter.RDMA_RECVS, 1, "receiver");

        Link rnr = connect(local, peer, spec(local), ConnectionSpec.defaults().withRnr(1, 1), spec(local),
            ConnectionSpec.defaults());
        rnr.qp().postSend(send(2, SendOpcode.SEND, SendFlag.SIGNALED, source, 0, 8));
        assertCompletion(awaitLocal(local, rnr.qp()), 2, WorkCompletionStatus.RNR_RETRY_EXC_ERR, null);
        assertCounted(local.context().counters(), localBefore, Counter.RCVD_RNR_ERR, 1, "requester that got RNR");
        assertCounted(local.context().counters(), localBefore, Counter.RNR_NAK_RETRY_ERR, 1,
            "requester out of RNR retries");

        Link denied = connect(local, peer);
        denied.qp().postSend(send(3, SendOpcode.RDMA_WRITE, SendFlag.SIGNALED, source, 0, 8)
            .remote(inbox.address(), inbox.rkey() ^ 0x5A5A5A5A));
        assertCompletion(awaitLocal(local, denied.qp()), 3, WorkCompletionStatus.REM_ACCESS_ERR, null);
        assertCounted(local.context().counters(), localBefore, Counter.REQ_REMOTE_ACCESS_ERRORS, 1, "requester");
        // Counter.REMOTE_ACCESS_ERRORS: "remote access errors detected as responder" - the peer's context counts it.
        assertCounted(peer.counters(), peerBefore, Counter.REMOTE_ACCESS_ERRORS, 1, "responder");
    }

    private static void assertCounted(Map<Counter, Long> after, Map<Counter, Long> before, Counter counter,
                                      long atLeast, String side) {
        long delta = after.getOrDefault(counter, 0L) - before.getOrDefault(counter, 0L);
        assertTrue(delta >= atLeast, counter.linuxName() + " of the " + side + " grew by " + delta
            + ", expected at least " + atLeast);
    }

    // =============================================================================================== direct access

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldMapRemoteMemoryWhenDirectAccessIsSupported(PeerMode mode) {
        LocalEnd local = openLocal();
        Link link = connect(local, peer(mode));
        assumeTrue(link.qp().supportsDirectAccess(), "provider offers no direct access");
        PeerSide peer = link.peer();
        PeerRegion writable = peer.allocate(4096, mask(AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE,
            AccessFlag.REMOTE_READ));
        PeerRegion readable = peer.allocate(4096, mask(AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_READ));
        QueuePair qp = link.qp();

        MemorySegment view = qp.mapRemote(writable.address() + 64, 256, writable.rkey(), true);
        assertEquals(256, view.byteSize(), "the view covers what was asked");
        Patterns.fill(view, 0, 256, 41);
        assertArrayEquals(Patterns.bytes(41, 256), peer.read(writable.id(), 64, 256), "stores reach the peer");
        peer.write(writable.id(), 64, Patterns.bytes(42, 32));
        assertEquals(-1, Patterns.firstMismatch(view, 0, 32, 42), "loads see the peer's stores");

        peer.fillPattern(readable.id(), 0, 128, 43);
        MemorySegment readOnly = qp.mapRemote(readable.address(), 128, readable.rkey(), false);
        assertEquals(-1, Patterns.firstMismatch(readOnly, 0, 128, 43), "a read view shows the peer's bytes");

        assertMapRefused(qp, readable.address(), 128, readable.rkey(), true, "writable view without REMOTE_WRITE");
        assertMapRefused(qp, writable.address(), 4097, writable.rkey(), false, "range past the region");
        assertMapRefused(qp, writable.address() - 8, 16, writable.rkey(), false, "range before the region");
        assertMapRefused(qp, writable.address(), 64, writable.rkey() ^ 0x5A5A5A5A, false, "unknown rkey");
        peer.deregister(writable.id());
        assertMapRefused(qp, writable.address(), 64, writable.rkey(), false, "deregistered region");
    }

    private static void assertMapRefused(QueuePair qp, long address, long length, int rkey, boolean write,
                                         String why) {
        VerbsException e = assertThrows(VerbsException.class, () -> qp.mapRemote(address, length, rkey, write),
            "mapRemote must refuse: " + why);
        assertEquals(VerbsException.Reason.PERMISSION_DENIED, e.reason(), why);
    }

    @ParameterizedTest
    @EnumSource(PeerMode.class)
    void shouldRefuseMapRemoteWithoutDirectAccess(PeerMode mode) {
        LocalEnd local = openLocal();
        Link link = connect(local, peer(mode));
        assumeFalse(link.qp().supportsDirectAccess(), "provider offers direct access");
        PeerRegion region = link.peer().allocate(4096, ALL_REMOTE);
        VerbsException e = assertThrows(VerbsException.class,
            () -> link.qp().mapRemote(region.address(), 64, region.rkey(), false));
        assertEquals(VerbsException.Reason.UNSUPPORTED, e.reason());
    }
}
