package io.jccl.collectives;

import io.jccl.collectives.store.PrefixStore;
import io.jccl.collectives.store.Store;
import io.jccl.collectives.tuning.Algorithm;
import io.jccl.collectives.tuning.AlgorithmFilter;
import io.jccl.collectives.tuning.CostModel;
import io.jccl.collectives.tuning.LinkParameters;
import io.jccl.collectives.tuning.TuningParameters;
import io.jccl.common.CpuAffinity;
import io.jccl.common.Log;
import io.jccl.common.SecureIds;
import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.MemoryRegion;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * A group of ranks that run collectives together (NCCL's {@code ncclComm_t}, MPI's communicator).
 *
 * <p>Create one per rank with {@link #create(Store, int, int, CommunicatorOptions)} or
 * {@link #fromEnvironment()} (torchrun, Open MPI, Slurm or JCCL_* variables). Every rank publishes its host identity
 * and queue-pair endpoints through the store; peers on the same host connect over {@code shm0}, others over
 * {@code tcp0}. When every rank shares a host and can map its peers' memory, the direct algorithms load and store
 * peers' staging buffers instead of sending messages.
 *
 * <p>Buffers are {@link MemorySegment}s and counts are in elements. Native segments are used in place (senders
 * register them once and cache the registration; {@link #allocate} memory is registered already); heap segments
 * (over Java arrays) are copied into native bounce buffers first and back afterwards, which costs a copy each way.
 * In-place operations pass the same segment twice (or use the in-place overloads).
 *
 * <p>Operations on one communicator complete in issue order. Blocking calls run on the calling thread; the
 * {@code *Async} variants run on the communicator's single executor thread and return a future. Every wait has a
 * deadline ({@code JCCL_TIMEOUT}, default 10 minutes); {@link #abort()} from any thread fails waiters promptly; a dead
 * peer fails pending and later operations with {@link CollectiveException.PeerFailure} naming it; ranks calling
 * different operations at one sequence number get {@link CollectiveException.Mismatch} with both signatures. The
 * {@link #flightRecorder()} keeps the last operations and is dumped to the log on failure.
 */
public final class Communicator implements AutoCloseable {
    /** Color for {@link #split} meaning "not in any new communicator". */
    public static final int UNDEFINED = -1;

    private final int rank;
    private final int size;
    private final CommunicatorOptions options;
    private final Store store;
    private final Store ownedStore;
    private final Log log = Log.get();
    private final FlightRecorder recorder;
    private final AlgorithmFilter filter;
    private Transport transport;
    private Engine engine;
    private TuningParameters tuning;
    private final Signature sig = new Signature();
    private final List<MemoryRegion> allocated = new ArrayList<>();
    private final Map<Transport.DeviceResources, RegistrationCache> caches = new LinkedHashMap<>();
    private RegistrationCache lastCache;
    private final Object turn = new Object();
    /** Tickets: the next one to hand out, the number of operations finished, threads waiting in awaitTurn. */
    private volatile long nextTicket;
    private volatile long served;
    private volatile int turnWaiters;
    private static final java.lang.invoke.VarHandle NEXT_TICKET;

    static {
        try {
            NEXT_TICKET = java.lang.invoke.MethodHandles.lookup().findVarHandle(Communicator.class, "nextTicket",
                long.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
        loadSegmentKinds();
    }

    /**
     * Loads the JDK's heap-segment classes before any collective runs. Until the first heap segment exists,
     * C2 compiles every memory access of the collectives for the one segment class it has seen (a class-hierarchy
     * assumption, not a guarded guess); the first {@code allReduce(int[])} or {@code broadcast(float[])} then
     * loads a new class, and HotSpot throws away all that compiled code at once ("made not entrant: marked for
     * deoptimization": 30-60 methods per rank, measured in {@code jccl demo}) to recompile it while the ranks run,
     * which on a shared host stalled the demo's next collectives to 0.3-3 ms each. Loaded up front, the compiled
     * code guards on the classes its profiles saw instead, and a new kind of segment costs nothing.
     */
    private static void loadSegmentKinds() {
        // Loaded, not initialised: loading is what changes the class hierarchy, and it takes no segment machinery
        // (making the segments themselves cost each rank ~5 ms of start-up).
        String impl = "jdk.internal.foreign.HeapMemorySegmentImpl$Of";
        for (String kind : new String[] {"Byte", "Char", "Short", "Int", "Long", "Float", "Double"}) {
            try {
                Class.forName(impl.concat(kind), false, null);
            } catch (ClassNotFoundException | LinkageError e) {
                return; // another JDK: nothing to preload, nothing lost but the deoptimisation this avoids
            }
        }
    }
    private ExecutorService executor;
    private long opSeq;
    private int splitSeq;
    private int windowSeq;
    private volatile boolean aborted;
    private volatile String abortReason;
    private volatile CollectiveException failure;
    private volatile boolean closed;
    private final Arena bounceArena = Arena.ofShared();
    private final MemorySegment[] bounce = new MemorySegment[3];
    private List<PendingP2p> group;
    private final String[] hosts;
    /** Devices this rank tried to open at creation, opened or not (tests check that unneeded ones were not). */
    final java.util.Set<String> devicesTried = new java.util.LinkedHashSet<>();
    private int[] localGroup;
    private int[] leaderGroup;

    private record PendingP2p(boolean send, MemorySegment buf, long count, DataType type, int peer) {
    }

    private Communicator(Store store, Store ownedStore, int rank, int size, CommunicatorOptions options) {
        this.store = store;
        this.ownedStore = ownedStore;
        this.rank = rank;
        this.size = size;
        this.options = options;
        this.recorder = new FlightRecorder(options.flightRecorderCapacity());
        this.filter = AlgorithmFilter.parse(options.algorithms());
        this.hosts = new String[size];
    }

    // ============================================================================================ creation

    /**
     * Joins a communicator of {@code size} ranks as {@code rank}, rendezvousing through {@code store} (which the
     * caller keeps ownership of). Blocks until every rank has joined and connected, or the options' timeout passes.
     *
     * @throws CollectiveException.Refused when another job's rank or a wrong secret is met, or settings differ
     */
    public static Communicator create(Store store, int rank, int size, CommunicatorOptions options) {
        return create(store, null, rank, size, options);
    }

    /** {@link #create(Store, int, int, CommunicatorOptions)} with {@link CommunicatorOptions#fromEnvironment()}. */
    public static Communicator create(Store store, int rank, int size) {
        return create(store, rank, size, CommunicatorOptions.fromEnvironment());
    }

    /**
     * Joins using the launcher's environment: JCCL_RANK/JCCL_WORLD_SIZE/JCCL_STORE_ADDR, torchrun
     * (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), Open MPI (OMPI_COMM_WORLD_RANK/SIZE plus JCCL_STORE_ADDR or
     * MASTER_ADDR) or Slurm (SLURM_PROCID, SLURM_NTASKS, first host of SLURM_NODELIST). Rank 0 runs the TCP store
     * server unless JCCL_STORE_SERVER=0. The communicator owns (and closes) the store.
     */
    public static Communicator fromEnvironment() {
        return fromEnvironment(CommunicatorOptions.fromEnvironment());
    }

    /** {@link #fromEnvironment()} with explicit options. */
    public static Communicator fromEnvironment(CommunicatorOptions options) {
        LaunchEnvironment env = LaunchEnvironment.detect(System.getenv());
        Store s = env.openStore(options.timeoutNs());
        try {
            return create(s, s, env.rank(), env.worldSize(), options);
        } catch (RuntimeException e) {
            s.close();
            throw e;
        }
    }

    private static Communicator create(Store base, Store owned, int rank, int size, CommunicatorOptions options) {
        if (size < 1 || rank < 0 || rank >= size) {
            throw new IllegalArgumentException("rank " + rank + " outside 0.." + (size - 1) + " (size " + size + ")");
        }
        Store store = new PrefixStore("jccl/" + options.name(), base);
        Communicator c = new Communicator(store, owned, rank, size, options);
        try {
            c.init();
        } catch (RuntimeException e) {
            c.closeResources();
            throw e;
        }
        return c;
    }

    private static String hostIdentity(CommunicatorOptions o) {
        if (o.hostId() != null && !o.hostId().isBlank()) {
            return o.hostId();
        }
        String boot = "";
        try {
            boot = Files.readString(Path.of("/proc/sys/kernel/random/boot_id")).trim();
        } catch (Exception ignored) {
            // not Linux
        }
        return boot + "@" + Log.host();
    }

    private String hmac(String secret, String message) {
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(secret.getBytes(StandardCharsets.UTF_8), "HmacSHA256"));
            return HexFormat.of().formatHex(mac.doFinal(message.getBytes(StandardCharsets.UTF_8)));
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 unavailable", e);
        }
    }

    private void init() {
        long deadline = System.nanoTime() + options.timeoutNs();
        String hostId = hostIdentity(options);
        long pid = io.jccl.common.ProcessIds.self();
        List<String> order = preferredDevices();
        // Devices this rank opened, published so that both sides of a pair pick the same one. Same-host devices
        // (shared memory) open now; network devices only once some pair turns out to need one (below): on one
        // host they would go unused, and opening tcp0 (sockets, selector, interface scan) costs a rank 20-45 ms of
        // start-up on this machine kind.
        Map<String, Transport.DeviceResources> opened = new LinkedHashMap<>();
        Map<String, String> unavailable = new LinkedHashMap<>();
        int cqCapacity = Math.max(1024, 2 * size * (2 * options.slots() + 64) + 64);
        if (size > 1) {
            openDevices(order, true, cqCapacity, opened, unavailable);
        }
        String nonce = Long.toHexString(SecureIds.nonce());
        String devs = String.join(",", opened.keySet());
        String body = "v1|" + options.jobId() + "|" + rank + "|" + size + "|" + hostId + "|" + pid + "|"
            + fingerprintHash() + "|" + devs + "|" + nonce;
        String proof = options.authSecret() == null ? "-" : hmac(options.authSecret(), body);
        byte[] hello = (body + "|" + proof).getBytes(StandardCharsets.UTF_8);
        String helloKey = "hello/" + rank;
        if (!store.compareAndSet(helloKey, null, hello, remaining(deadline))) {
            String other = new String(store.get(helloKey, remaining(deadline)), StandardCharsets.UTF_8);
            String[] f = other.split("\\|");
            closeDevices(opened);
            throw new CollectiveException.Refused("rank " + rank + " is already taken in " + store.describe() + " by "
                + (f.length > 1 && !f[1].equals(options.jobId()) ? "job '" + f[1] + "' (this is job '"
                + options.jobId() + "')" : "another process of this job") + "; is another job using the same store "
                + "address, or was a rank started twice?");
        }
        String[][] peersHello = new String[size][];
        for (int j = 0; j < size; j++) {
            String text = new String(store.get("hello/" + j, remaining(deadline)), StandardCharsets.UTF_8);
            String[] f = text.split("\\|", -1);
            String why = null;
            if (f.length != 10 || !f[0].equals("v1")) {
                why = "rank " + j + " sent a malformed join record (another program or JCCL version?)";
            } else if (!f[1].equals(options.jobId())) {
                why = "rank " + j + " belongs to job '" + f[1] + "', but this rank is in job '" + options.jobId()
                    + "' (JCCL_JOB_ID); refusing to mix jobs";
            } else if (Integer.parseInt(f[3]) != size) {
                why = "rank " + j + " expects " + f[3] + " ranks, this rank expects " + size;
            } else if (!f[6].equals(fingerprintHash())) {
                why = "rank " + j + " runs with different JCCL settings (chunk/slots/direct/JCCL_ALGO/JCCL_TRANSPORT "
                    + "must match on every rank)";
            } else if (options.authSecret() != null) {
                String expected = hmac(options.authSecret(), String.join("|", Arrays.copyOf(f, 9)));
                if (!MessageDigest.isEqual(expected.getBytes(StandardCharsets.UTF_8),
                    f[9].getBytes(StandardCharsets.UTF_8))) {
                    why = "rank " + j + " did not prove knowledge of JCCL_AUTH_SECRET (wrong or missing secret)";
                }
            } else if (!f[9].equals("-")) {
                why = "rank " + j + " authenticates with JCCL_AUTH_SECRET but this rank has no secret set";
            }
            if (why != null) {
                closeDevices(opened);
                throw new CollectiveException.Refused("rank " + rank + " refuses to join " + store.describe() + ": "
                    + why);
            }
            peersHello[j] = f;
            hosts[j] = f[4];
        }
        // Choose a device per peer: the first of the preferred order that both ends opened. A pair whose choice
        // reaches a network device first needs the network devices of both ends, which open now, and a second
        // exchange says which each end opened (pairs are symmetric: both ends of such a pair take part).
        Peer[] peers = new Peer[size];
        boolean allSameHost = true;
        boolean[] sameHost = new boolean[size];
        String[] choice = new String[size];
        StringBuilder[] why = new StringBuilder[size];
        List<List<String>> theirDevices = new ArrayList<>();
        boolean needNetwork = false;
        for (int j = 0; j < size; j++) {
            theirDevices.add(j == rank ? List.of() : new ArrayList<>(Arrays.asList(peersHello[j][7].split(","))));
            if (j != rank) {
                sameHost[j] = peersHello[j][4].equals(hostId);
                allSameHost &= sameHost[j];
                why[j] = new StringBuilder();
                choice[j] = chooseDevice(order, j, sameHost[j], peersHello[j][4], opened, unavailable,
                    theirDevices.get(j), true, why[j]);
                needNetwork |= NETWORK_NEEDED.equals(choice[j]);
            }
        }
        if (needNetwork) {
            openDevices(order, false, cqCapacity, opened, unavailable);
            List<String> network = new ArrayList<>();
            for (String d : opened.keySet()) {
                if (!isSameHostDevice(d)) {
                    network.add(d);
                }
            }
            store.setString("devices/" + rank, network.isEmpty() ? "-" : String.join(",", network),
                remaining(deadline));
            for (int j = 0; j < size; j++) {
                if (j != rank && NETWORK_NEEDED.equals(choice[j])) {
                    String theirs = store.getString("devices/" + j, remaining(deadline));
                    if (!theirs.equals("-")) {
                        theirDevices.get(j).addAll(Arrays.asList(theirs.split(",")));
                    }
                    why[j] = new StringBuilder();
                    choice[j] = chooseDevice(order, j, sameHost[j], peersHello[j][4], opened, unavailable,
                        theirDevices.get(j), false, why[j]);
                }
            }
        }
        for (int j = 0; j < size; j++) {
            if (j == rank) {
                continue;
            }
            String chosen = choice[j];
            StringBuilder reasons = why[j];
            if (chosen == null) {
                closeDevices(opened);
                throw new CollectiveException("rank " + rank + " has no transport in common with rank " + j + ": "
                    + reasons + "(JCCL_TRANSPORT=" + options.transports() + ")");
            }
            String reason = (isSameHostDevice(chosen) ? "same host, shared memory"
                : reasons.isEmpty() ? (sameHost[j] ? "same host" : "different host") + ", " + chosen + " requested"
                : reasons.toString()).trim();
            if (!reasons.isEmpty() && order.indexOf(chosen) > 0 && sameHost[j]) {
                log.warn(rank, Log.Subsys.INIT, "falling back to " + chosen + " for rank " + j + ": " + reasons);
            }
            peers[j] = new Peer(j, opened.get(chosen), reason.endsWith(";") ? reason.substring(0, reason.length() - 1)
                : reason);
            peers[j].chunkBytes = options.chunkBytesFor(chosen);
            peers[j].slotBytes = Signature.BYTES + peers[j].chunkBytes;
            peers[j].host = peersHello[j][4];
            peers[j].pid = Long.parseLong(peersHello[j][5]);
            peers[j].sameHost = sameHost[j];
        }
        devicesTried.addAll(opened.keySet());
        devicesTried.addAll(unavailable.keySet());
        // Close devices nobody uses.
        Map<String, Transport.DeviceResources> used = new LinkedHashMap<>();
        for (Peer p : peers) {
            if (p != null) {
                used.put(p.device.name, p.device);
            }
        }
        for (var e : opened.entrySet()) {
            if (!used.containsKey(e.getKey())) {
                Transport.closeQuietly(e.getValue().context);
            }
        }
        transport = new Transport(this, rank, size, options.slots(), peers, used);
        boolean wantDirect = size > 1 && allSameHost && used.size() == 1 && !options.directDisabled();
        if (wantDirect) {
            Transport.DeviceResources d = used.values().iterator().next();
            transport.control = d.pd.allocateMemory(Transport.CONTROL_BYTES, AccessFlag.LOCAL_WRITE,
                AccessFlag.REMOTE_READ, AccessFlag.REMOTE_WRITE);
            transport.staging = d.pd.allocateMemory(2 * options.directBytes(), AccessFlag.LOCAL_WRITE,
                AccessFlag.REMOTE_READ, AccessFlag.REMOTE_WRITE);
            transport.directStagingBytes = options.directBytes();
        }
        transport.createQueuePairs();
        for (Peer p : peers) {
            if (p != null) {
                store.setString(Transport.key("ep", rank, p.rank), transport.localRecord(p), remaining(deadline));
            }
        }
        boolean mapped = wantDirect;
        for (Peer p : peers) {
            if (p != null) {
                String record = store.getString(Transport.key("ep", p.rank, rank), remaining(deadline));
                mapped &= transport.connect(p, record, wantDirect);
            }
        }
        // Nobody sends before every rank has connected all its queue pairs (a message to a QP still in INIT
        // would be retried only a few times by a real transport).
        store.setString("connected/" + rank, "1", remaining(deadline));
        for (int j = 0; j < size; j++) {
            store.get("connected/" + j, remaining(deadline));
        }
        if (wantDirect) {
            store.setString("direct/" + rank, mapped ? "1" : "0", remaining(deadline));
            boolean all = true;
            for (int j = 0; j < size; j++) {
                all &= store.getString("direct/" + j, remaining(deadline)).equals("1");
            }
            transport.direct = all;
        }
        engine = new Engine(this, transport);
        // Host groups for the hierarchical all-reduce: ranks of this host, and the first rank of every host (in
        // rank order, as ranks are visited in order). Plain loops: streams and lambdas here were first-time code
        // that every rank ran at start-up.
        Map<String, List<Integer>> byHost = new LinkedHashMap<>();
        for (int j = 0; j < size; j++) {
            List<Integer> group = byHost.get(hosts[j]);
            if (group == null) {
                group = new ArrayList<>();
                byHost.put(hosts[j], group);
            }
            group.add(j);
        }
        localGroup = toArray(byHost.get(hosts[rank]));
        List<Integer> leaders = new ArrayList<>();
        boolean sharedHost = false;
        for (List<Integer> group : byHost.values()) {
            leaders.add(group.getFirst());
            sharedHost |= group.size() > 1;
        }
        leaderGroup = toArray(leaders);
        engine.oversubscribed(localGroup.length);
        if (transport.direct && localGroup.length <= Runtime.getRuntime().availableProcessors()) {
            // direct-path waits compare CPUs with the peer's (shared core or late peer); link sched_getcpu aside
            CpuAffinity.prelink();
        }
        if (options.cpuBind()) {
            bindCpu();
        }
        if (localGroup.length > Runtime.getRuntime().availableProcessors()) {
            log.info(rank, Log.Subsys.INIT, localGroup.length + " ranks on this host share "
                + Runtime.getRuntime().availableProcessors() + " cores: waiting yields early (oversubscribed)");
        }
        boolean hierarchy = byHost.size() > 1 && sharedHost;
        LinkParameters intra = null;
        if (hierarchy) {
            java.util.Set<String> intraDevices = new java.util.HashSet<>();
            for (Peer p : peers) {
                if (p != null && p.sameHost) {
                    intraDevices.add(p.device.name);
                }
            }
            intra = messagePath(intraDevices);
        }
        tuning = new TuningParameters(messagePath(used.keySet()), transport.direct
            ? TuningParameters.defaults("direct") : null, TuningParameters.defaultReduceGBps(),
            options.directBytes(), options.chunkBytesFor(used.containsKey("tcp0") ? "tcp0" : "shm0"), byHost.size(),
            intra);
        for (Peer p : peers) {
            if (p != null) {
                log.info(rank, Log.Subsys.INIT, "rank " + rank + " -> rank " + p.rank + " via " + p.device.name + ": "
                    + p.reason + (p.control != null ? "; direct load/store of its buffers" : ""));
            }
        }
        if (size > 1) {
            log.info(rank, Log.Subsys.INIT, "communicator '" + options.name() + "' rank " + rank + "/" + size
                + ": direct algorithms " + (transport.direct ? "on (all-reduce up to " + Engine.INLINE_BYTES
                + " B inline in the arrival records)" : "off" + (wantDirect ? " (mapping failed)"
                : allSameHost ? (options.directDisabled() ? " (JCCL_DIRECT_DISABLE=1)" : "") : " (ranks span hosts)"))
                + ", kernels " + engine.kernels.name() + ", timeout " + TimeUnit.NANOSECONDS.toSeconds(
                options.timeoutNs()) + " s");
            if (rank == 0 && log.enabled(Log.Level.INFO, Log.Subsys.TUNING)) {
                log.info(rank, Log.Subsys.TUNING, CostModel.table(size, tuning, filter));
            }
        } else {
            engine = new Engine(this, transport);
        }
        // Connectivity check with the op deadline machinery: a barrier over the direct path when every rank mapped
        // every peer (what most collectives then use), else over the message path.
        if (size > 1) {
            sig.set(0, Collective.BARRIER, 0, null, null, -1);
            engine.deadlineNs = deadline;
            if (transport.direct) {
                engine.directBarrier(sig, true);
            } else {
                engine.disseminationBarrier(sig);
            }
        }
    }

    /** Threads already bound by {@link #bindCpu()} (a thread that creates several communicators binds once). */
    private static final java.util.Set<Thread> BOUND_THREADS =
        java.util.Collections.synchronizedSet(java.util.Collections.newSetFromMap(new java.util.WeakHashMap<>()));

    /**
     * JCCL_CPU_BIND=core: binds the creating thread to one CPU of the process's mask, chosen by the launcher's local
     * rank (else this rank's index among the ranks of its host), when the local ranks fit the allowed CPUs.
     */
    private void bindCpu() {
        if (!BOUND_THREADS.add(Thread.currentThread())) {
            return;
        }
        List<Integer> cpus = CpuAffinity.allowedCpus();
        int local = -1;
        try {
            local = LaunchEnvironment.detect(System.getenv()).localRank();
        } catch (RuntimeException e) {
            // not started by a launcher: use the position among this host's ranks
        }
        if (local < 0) {
            for (int i = 0; i < localGroup.length; i++) {
                if (localGroup[i] == rank) {
                    local = i;
                }
            }
        }
        String why;
        if (cpus.isEmpty()) {
            why = CpuAffinity.available() ? "the process's CPU mask is unknown" : "sched_setaffinity is unavailable";
        } else if (localGroup.length > cpus.size() || local >= cpus.size()) {
            why = localGroup.length + " local ranks do not fit the " + cpus.size() + " CPUs allowed " + cpus;
        } else {
            why = CpuAffinity.bindCurrentThread(cpus.get(local));
            if (why == null) {
                engine.coresApart = true;
                log.info(rank, Log.Subsys.INIT, "JCCL_CPU_BIND=core: thread '" + Thread.currentThread().getName()
                    + "' bound to CPU " + cpus.get(local) + " (local rank " + local + " of " + localGroup.length + ")");
                return;
            }
        }
        log.info(rank, Log.Subsys.INIT, "JCCL_CPU_BIND=core: not binding: " + why);
    }

    private static void closeDevices(Map<String, Transport.DeviceResources> opened) {
        for (Transport.DeviceResources d : opened.values()) {
            Transport.closeQuietly(d.context);
        }
    }

    private String fingerprintHash() {
        return Integer.toHexString(options.fingerprint().hashCode());
    }

    /** {@link #chooseDevice} result: a network device comes first in the order and has not been opened yet. */
    private static final String NETWORK_NEEDED = "(network)";

    /** Devices that reach only ranks of this host (shared memory). */
    private static boolean isSameHostDevice(String device) {
        return device.startsWith("shm");
    }

    /**
     * Opens the devices of {@code order} of one kind (same-host ones, or network ones) that are not open yet;
     * failures go to {@code unavailable} with their reason.
     */
    private static void openDevices(List<String> order, boolean sameHostDevices, int cqCapacity,
                                    Map<String, Transport.DeviceResources> opened, Map<String, String> unavailable) {
        for (String d : order) {
            if (isSameHostDevice(d) == sameHostDevices && !opened.containsKey(d) && !unavailable.containsKey(d)) {
                try {
                    opened.put(d, Transport.open(d, cqCapacity));
                } catch (RuntimeException e) {
                    unavailable.put(d, e.getMessage());
                }
            }
        }
    }

    /**
     * The device for the pair with rank {@code peer}: the first of {@code order} that both ends opened (and that
     * reaches the peer); null if none, with the reasons in {@code reasons}. With {@code deferNetwork}, reaching a
     * network device this rank has not tried to open yet returns {@link #NETWORK_NEEDED}: the choice then waits
     * for both ends' network devices. Both ends compute the same answer from the same facts.
     */
    private static String chooseDevice(List<String> order, int peer, boolean sameHost, String peerHost,
                                       Map<String, Transport.DeviceResources> opened, Map<String, String> unavailable,
                                       List<String> theirs, boolean deferNetwork, StringBuilder reasons) {
        for (String d : order) {
            if (isSameHostDevice(d) && !sameHost) {
                reasons.append("no shared memory with rank ").append(peer).append(": different host (")
                    .append(peerHost).append("); ");
                continue;
            }
            if (deferNetwork && !isSameHostDevice(d) && !opened.containsKey(d) && !unavailable.containsKey(d)) {
                return NETWORK_NEEDED;
            }
            if (!opened.containsKey(d)) {
                reasons.append(d).append(" unavailable here (").append(unavailable.get(d)).append("); ");
                continue;
            }
            if (!theirs.contains(d)) {
                reasons.append("rank ").append(peer).append(" cannot open ").append(d).append("; ");
                continue;
            }
            return d;
        }
        return null;
    }

    private List<String> preferredDevices() {
        List<String> order = new ArrayList<>();
        if (!options.transports().isBlank()) {
            for (String s : options.transports().split(",")) {
                String d = s.trim();
                if (d.isEmpty()) {
                    continue;
                }
                if (!d.matches(".*\\d$")) {
                    d = d + "0"; // provider name → its first device
                }
                if (d.startsWith("shm") && options.shmDisabled()) {
                    continue;
                }
                order.add(d);
            }
        } else {
            if (!options.shmDisabled()) {
                order.add("shm0");
            }
            order.add("tcp0");
        }
        return order;
    }

    private static LinkParameters messagePath(java.util.Set<String> devices) {
        LinkParameters worst = null;
        for (String d : devices) {
            int end = d.length();
            while (end > 0 && Character.isDigit(d.charAt(end - 1))) {
                end--;
            }
            LinkParameters p = TuningParameters.defaults(d.substring(0, end)); // provider name: device less its index
            if (worst == null || p.latencyUs() > worst.latencyUs()) {
                worst = p;
            }
        }
        return worst == null ? TuningParameters.defaults("shm") : worst;
    }

    private static int[] toArray(List<Integer> values) {
        int[] a = new int[values.size()];
        for (int i = 0; i < a.length; i++) {
            a[i] = values.get(i);
        }
        return a;
    }

    private static long remaining(long deadline) {
        return Math.max(1, deadline - System.nanoTime());
    }

    // ============================================================================================ accessors

    /** This rank (0-based). */
    public int rank() {
        return rank;
    }

    /** Number of ranks. */
    public int size() {
        return size;
    }

    /** The options in force. */
    public CommunicatorOptions options() {
        return options;
    }

    /** The flight recorder of this rank. */
    public FlightRecorder flightRecorder() {
        return recorder;
    }

    /** Whether the direct (mapped shared memory) algorithms are available. */
    public boolean directAvailable() {
        return transport != null && transport.direct;
    }

    /** The device serving {@code peer} (for example {@code shm0}), and why, or "self". */
    public String transportOf(int peer) {
        if (peer == rank) {
            return "self";
        }
        Peer p = transport.peers[peer];
        return p.device.name + " (" + p.reason + ")";
    }

    /** The algorithm the cost model (and JCCL_ALGO) picks for a collective of {@code bytes} (nccl-tests size). */
    public Algorithm algorithmFor(Collective collective, long bytes) {
        return choose(collective, bytes);
    }

    /** The cost-model table for this communicator's size and paths. */
    public String tuningTable() {
        return CostModel.table(size, tuning, filter);
    }

    // ============================================================================================ memory

    /**
     * Allocates {@code bytes} of registered, shareable memory: sending from it needs no registration or copy.
     * Freed when the communicator closes.
     */
    public MemorySegment allocate(long bytes) {
        checkUsable();
        Transport.DeviceResources d = transport.devices.isEmpty() ? null : transport.devices.values().iterator().next();
        if (d == null) {
            return bounceArena.allocate(bytes, 4096);
        }
        MemoryRegion r = d.pd.allocateMemory(bytes, AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_READ,
            AccessFlag.REMOTE_WRITE);
        int id;
        synchronized (allocated) {
            allocated.add(r);
            id = allocated.size() - 1;
        }
        if (transport.direct) {
            // Peers map it on first use, so direct all-reduces read it where it is (no staging copy).
            store.setString("mr/" + rank + "/" + id, Long.toHexString(r.address()) + " "
                + Integer.toHexString(r.rkey()) + " " + r.length(), options.timeoutNs());
        }
        return r.segment();
    }

    /** Offset of the segment last passed to {@link #allocationId} within its allocation. */
    long lastAllocationOffset;

    /** The id of the {@link #allocate} region holding {@code seg} (peers can map it), or -1. */
    int allocationId(MemorySegment seg) {
        if (!seg.isNative() || seg.byteSize() == 0) {
            return -1;
        }
        long a = seg.address();
        synchronized (allocated) {
            for (int i = 0; i < allocated.size(); i++) {
                MemoryRegion r = allocated.get(i);
                if (r.isValid() && a >= r.address() && a + seg.byteSize() <= r.address() + r.length()) {
                    lastAllocationOffset = a - r.address();
                    return i;
                }
            }
        }
        return -1;
    }

    /** Peer {@code p}'s allocation {@code id}, mapped read-only (once; looked up in the store). */
    MemorySegment mappedAllocation(Peer p, int id, long deadlineNs) {
        return mappedAllocation(p, id, deadlineNs, false);
    }

    /** Peer {@code p}'s allocation {@code id}, mapped once per kind (read-only or writable; looked up in the store). */
    MemorySegment mappedAllocation(Peer p, int id, long deadlineNs, boolean writable) {
        java.util.Map<Integer, MemorySegment> maps = writable ? p.writableAllocations : p.allocations;
        MemorySegment m = maps.get(id);
        if (m == null) {
            String[] f = store.getString("mr/" + p.rank + "/" + id, Math.max(1, deadlineNs - System.nanoTime()))
                .split(" ");
            try {
                m = p.qp.mapRemote(Long.parseUnsignedLong(f[0], 16), Long.parseLong(f[2]),
                    Integer.parseUnsignedInt(f[1], 16), writable);
            } catch (RuntimeException e) {
                throw transport.peerFailed(p, "cannot map rank " + p.rank + "'s buffer: " + e.getMessage());
            }
            maps.put(id, m);
        }
        return m;
    }

    MemoryRegion regionFor(Transport.DeviceResources d, MemorySegment seg) {
        RegistrationCache c = caches.get(d);
        if (c == null) {
            c = new RegistrationCache(d.pd, allocated);
            caches.put(d, c);
        }
        lastCache = c;
        return c.regionFor(seg);
    }

    long lastRegionOffset(Transport.DeviceResources d) {
        return lastCache.lastOffset;
    }

    /** A native segment with the contents of {@code seg} (itself when native), for sending from. */
    private MemorySegment nativeOf(MemorySegment seg, long bytes, int slot, boolean copyIn) {
        if (seg.isNative()) {
            return seg;
        }
        MemorySegment b = bounce(slot, bytes);
        if (copyIn) {
            MemorySegment.copy(seg, 0, b, 0, bytes);
        }
        return b;
    }

    private MemorySegment bounce(int slot, long bytes) {
        MemorySegment b = bounce[slot];
        if (b == null || b.byteSize() < bytes) {
            b = bounceArena.allocate(Math.max(bytes, 4096), 4096);
            bounce[slot] = b;
        }
        return b.asSlice(0, bytes);
    }

    /** A one-rank collective's result is its input: copy it over unless the call is in place. */
    private static void copyUnlessInPlace(MemorySegment send, MemorySegment recv, long bytes) {
        if (!same(send, recv)) {
            MemorySegment.copy(send, 0, recv, 0, bytes);
        }
    }

    private static boolean same(MemorySegment a, MemorySegment b) {
        return a == b || a.equals(b) || (a.isNative() && b.isNative() && a.address() == b.address());
    }

    private static void checkSize(MemorySegment seg, long bytes, String what) {
        if (seg == null) {
            throw new IllegalArgumentException(what + " buffer is null");
        }
        if (seg.byteSize() < bytes) {
            throw new IllegalArgumentException(what + " buffer holds " + seg.byteSize() + " bytes, the operation needs "
                + bytes);
        }
    }

    // ============================================================================================ execution

    @FunctionalInterface
    private interface Body {
        void run(Algorithm algorithm);
    }

    private final long[] lastChoiceBytes = new long[Collective.values().length];
    private final Algorithm[] lastChoice = new Algorithm[Collective.values().length];

    private Algorithm choose(Collective c, long bytes) {
        int i = c.ordinal();
        Algorithm a = lastChoice[i];
        if (a != null && lastChoiceBytes[i] == bytes) {
            return a; // training loops repeat sizes: skip the model (and its allocations)
        }
        a = size == 1 ? CostModel.candidates(c).iterator().next() : CostModel.select(c, size, bytes, tuning, filter);
        lastChoice[i] = a;
        lastChoiceBytes[i] = bytes;
        return a;
    }

    private void execute(Collective c, long count, DataType type, ReduceOp op, int root, long bytes, Body body) {
        runTicket(takeTicket(), c, count, type, op, root, bytes, body);
    }

    private long takeTicket() {
        return (long) NEXT_TICKET.getAndAdd(this, 1L);
    }

    private void runTicket(long ticket, Collective c, long count, DataType type, ReduceOp op, int root, long bytes,
                           Body body) {
        awaitTurn(ticket);
        long handle = -1;
        try {
            Algorithm a = choose(c, bytes);
            handle = begin(c, count, type, op, root, bytes, c == Collective.SEND_RECV ? "p2p" : a.shortName());
            body.run(a);
            recorder.end(handle, true, null);
        } catch (RuntimeException e) {
            throw failed(e, handle);
        } finally {
            releaseTurn();
        }
    }

    /** Operations begun (for {@link #TIMED_EVERY}). */
    private long begunOps;
    /** One operation in this many is timed from its start; the rest from their first slow wait, if any. */
    static final int TIMED_EVERY = 16;

    /**
     * Starts the operation holding the turn: usable check, sequence number, signature, deadline, flight recorder,
     * COLL log line. Returns the recorder handle.
     */
    private long begin(Collective c, long count, DataType type, ReduceOp op, int root, long bytes, String algo) {
        checkUsable();
        // Point-to-point and one-sided calls involve some ranks only: they must not advance the collective
        // sequence number that every rank's headers and signatures carry.
        boolean local = c == Collective.SEND_RECV || (c == Collective.WINDOW && root >= 0);
        long seq = local ? opSeq : ++opSeq;
        // Only every TIMED_EVERY-th operation reads the clock here (22 ns a reading on this VM: a quarter of an
        // 8-byte all-reduce between two cores, start and end together). The others are timed, and get their
        // deadline, from their first wait that outlasts the spin (Engine.deadline()): an operation that never
        // waits cannot hang, and the flight recorder marks it untimed.
        long now = ++begunOps % TIMED_EVERY == 0 ? System.nanoTime() : 0;
        long handle = recorder.begin(seq, c, count, type, op, root, algo, now);
        sig.set(seq, c, count, type, op, root);
        engine.opBegan(handle, now, options.timeoutNs());
        if (log.enabled(Log.Level.INFO, Log.Subsys.COLL)) {
            // as NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL: one line per operation
            log.info(rank, Log.Subsys.COLL, sig + " bytes " + bytes + " algo " + algo + " comm '" + options.name()
                + "' nranks " + size);
        }
        return handle;
    }

    /** The failure of the operation holding the turn: recorded, published to peers, dumped; returned to throw. */
    private CollectiveException failed(RuntimeException e, long handle) {
        RuntimeException cause = e;
        if (aborted && !(e instanceof CollectiveException.Aborted)) {
            // a local abort() broke the links; report the abort, not the broken links it caused
            cause = new CollectiveException.Aborted("rank " + rank + " was aborted: " + abortReason, e);
        }
        CollectiveException ce = fail(cause);
        if (handle >= 0) {
            recorder.end(handle, false, ce.getClass().getSimpleName());
        }
        dumpRecorder(ce);
        return ce;
    }

    private void releaseTurn() {
        served = served + 1; // only the turn holder writes it
        if (turnWaiters > 0) {
            synchronized (turn) {
                turn.notifyAll();
            }
        }
    }

    private void awaitTurn(long ticket) {
        if (served == ticket) {
            return;
        }
        synchronized (turn) {
            // Waiters register before re-reading served; releaseTurn writes served before reading turnWaiters
            // (both volatile), so one of the two sees the other and no wake-up is lost (wait(10) bounds it anyway).
            turnWaiters++;
            try {
                while (served != ticket) {
                    try {
                        turn.wait(10);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                        throw new CollectiveException.Aborted("interrupted while waiting for earlier operations", e);
                    }
                }
            } finally {
                turnWaiters--;
            }
        }
    }

    private CompletableFuture<Void> async(Collective c, long count, DataType type, ReduceOp op, int root, long bytes,
                                          Body body) {
        long ticket;
        CompletableFuture<Void> future = new CompletableFuture<>();
        synchronized (turn) {
            // under the lock: tickets reach the single executor thread in increasing order
            ticket = takeTicket();
            if (executor == null) {
                executor = Executors.newSingleThreadExecutor(r -> Thread.ofPlatform().daemon()
                    .name("jccl-comm-" + options.name() + "-r" + rank).unstarted(r));
            }
            executor.execute(() -> {
                try {
                    runTicket(ticket, c, count, type, op, root, bytes, body);
                    future.complete(null);
                } catch (Throwable e) {
                    future.completeExceptionally(e);
                }
            });
        }
        return future;
    }

    void checkNotAborted() {
        if (aborted) {
            throw new CollectiveException.Aborted("communicator '" + options.name() + "' rank " + rank + " was aborted"
                + (abortReason != null ? ": " + abortReason : ""), failure);
        }
    }

    private void checkUsable() {
        if (closed) {
            throw new IllegalStateException("communicator '" + options.name() + "' rank " + rank + " is closed");
        }
        CollectiveException f = failure;
        if (f != null) {
            throw new CollectiveException.Aborted("communicator '" + options.name() + "' rank " + rank + " failed "
                + "earlier and cannot be used (abort it and create a new one): " + f.getMessage(), f);
        }
        checkNotAborted();
    }

    CollectiveException.Timeout timeout(String what) {
        return new CollectiveException.Timeout("rank " + rank + ": " + sig + " timed out after "
            + TimeUnit.NANOSECONDS.toMillis(options.timeoutNs()) + " ms (JCCL_TIMEOUT) " + what);
    }

    CollectiveException.Mismatch mismatch(String message) {
        return new CollectiveException.Mismatch("collective mismatch: " + message);
    }

    /** Records the first failure, tells peers (QPs to ERROR, status word, store key) and returns it. */
    private CollectiveException fail(RuntimeException e) {
        CollectiveException ce;
        if (e instanceof CollectiveException x) {
            ce = x;
        } else {
            ce = new CollectiveException("rank " + rank + ": " + e, e);
        }
        if (ce instanceof CollectiveException.PeerFailure pf && failure == null) {
            String remote = remoteError(pf.rank());
            if (remote != null) {
                ce = new CollectiveException.PeerFailure(pf.rank(), pf.getMessage() + "; rank " + pf.rank()
                    + " reported: " + remote);
            }
        }
        boolean first;
        synchronized (this) {
            first = failure == null && !(ce instanceof CollectiveException.Aborted && aborted);
            if (first) {
                failure = ce;
            }
        }
        if (first) {
            // Publish the reason before breaking the links, so peers that notice the broken links can report it.
            try {
                store.setString("error/" + rank, ce.getMessage(), TimeUnit.MILLISECONDS.toNanos(500));
            } catch (RuntimeException ignored) {
                // the store may be gone with rank 0
            }
            if (transport != null) {
                transport.abortLinks();
            }
        }
        return ce;
    }

    private String remoteError(int peer) {
        long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(500);
        while (System.nanoTime() < until) {
            try {
                if (store.check("error/" + peer, TimeUnit.MILLISECONDS.toNanos(200))) {
                    return store.getString("error/" + peer, TimeUnit.MILLISECONDS.toNanos(200));
                }
            } catch (RuntimeException e) {
                return null;
            }
            try {
                Thread.sleep(20);
            } catch (InterruptedException ie) {
                Thread.currentThread().interrupt();
                return null;
            }
        }
        return null;
    }

    private void dumpRecorder(CollectiveException e) {
        StringBuilder sb = new StringBuilder();
        sb.append(e.getClass().getSimpleName()).append(": ").append(e.getMessage()).append('\n');
        sb.append("flight recorder of rank ").append(rank).append(" (last ").append(recorder.capacity())
            .append(" ops):");
        for (String line : recorder.dump()) {
            sb.append("\n  ").append(line);
        }
        if (transport != null) {
            sb.append("\npeers:");
            for (String line : transport.describePeers()) {
                sb.append("\n  ").append(line);
            }
        }
        log.warn(rank, Log.Subsys.COLL, sb.toString());
    }

    // ============================================================================================ all-reduce

    /** Out-of-place (or in-place when {@code send} and {@code recv} are the same) all-reduce. */
    public void allReduce(MemorySegment send, MemorySegment recv, long count, DataType type, ReduceOp op) {
        long bytes = count * type.sizeBytes();
        checkSize(send, bytes, "send");
        checkSize(recv, bytes, "recv");
        // The body is called directly (no capturing lambda): small all-reduces are the latency-critical case.
        long ticket = takeTicket();
        awaitTurn(ticket);
        long handle = -1;
        try {
            Algorithm a = choose(Collective.ALL_REDUCE, bytes);
            handle = begin(Collective.ALL_REDUCE, count, type, op, -1, bytes,
                a == Algorithm.DIRECT && bytes <= Engine.INLINE_BYTES ? "direct/inline" : a.shortName());
            doAllReduce(a, send, recv, count, type, op);
            recorder.end(handle, true, null);
        } catch (RuntimeException e) {
            throw failed(e, handle);
        } finally {
            releaseTurn();
        }
    }

    /** In-place all-reduce. */
    public void allReduce(MemorySegment buffer, long count, DataType type, ReduceOp op) {
        allReduce(buffer, buffer, count, type, op);
    }

    /** Asynchronous {@link #allReduce(MemorySegment, MemorySegment, long, DataType, ReduceOp)}. */
    public CompletableFuture<Void> allReduceAsync(MemorySegment send, MemorySegment recv, long count, DataType type,
                                                  ReduceOp op) {
        long bytes = count * type.sizeBytes();
        checkSize(send, bytes, "send");
        checkSize(recv, bytes, "recv");
        return async(Collective.ALL_REDUCE, count, type, op, -1, bytes,
            a -> doAllReduce(a, send, recv, count, type, op));
    }

    /** In-place all-reduce of a float array (copied to native memory and back). */
    public void allReduce(float[] data, ReduceOp op) {
        allReduce(MemorySegment.ofArray(data), data.length, DataType.FLOAT32, op);
    }

    /** In-place all-reduce of a double array (copied to native memory and back). */
    public void allReduce(double[] data, ReduceOp op) {
        allReduce(MemorySegment.ofArray(data), data.length, DataType.FLOAT64, op);
    }

    /** In-place all-reduce of an int array (copied to native memory and back). */
    public void allReduce(int[] data, ReduceOp op) {
        allReduce(MemorySegment.ofArray(data), data.length, DataType.INT32, op);
    }

    /** In-place all-reduce of a long array (copied to native memory and back). */
    public void allReduce(long[] data, ReduceOp op) {
        allReduce(MemorySegment.ofArray(data), data.length, DataType.INT64, op);
    }

    private void doAllReduce(Algorithm a, MemorySegment send, MemorySegment recv, long count, DataType type,
                             ReduceOp op) {
        long bytes = count * type.sizeBytes();
        if (size == 1 || count == 0) {
            if (!same(send, recv)) {
                MemorySegment.copy(send, 0, recv, 0, bytes);
            }
            return;
        }
        if (a == Algorithm.DIRECT) {
            engine.directAllReduce(sig, send, recv, count, type, op);
            return;
        }
        MemorySegment work = recv.isNative() ? recv : bounce(0, bytes);
        // The ring reads a native input where it is (Engine.ringAllReduce): no copy into the output first.
        boolean ringFrom = a == Algorithm.RING && send.isNative() && Engine.disjoint(send, work, bytes);
        if (!same(send, work) && !ringFrom) {
            MemorySegment.copy(send, 0, work, 0, bytes);
        }
        switch (a) {
            case TREE -> {
                engine.treeReduce(sig, work, count, type, op, 0);
                engine.treeBroadcast(sig, work, bytes, 0);
            }
            case HIER -> engine.hierAllReduce(sig, work, count, type, op, localGroup, leaderGroup);
            case RHD -> engine.rhdAllReduce(sig, work, count, type, op);
            case RD -> engine.rdAllReduce(sig, work, count, type, op, bounce(2, bytes));
            default -> engine.ringAllReduce(sig, ringFrom ? send : work, work, count, type, op);
        }
        if (work != recv) {
            MemorySegment.copy(work, 0, recv, 0, bytes);
        }
    }

    // ============================================================================================ broadcast / reduce

    /** Broadcast {@code count} elements of root's {@code send} into every rank's {@code recv}. */
    public void broadcast(MemorySegment send, MemorySegment recv, long count, DataType type, int root) {
        long bytes = count * type.sizeBytes();
        checkRoot(root);
        if (rank == root) {
            checkSize(send, bytes, "send");
        }
        checkSize(recv, bytes, "recv");
        execute(Collective.BROADCAST, count, type, null, root, bytes, a -> doBroadcast(a, send, recv, bytes, root));
    }

    /** In-place broadcast. */
    public void broadcast(MemorySegment buffer, long count, DataType type, int root) {
        broadcast(buffer, buffer, count, type, root);
    }

    /** Asynchronous broadcast. */
    public CompletableFuture<Void> broadcastAsync(MemorySegment send, MemorySegment recv, long count, DataType type,
                                                  int root) {
        long bytes = count * type.sizeBytes();
        checkRoot(root);
        checkSize(recv, bytes, "recv");
        return async(Collective.BROADCAST, count, type, null, root, bytes,
            a -> doBroadcast(a, send, recv, bytes, root));
    }

    /** In-place broadcast of a float array. */
    public void broadcast(float[] data, int root) {
        broadcast(MemorySegment.ofArray(data), data.length, DataType.FLOAT32, root);
    }

    private void doBroadcast(Algorithm a, MemorySegment send, MemorySegment recv, long bytes, int root) {
        if (size == 1 || bytes == 0) {
            if (!same(send, recv) && bytes > 0) {
                MemorySegment.copy(send, 0, recv, 0, bytes);
            }
            return;
        }
        if (a == Algorithm.DIRECT) {
            engine.directBroadcast(sig, send, recv, bytes, root);
            return;
        }
        MemorySegment work = recv.isNative() ? recv : bounce(0, bytes);
        if (rank == root && !same(send, work)) {
            MemorySegment.copy(send, 0, work, 0, bytes);
        }
        if (a == Algorithm.RING) {
            engine.ringBroadcast(sig, work, bytes, root);
        } else {
            engine.treeBroadcast(sig, work, bytes, root);
        }
        if (work != recv) {
            MemorySegment.copy(work, 0, recv, 0, bytes);
        }
    }

    /** Reduce every rank's {@code send} into root's {@code recv} (recv is ignored on other ranks and may be null). */
    public void reduce(MemorySegment send, MemorySegment recv, long count, DataType type, ReduceOp op, int root) {
        long bytes = count * type.sizeBytes();
        checkRoot(root);
        checkSize(send, bytes, "send");
        if (rank == root) {
            checkSize(recv, bytes, "recv");
        }
        execute(Collective.REDUCE, count, type, op, root, bytes, a -> doReduce(a, send, recv, count, type, op, root));
    }

    /** Asynchronous reduce. */
    public CompletableFuture<Void> reduceAsync(MemorySegment send, MemorySegment recv, long count, DataType type,
                                               ReduceOp op, int root) {
        long bytes = count * type.sizeBytes();
        checkRoot(root);
        checkSize(send, bytes, "send");
        return async(Collective.REDUCE, count, type, op, root, bytes,
            a -> doReduce(a, send, recv, count, type, op, root));
    }

    private void doReduce(Algorithm a, MemorySegment send, MemorySegment recv, long count, DataType type, ReduceOp op,
                          int root) {
        long bytes = count * type.sizeBytes();
        if (size == 1 || count == 0) {
            if (rank == root && !same(send, recv) && bytes > 0) {
                MemorySegment.copy(send, 0, recv, 0, bytes);
            }
            return;
        }
        if (a == Algorithm.DIRECT) {
            engine.directReduce(sig, send, recv, count, type, op, root);
            return;
        }
        MemorySegment work = rank == root && recv.isNative() ? recv : bounce(0, bytes);
        if (!same(send, work)) {
            MemorySegment.copy(send, 0, work, 0, bytes);
        }
        engine.treeReduce(sig, work, count, type, op, root);
        if (rank == root && work != recv) {
            MemorySegment.copy(work, 0, recv, 0, bytes);
        }
    }

    // ============================================================================================ gather family

    /** All-gather: every rank contributes {@code sendCount} elements; {@code recv} holds size × sendCount in rank order. */
    public void allGather(MemorySegment send, MemorySegment recv, long sendCount, DataType type) {
        long block = sendCount * type.sizeBytes();
        checkSize(send, block, "send");
        checkSize(recv, block * size, "recv");
        execute(Collective.ALL_GATHER, sendCount, type, null, -1, block * size, a -> doAllGather(a, send, recv, block));
    }

    /** Asynchronous all-gather. */
    public CompletableFuture<Void> allGatherAsync(MemorySegment send, MemorySegment recv, long sendCount,
                                                  DataType type) {
        long block = sendCount * type.sizeBytes();
        checkSize(send, block, "send");
        checkSize(recv, block * size, "recv");
        return async(Collective.ALL_GATHER, sendCount, type, null, -1, block * size,
            a -> doAllGather(a, send, recv, block));
    }

    private void doAllGather(Algorithm a, MemorySegment send, MemorySegment recv, long block) {
        if (block == 0) {
            return;
        }
        if (size == 1) {
            copyUnlessInPlace(send, recv, block);
            return;
        }
        if (a == Algorithm.DIRECT) {
            engine.directAllGather(sig, send, recv, block);
            return;
        }
        MemorySegment work = recv.isNative() ? recv : bounce(0, block * size);
        if (!(send.isNative() && work.isNative() && send.address() == work.address() + rank * block)) {
            MemorySegment.copy(send, 0, work, rank * block, block);
        }
        engine.ringAllGather(sig, work, block);
        if (work != recv) {
            MemorySegment.copy(work, 0, recv, 0, block * size);
        }
    }

    /** Reduce-scatter: {@code send} holds size × recvCount elements; rank r receives the reduction of block r. */
    public void reduceScatter(MemorySegment send, MemorySegment recv, long recvCount, DataType type, ReduceOp op) {
        long block = recvCount * type.sizeBytes();
        checkSize(send, block * size, "send");
        checkSize(recv, block, "recv");
        execute(Collective.REDUCE_SCATTER, recvCount, type, op, -1, block * size,
            a -> doReduceScatter(a, send, recv, recvCount, type, op));
    }

    /** Asynchronous reduce-scatter. */
    public CompletableFuture<Void> reduceScatterAsync(MemorySegment send, MemorySegment recv, long recvCount,
                                                      DataType type, ReduceOp op) {
        long block = recvCount * type.sizeBytes();
        checkSize(send, block * size, "send");
        checkSize(recv, block, "recv");
        return async(Collective.REDUCE_SCATTER, recvCount, type, op, -1, block * size,
            a -> doReduceScatter(a, send, recv, recvCount, type, op));
    }

    private void doReduceScatter(Algorithm a, MemorySegment send, MemorySegment recv, long recvCount, DataType type,
                                 ReduceOp op) {
        long block = recvCount * type.sizeBytes();
        if (recvCount == 0) {
            return;
        }
        if (size == 1) {
            copyUnlessInPlace(send, recv, block);
            return;
        }
        if (a == Algorithm.DIRECT) {
            engine.directReduceScatter(sig, send, recv, recvCount, type, op);
            return;
        }
        MemorySegment work = bounce(1, block * size);
        MemorySegment.copy(send, 0, work, 0, block * size);
        engine.ringReduceScatter(sig, work, recvCount, type, op);
        MemorySegment.copy(work, rank * block, recv, 0, block);
    }

    /** All-to-all: block j (count elements) of {@code send} goes to rank j; block j of {@code recv} comes from j. */
    public void allToAll(MemorySegment send, MemorySegment recv, long count, DataType type) {
        long block = count * type.sizeBytes();
        checkSize(send, block * size, "send");
        checkSize(recv, block * size, "recv");
        execute(Collective.ALL_TO_ALL, count, type, null, -1, block * size, a -> doAllToAll(a, send, recv, block));
    }

    /** Asynchronous all-to-all. */
    public CompletableFuture<Void> allToAllAsync(MemorySegment send, MemorySegment recv, long count, DataType type) {
        long block = count * type.sizeBytes();
        checkSize(send, block * size, "send");
        checkSize(recv, block * size, "recv");
        return async(Collective.ALL_TO_ALL, count, type, null, -1, block * size,
            a -> doAllToAll(a, send, recv, block));
    }

    private void doAllToAll(Algorithm a, MemorySegment send, MemorySegment recv, long block) {
        if (block == 0) {
            return;
        }
        if (size == 1) {
            copyUnlessInPlace(send, recv, block);
            return;
        }
        if (a == Algorithm.DIRECT) {
            engine.directAllToAll(sig, send, recv, block);
            return;
        }
        MemorySegment in = same(send, recv) || !send.isNative() ? bounce(1, block * size) : send;
        if (in != send) {
            MemorySegment.copy(send, 0, in, 0, block * size);
        }
        engine.pairwiseAllToAll(sig, in, recv, block);
    }

    /** Gather: every rank's {@code count} elements into root's {@code recv} (size × count, rank order). */
    public void gather(MemorySegment send, MemorySegment recv, long count, DataType type, int root) {
        long block = count * type.sizeBytes();
        checkRoot(root);
        checkSize(send, block, "send");
        if (rank == root) {
            checkSize(recv, block * size, "recv");
        }
        execute(Collective.GATHER, count, type, null, root, block * size, a -> doGather(send, recv, block, root));
    }

    /** Asynchronous gather. */
    public CompletableFuture<Void> gatherAsync(MemorySegment send, MemorySegment recv, long count, DataType type,
                                               int root) {
        long block = count * type.sizeBytes();
        checkRoot(root);
        return async(Collective.GATHER, count, type, null, root, block * size, a -> doGather(send, recv, block, root));
    }

    private void doGather(MemorySegment send, MemorySegment recv, long block, int root) {
        if (block == 0) {
            return;
        }
        if (size == 1) {
            MemorySegment.copy(send, 0, recv, 0, block);
            return;
        }
        MemorySegment in = nativeOf(send, block, 1, true);
        if (rank == root && same(in, recv.asSlice(root * block, Math.min(block, recv.byteSize() - root * block)))) {
            in = bounce(1, block);
            MemorySegment.copy(send, 0, in, 0, block);
        }
        engine.linearGather(sig, in, recv, block, root);
    }

    /** Scatter: block j (count elements) of root's {@code send} goes to rank j's {@code recv}. */
    public void scatter(MemorySegment send, MemorySegment recv, long count, DataType type, int root) {
        long block = count * type.sizeBytes();
        checkRoot(root);
        if (rank == root) {
            checkSize(send, block * size, "send");
        }
        checkSize(recv, block, "recv");
        execute(Collective.SCATTER, count, type, null, root, block * size, a -> doScatter(send, recv, block, root));
    }

    /** Asynchronous scatter. */
    public CompletableFuture<Void> scatterAsync(MemorySegment send, MemorySegment recv, long count, DataType type,
                                                int root) {
        long block = count * type.sizeBytes();
        checkRoot(root);
        return async(Collective.SCATTER, count, type, null, root, block * size, a -> doScatter(send, recv, block, root));
    }

    private void doScatter(MemorySegment send, MemorySegment recv, long block, int root) {
        if (block == 0) {
            return;
        }
        if (size == 1) {
            MemorySegment.copy(send, 0, recv, 0, block);
            return;
        }
        MemorySegment in = rank == root ? nativeOf(send, block * size, 1, true) : MemorySegment.NULL;
        engine.linearScatter(sig, in, recv, block, root);
    }

    /** Blocks until every rank has called barrier. */
    public void barrier() {
        execute(Collective.BARRIER, 0, null, null, -1, 0, this::doBarrier);
    }

    /** Asynchronous barrier. */
    public CompletableFuture<Void> barrierAsync() {
        return async(Collective.BARRIER, 0, null, null, -1, 0, this::doBarrier);
    }

    private void doBarrier(Algorithm a) {
        if (size == 1) {
            return;
        }
        if (a == Algorithm.DIRECT) {
            engine.directBarrier(sig, true);
        } else {
            engine.disseminationBarrier(sig);
        }
    }

    private void checkRoot(int root) {
        if (root < 0 || root >= size) {
            throw new IllegalArgumentException("root " + root + " outside 0.." + (size - 1));
        }
    }

    // ============================================================================================ point-to-point

    /**
     * Starts a group: {@link #send} and {@link #recv} calls until {@link #groupEnd()} are queued and then run
     * together (so a rank can send to and receive from several peers without deadlock), as ncclGroupStart/End.
     */
    public void groupStart() {
        if (group != null) {
            throw new IllegalStateException("groupStart() while a group is open");
        }
        group = new ArrayList<>();
    }

    /** Runs the queued sends and receives; returns when all are complete. */
    public void groupEnd() {
        if (group == null) {
            throw new IllegalStateException("groupEnd() without groupStart()");
        }
        List<PendingP2p> ops = group;
        group = null;
        if (ops.isEmpty()) {
            return;
        }
        long bytes = 0;
        for (PendingP2p p : ops) {
            bytes += p.count() * p.type().sizeBytes();
        }
        execute(Collective.SEND_RECV, ops.size(), null, null, -1, bytes, a -> doP2p(ops));
    }

    /** Sends {@code count} elements to {@code peer} (matched by the peer's {@link #recv}, in call order). */
    public void send(MemorySegment buffer, long count, DataType type, int peer) {
        p2p(new PendingP2p(true, buffer, count, type, peer));
    }

    /** Receives {@code count} elements from {@code peer}. */
    public void recv(MemorySegment buffer, long count, DataType type, int peer) {
        p2p(new PendingP2p(false, buffer, count, type, peer));
    }

    private void p2p(PendingP2p op) {
        if (op.peer() < 0 || op.peer() >= size || op.peer() == rank) {
            throw new IllegalArgumentException("peer " + op.peer() + " is not another rank of 0.." + (size - 1));
        }
        checkSize(op.buf(), op.count() * op.type().sizeBytes(), op.send() ? "send" : "recv");
        if (group != null) {
            group.add(op);
            return;
        }
        execute(Collective.SEND_RECV, op.count(), op.type(), null, op.peer(), op.count() * op.type().sizeBytes(),
            a -> doP2p(List.of(op)));
    }

    private void doP2p(List<PendingP2p> ops) {
        // Heap sends need native copies that live until the whole group is done (one per send: running part of a
        // group early could deadlock against a peer's group).
        try (Arena copies = Arena.ofShared()) {
            for (PendingP2p op : ops) {
                Peer p = transport.peers[op.peer()];
                long seq = op.send() ? ++p.p2pSendSeq : ++p.p2pRecvSeq;
                Signature s = new Signature().set(seq, Collective.SEND_RECV, op.count(), op.type(), null, -1);
                long bytes = op.count() * op.type().sizeBytes();
                if (op.send()) {
                    MemorySegment src = op.buf();
                    if (!src.isNative()) {
                        src = copies.allocate(Math.max(1, bytes), 64).asSlice(0, bytes);
                        MemorySegment.copy(op.buf(), 0, src, 0, bytes);
                    }
                    engine.sendX(p, s, src, 0, bytes);
                } else {
                    engine.recvX(p, s, op.buf(), 0, bytes, null, null);
                }
            }
            engine.run();
        }
    }

    // ============================================================================================ windows

    /**
     * Collectively registers a window of {@code bytes} on every rank (NCCL's ncclCommWindowRegister): peers can
     * then {@link Window#putSignal} into it and the owner {@link Window#waitSignal}s.
     */
    public Window window(long bytes) {
        int[] id = new int[1];
        Window[] result = new Window[1];
        execute(Collective.WINDOW, bytes, null, null, -1, 0, a -> {
            id[0] = windowSeq++;
            result[0] = new Window(this, id[0], bytes);
        });
        return result[0];
    }

    Transport transport() {
        return transport;
    }

    Engine engine() {
        return engine;
    }

    Store store() {
        return store;
    }

    /** Runs a window operation in issue order with the op deadline. */
    void windowOp(long count, int peer, Runnable body) {
        execute(Collective.WINDOW, count, null, null, peer, count, a -> body.run());
    }

    // ============================================================================================ split

    /**
     * Splits into sub-communicators: ranks with the same {@code color} form one, ordered by {@code key} then by
     * rank; {@link #UNDEFINED} returns null. Collective over this communicator.
     */
    public Communicator split(int color, int key) {
        checkUsable();
        int n = ++splitSeq;
        String prefix = "split" + n;
        long deadline = System.nanoTime() + options.timeoutNs();
        store.setString(prefix + "/" + rank, color + " " + key, remaining(deadline));
        List<int[]> members = new ArrayList<>();
        for (int j = 0; j < size; j++) {
            String[] f = store.getString(prefix + "/" + j, remaining(deadline)).split(" ");
            int c = Integer.parseInt(f[0]);
            if (c == color && color != UNDEFINED) {
                members.add(new int[] {Integer.parseInt(f[1]), j});
            }
        }
        barrier();
        if (color == UNDEFINED) {
            return null;
        }
        members.sort((x, y) -> x[0] != y[0] ? Integer.compare(x[0], y[0]) : Integer.compare(x[1], y[1]));
        int newRank = -1;
        for (int i = 0; i < members.size(); i++) {
            if (members.get(i)[1] == rank) {
                newRank = i;
            }
        }
        CommunicatorOptions o = options.withName(options.name() + "." + prefix + ".c" + color);
        return create(((PrefixStore) store).inner(), null, newRank, members.size(), o);
    }

    // ============================================================================================ abort / close

    /**
     * Aborts from any thread: pending and later operations fail with {@link CollectiveException.Aborted} promptly,
     * peers see this rank's links fail. Idempotent; resources are released by {@link #close()}.
     */
    public void abort() {
        abort("abort() called");
    }

    /** {@link #abort()} with a reason that waiters and peers report. */
    public void abort(String reason) {
        if (aborted || closed) {
            return;
        }
        abortReason = reason;
        CollectiveException e = new CollectiveException.Aborted("rank " + rank + " aborted: " + reason, null);
        boolean first;
        synchronized (this) {
            first = failure == null;
            if (first) {
                failure = e;
            }
        }
        aborted = true;
        if (first) {
            // An abort after a failure keeps the failure as the reason peers see.
            try {
                store.setString("error/" + rank, "aborted: " + reason, TimeUnit.MILLISECONDS.toNanos(500));
            } catch (RuntimeException ignored) {
                // best effort
            }
        }
        if (transport != null) {
            transport.abortLinks();
        }
        if (first) {
            dumpRecorder(e);
        }
    }

    /** Whether the communicator was aborted or failed. */
    public boolean isFailed() {
        return aborted || failure != null;
    }

    /**
     * Releases queue pairs, memory and (for {@link #fromEnvironment()}) the store. Waits for queued operations;
     * call {@link #abort()} first to give up on them.
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        awaitTurn(takeTicket());
        if (transport != null && transport.direct && failure == null && !aborted) {
            // Peers may still be reading this rank's staging buffer (the last direct op's gather phase): meet
            // them once more before the memory goes away. Short deadline: a peer that never closes costs 5 s.
            try {
                sig.set(opSeq + 1, Collective.BARRIER, 0, null, null, -2);
                engine.deadlineNs = System.nanoTime() + Math.min(options.timeoutNs(), TimeUnit.SECONDS.toNanos(5));
                engine.directBarrier(sig, false);
            } catch (RuntimeException e) {
                log.info(rank, Log.Subsys.INIT, "close: peers did not all reach the closing barrier (" + e.getMessage()
                    + ")");
            }
        }
        closed = true;
        releaseTurn();
        if (executor != null) {
            executor.shutdown();
        }
        closeResources();
    }

    private void closeResources() {
        for (RegistrationCache c : caches.values()) {
            Transport.closeQuietly(c);
        }
        synchronized (allocated) {
            for (MemoryRegion r : allocated) {
                Transport.closeQuietly(r);
            }
            allocated.clear();
        }
        if (transport != null) {
            transport.close();
        }
        try {
            bounceArena.close();
        } catch (RuntimeException ignored) {
            // in use by a failed async op
        }
        if (ownedStore != null) {
            ownedStore.close();
        }
    }

    @Override
    public String toString() {
        return "Communicator{" + options.name() + ", rank " + rank + "/" + size + "}";
    }
}
