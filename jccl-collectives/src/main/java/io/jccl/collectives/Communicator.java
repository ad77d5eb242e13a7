package io.jccl.collectives;

import io.jccl.collectives.bootstrap.Bootstrap;
import io.jccl.collectives.bootstrap.SealedStore;
import io.jccl.collectives.core.CpuPlacement;
import io.jccl.collectives.core.Signature;
import io.jccl.collectives.core.WaitPolicy;
import io.jccl.collectives.direct.DirectAllReduce;
import io.jccl.collectives.direct.DirectBarrier;
import io.jccl.collectives.direct.DirectPath;
import io.jccl.collectives.events.CollectiveEvent;
import io.jccl.collectives.kernel.Kernels;
import io.jccl.collectives.kernel.ReduceKernels;
import io.jccl.collectives.memory.Allocations;
import io.jccl.collectives.memory.BounceBuffers;
import io.jccl.collectives.message.DeviceResources;
import io.jccl.collectives.message.Exchange;
import io.jccl.collectives.message.MessagePath;
import io.jccl.collectives.message.Peer;
import io.jccl.collectives.store.PrefixStore;
import io.jccl.collectives.store.Store;
import io.jccl.collectives.store.StoreException;
import io.jccl.collectives.store.TcpStore;
import io.jccl.collectives.tuning.Algorithm;
import io.jccl.collectives.tuning.AlgorithmFilter;
import io.jccl.collectives.tuning.CostModel;
import io.jccl.collectives.tuning.TuningParameters;
import io.jccl.common.CpuAffinity;
import io.jccl.common.Log;
import io.jccl.common.NativeAccess;
import io.jccl.common.ProcessExits;
import io.jccl.verbs.Counter;
import io.jccl.verbs.MemoryRegion;

import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * A group of ranks that run collectives together (NCCL's {@code ncclComm_t}, MPI's communicator).
 *
 * <p>Create one per rank with {@link #create(Store, int, int, CommunicatorOptions)} or
 * {@link #fromEnvironment()} (torchrun, Open MPI, Slurm or JCCL_* variables). Every rank publishes its host identity
 * and queue-pair endpoints through the store; peers on the same host connect over a shared-memory device, others
 * over a network device. When every rank shares a host and can map its peers' memory, the direct algorithms load
 * and store peers' staging buffers instead of sending messages.
 *
 * <p>Buffers are {@link MemorySegment}s and counts are in elements. Native segments are used in place (senders
 * register them once and cache the registration; {@link #allocate} memory is registered already); heap segments
 * (over Java arrays) are copied into native bounce buffers first and back afterwards, which costs a copy each way.
 * In-place operations pass the same segment twice (or use the in-place overloads).
 *
 * <p>Operations on one communicator complete in issue order. Blocking calls run on the calling thread; the
 * {@code *Async} variants run on the communicator's single executor thread and return a future; both check their
 * arguments the same way before they are issued. Every wait has a deadline ({@code JCCL_TIMEOUT}, default 10
 * minutes); {@link #abort()} from any thread fails waiters promptly; a dead peer fails pending and later operations
 * with {@link CollectiveException.PeerFailure} naming it; ranks calling different operations at one sequence number
 * get {@link CollectiveException.Mismatch} with both signatures. The {@link #flightRecorder()} keeps the last
 * operations and is dumped to the log on failure.
 *
 * <p>Where the work is done: joining in {@code bootstrap}, the message path and its exchange loop in
 * {@code message}, the message-path algorithms in {@code algorithm}, the direct path in {@code direct}; this class
 * holds the API, the issue order ({@link OperationOrder}), failure handling ({@link Failures}) and the choice of
 * algorithm per call ({@link Dispatch}). See docs/ARCHITECTURE.md.
 */
public final class Communicator implements AutoCloseable {
    /** Color for {@link #split} meaning "not in any new communicator". */
    public static final int UNDEFINED = -1;
    /** One operation in this many is timed from its start; the rest from their first slow wait, if any. */
    static final int TIMED_EVERY = 16;
    /** How long {@link #close()} waits for operations still in flight before it aborts them (at most the timeout). */
    static final long CLOSE_GRACE_NS = TimeUnit.SECONDS.toNanos(10);
    /** The shortest bound on a shrink's new join (which also bounds how long a member that died after it costs). */
    static final long MIN_SHRINK_JOIN_NS = TimeUnit.SECONDS.toNanos(10);

    static {
        loadSegmentKinds();
    }

    private final int rank;
    private final int size;
    private final CommunicatorOptions options;
    private final Store store;
    /** The store this communicator closes (fromEnvironment), handed on to the communicator a shrink returns. */
    private Store ownedStore;
    /**
     * The stores shrink and agree may decide through when the job's store host dies (fromEnvironment with JCCL's TCP
     * store: {@link StoreSuccession}); null: the communicator's store only. Handed on like {@link #ownedStore}.
     */
    private StoreSuccession succession;
    /** How long the join at creation may take (shorter for a shrink's new communicator: a member may be dead). */
    private long joinTimeoutNs;
    /** A shrink's join watch while this communicator joins (its store), else null. */
    private JoinWatchStore joinWatch;
    private final Log log = Log.get();
    private final FlightRecorder recorder;
    private final AlgorithmFilter filter;
    private final OperationOrder order;
    private final Failures failures;
    private final WaitPolicy waits;
    private final Allocations allocations = new Allocations();
    private final BounceBuffers bounce = new BounceBuffers();
    private final ReduceKernels kernels = Kernels.get();
    private final Signature sig = new Signature();
    /** The descriptor of the blocking call holding the turn (filled only by the turn holder). */
    private final CollectiveCall blocking = new CollectiveCall();
    private final long[] lastChoiceBytes = new long[Collective.values().length];
    private final Algorithm[] lastChoice = new Algorithm[Collective.values().length];
    /** What joining built (message path, direct path, host groups); null until joined. */
    private Bootstrap.Result joined;
    private MessagePath messagePath;
    private DirectPath directPath;
    private DirectBarrier directBarrier;
    private Exchange exchange;
    private Dispatch dispatch;
    private TuningParameters tuning;
    private long opSeq;
    /** Operations begun (for {@link #TIMED_EVERY}) and the recorder handle of the current one. */
    private long begunOps;
    private long opHandle = -1;
    private int splitSeq;
    /** Shrinks begun on this communicator: the epoch that names each one's keys and communicator. */
    private int shrinkSeq;
    /** Agreements begun on this communicator (their keys' epoch). */
    private int agreeSeq;
    /** Grows begun on this communicator: the epoch that names each grown communicator. */
    private int growSeq;
    private int windowSeq;
    private volatile boolean closed;
    /** Rounds of the warm-up at creation ({@link Warmup}; tests read it). */
    int warmupRounds;
    /** Watches of the same-host peers' processes: a kill -9 is noticed at once ({@link ProcessExits}). */
    private final java.util.List<ProcessExits.Watch> exitWatches = new java.util.ArrayList<>();
    /** When {@link #init} ended ({@link System#nanoTime()}: joined, CPU placement exchanged, first barrier done). */
    private long initDoneNs;
    /** The phases of this communicator's last shrink (tests and the fault-injection breakdown read it); or null. */
    volatile ShrinkTimes lastShrinkTimes;

    /**
     * When the phases of a shrink ended ({@link System#nanoTime()}), for the recovery breakdown of
     * docs/fault-tolerance.md: {@code startNs} the call, {@code decidedNs} the agreement on the members (the last
     * attempt's), {@code joinStepsNs} the new communicator's join steps ({@link Bootstrap.Result#stepsNs}),
     * {@code initNs} its CPU-placement exchange and first barrier, {@code readyNs} its warm-up (the call returns).
     */
    record ShrinkTimes(long startNs, long decidedNs, long[] joinStepsNs, long initNs, long readyNs, int attempts,
                       int storeIndex) {
        /** The phases in milliseconds, for a log line. */
        String describe() {
            return String.format(java.util.Locale.ROOT, "agreement %.1f ms (store %d, attempt %d), join records %.1f"
                + " ms, devices %.1f ms, queue pairs %.1f ms, all connected %.1f ms, placement and barrier %.1f ms,"
                + " warm-up %.1f ms", ms(startNs, decidedNs), storeIndex, attempts, ms(decidedNs, joinStepsNs[0]),
                ms(joinStepsNs[0], joinStepsNs[1]), ms(joinStepsNs[1], joinStepsNs[2]), ms(joinStepsNs[2],
                joinStepsNs[3]), ms(joinStepsNs[3], initNs), ms(initNs, readyNs));
        }

        private static double ms(long fromNs, long toNs) {
            return (toNs - fromNs) / 1e6;
        }
    }
    /**
     * While the warm-up runs (in create, before the communicator is returned): its operations are JCCL's, not the
     * application's, so they count in no statistics and record no JFR event (their sequence numbers stay used).
     */
    private boolean warmingUp;
    private final PointToPoint pointToPoint = new PointToPoint();
    /** Operation counters (written by the turn holder) and the one JFR event every operation reuses. */
    private final CollectiveStatistics statistics = new CollectiveStatistics();
    private final CollectiveEvent event = new CollectiveEvent();
    /** The devices in use, as the JFR event names them. */
    private String transport = "self";
    /** Devices this rank tried to open at creation, opened or not (tests check that unneeded ones were not). */
    final Set<String> devicesTried = new java.util.LinkedHashSet<>();

    private Communicator(Store store, Store ownedStore, int rank, int size, CommunicatorOptions options) {
        this.store = store;
        this.ownedStore = ownedStore;
        this.rank = rank;
        this.size = size;
        this.options = options;
        this.recorder = new FlightRecorder(options.flightRecorderCapacity());
        this.filter = AlgorithmFilter.parse(options.algorithms());
        this.order = new OperationOrder("'" + options.name() + "' rank " + rank, "jccl-comm-" + options.name() + "-r"
            + rank);
        this.failures = new Failures(rank, size, options.name(), store, recorder);
        this.waits = new WaitPolicy(new WaitOwner());
    }

    /**
     * Loads the JDK's heap-segment classes before any collective runs, so that the first heap argument does not
     * deoptimise the compiled collectives (docs/collectives.md, "Heap segments and the JIT"). Loaded, not
     * initialised: loading is what changes the class hierarchy, and it costs no segment machinery.
     */
    private static void loadSegmentKinds() {
        String impl = "jdk.internal.foreign.HeapMemorySegmentImpl$Of";
        for (String kind : new String[] {"Byte", "Char", "Short", "Int", "Long", "Float", "Double"}) {
            try {
                Class.forName(impl.concat(kind), false, null);
            } catch (ClassNotFoundException | LinkageError e) {
                return; // another JDK: nothing to preload, nothing lost but the deoptimisation this avoids
            }
        }
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
     * server unless JCCL_STORE_SERVER=0, or unless torchrun's agent already serves its TCPStore at MASTER_PORT
     * (TORCHELASTIC_USE_AGENT_STORE=True): then every rank is a client of that store (see {@link LaunchEnvironment}).
     * A rank outside 0..size-1 fails at once, naming the variables. The communicator owns (and closes) the store.
     */
    public static Communicator fromEnvironment() {
        return fromEnvironment(CommunicatorOptions.fromEnvironment());
    }

    /** {@link #fromEnvironment()} with explicit options. */
    public static Communicator fromEnvironment(CommunicatorOptions options) {
        if ("1".equals(io.jccl.common.Config.value("JCCL_JOIN"))) {
            return joinFromEnvironment(options);
        }
        LaunchEnvironment env = LaunchEnvironment.detect(System.getenv());
        Store s = env.openStore(options.timeoutNs(), options.authSecret());
        try {
            // JCCL's TCP store lives in rank 0: standby stores let shrink and agree survive its loss
            return create(s, s, env.rank(), env.worldSize(), options, options.timeoutNs(),
                s instanceof TcpStore t && StoreSuccession.standbyStores() > 0 ? t : null);
        } catch (RuntimeException e) {
            s.close();
            throw e;
        }
    }

    private static Communicator create(Store base, Store owned, int rank, int size, CommunicatorOptions options) {
        return create(base, owned, rank, size, options, options.timeoutNs(), null);
    }

    /**
     * Creates and joins; {@code joinTimeoutNs} bounds the join, and with {@code standbyPrimary} (the job's TCP store)
     * the ranks set up the standby stores of a {@link StoreSuccession}.
     */
    static Communicator create(Store base, Store owned, int rank, int size, CommunicatorOptions options,
                               long joinTimeoutNs, TcpStore standbyPrimary) {
        if (size < 1 || rank < 0 || rank >= size) {
            throw new IllegalArgumentException("rank " + rank + " outside 0.." + (size - 1) + " (size " + size + ")");
        }
        requireNativeAccess();
        // With a job secret every value this communicator reads or writes is sealed (SealedStore), keyed by its
        // full name; split communicators reuse the sealed view.
        Store store = namespaced(base, options);
        Warmup.startKernels(options.warmupNs(), size);
        Communicator c = new Communicator(store, owned, rank, size, options);
        c.joinTimeoutNs = joinTimeoutNs;
        c.joinWatch = base instanceof JoinWatchStore w ? w : null;
        try {
            c.init();
            if (standbyPrimary != null && size > 1) {
                c.succession = StoreSuccession.start(standbyPrimary, store, rank, size,
                    StoreSuccession.standbyStores(), options.authSecret(), System.nanoTime() + joinTimeoutNs);
            }
            // The first collectives of a fresh JVM run cold (milliseconds): warm them while the job starts anyway
            c.warmingUp = true;
            c.warmupRounds = Warmup.run(c, options.warmupNs());
            c.warmingUp = false;
            // and the recovery path, once per JVM, in the background (it would otherwise run cold when it matters)
            Rehearsal.startOnce(store, rank, size, options.warmupNs());
        } catch (RuntimeException e) {
            c.closeResources();
            throw e;
        }
        return c;
    }

    /** The communicator's view of {@code base}: sealed with the job's secret (if any), under {@code jccl/NAME}. */
    private static Store namespaced(Store base, CommunicatorOptions options) {
        Store sealed = options.authSecret() == null || base instanceof SealedStore
            || base instanceof JoinWatchStore w && w.inner() instanceof SealedStore ? base
            : new SealedStore(base, options.authSecret(), options.jobId());
        return new PrefixStore("jccl/" + options.name(), sealed);
    }

    /**
     * Fails at once, naming the missing {@code --enable-native-access} flag, when the JVM denies this module native
     * access ({@code --illegal-native-access=deny}, the default of future JDKs); otherwise the first restricted call
     * fails somewhere inside, with an error about whatever it was doing (a shared-memory file, "/dev/shm full?").
     */
    private static void requireNativeAccess() {
        try {
            MemorySegment.NULL.reinterpret(0); // restricted: the JVM checks this module's access here
        } catch (IllegalCallerException e) {
            throw new CollectiveException(NativeAccess.explain(Communicator.class.getModule()), e);
        }
    }

    /**
     * Joins ({@link Bootstrap#join}), then sets up what runs the collectives: the waits (oversubscribed or not),
     * CPU binding, the cost model's parameters, and a first barrier that checks every link.
     */
    private void init() {
        log.announce(rank); // the version line and the JCCL_* settings, once per process
        long deadline = System.nanoTime() + joinTimeoutNs;
        joined = Bootstrap.join(store, rank, size, options, deadline, allocations, waits);
        devicesTried.addAll(joined.devicesTried());
        messagePath = joined.messagePath();
        directPath = joined.directPath();
        failures.attach(messagePath, directPath);
        watchPeerExits();
        JoinWatchStore watch = joinWatch;
        if (watch != null) {
            // a shrink's join: a member that died before its links connected is noticed by the watch, not by them
            messagePath.addPeerCheck(p -> watch.checkMember(p.rank()));
        }
        exchange = new Exchange(messagePath, waits, kernels, rank, size);
        boolean direct = joined.direct();
        directBarrier = direct ? new DirectBarrier(directPath) : null;
        dispatch = new Dispatch(rank, size, exchange, direct ? directPath : null, directBarrier, allocations, bounce,
            kernels, joined.localGroup(), joined.leaderGroup());
        if (direct) {
            // the direct path posts no work requests: it counts its traffic into its device's counters itself
            statistics.countDirectInto(messagePath.firstDevice().context().openCounterShare(), size);
        }
        if (!messagePath.devices().isEmpty()) {
            transport = String.join(",", messagePath.devices().keySet()) + (direct ? " (direct)" : "");
        }
        // Oversubscribed or not from where the local ranks may run (their masks), not from this rank's mask alone
        CpuPlacement.Verdict placement = CpuPlacement.exchange(store, rank, joined.localGroup(), deadline);
        waits.oversubscribed(placement.oversubscribed());
        if (direct && !placement.oversubscribed()) {
            // direct-path waits compare CPUs with the peer's (shared core or late peer); link sched_getcpu aside
            CpuAffinity.prelink();
        }
        boolean bound = options.cpuBind() && RankSetup.bindCpu(rank, joined.localGroup());
        if (directBarrier != null && (bound || placement.boundApart())) {
            directBarrier.coresApart(true);
        }
        log.info(rank, Log.Subsys.INIT, () -> "CPU placement: " + placement.reason()
            + (waits.yieldsAtOnce() ? "; waiting yields early" : ""));
        tuning = RankSetup.tuningParameters(options, joined, direct);
        RankSetup.log(rank, size, options, joined, tuning, filter, kernels);
        // Connectivity check with the op deadline machinery: a barrier over the direct path when every rank mapped
        // every peer (what most collectives then use), else over the message path.
        if (size > 1) {
            sig.set(0, Collective.BARRIER, 0, null, null, -1);
            waits.setDeadline(deadline);
            dispatch.barrier(direct ? Algorithm.DIRECT : Algorithm.RING, sig);
        }
        initDoneNs = System.nanoTime();
        log.info(rank, Log.Subsys.INIT, this::summary);
    }

    /**
     * Watches the processes of the same-host peers: when one exits (a kill -9), every wait checks its peers at once
     * and then every millisecond ({@link WaitPolicy#peerExited}), instead of at its next 100 ms health check. A peer
     * on another host is noticed by its transport (its kernel resets the connections).
     */
    private void watchPeerExits() {
        for (int j = 0; j < size; j++) {
            long pid = messagePath.localPid(j);
            if (pid > 0) {
                int peer = j;
                MessagePath m = messagePath;
                exitWatches.add(ProcessExits.watch(pid, () -> {
                    m.markExited(peer);
                    waits.peerExited();
                    log.info(rank, Log.Subsys.INIT, () -> "'" + options.name() + "': rank " + peer + "'s process "
                        + pid + " exited");
                }));
            }
        }
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
        return joined != null && joined.direct();
    }

    /** The device serving {@code peer} (for example {@code shm0}), and why, or "self". */
    public String transportOf(int peer) {
        if (peer == rank) {
            return "self";
        }
        Peer p = messagePath.peer(peer);
        return p.device().name() + " (" + p.reason() + ")";
    }

    /**
     * The line {@code JCCL_DEBUG=INFO} prints once per rank when the communicator is ready: ranks, local ranks and
     * hosts, the device serving each group of peers and why, the paths in use, e.g. {@code comm 'world' rank 0
     * nranks 4 localRanks 4 hosts 1 - Using network shm0 (same host, shared memory) for ranks 1-3 - paths
     * direct+message - Init COMPLETE}. Tools print it to say what was chosen.
     */
    public String summary() {
        return RankSetup.summary(rank, size, options, joined);
    }

    /** The algorithm the cost model (and JCCL_ALGO) picks for a collective of {@code bytes} (nccl-tests size). */
    public Algorithm algorithmFor(Collective collective, long bytes) {
        return choose(collective, bytes);
    }

    /** The cost-model table for this communicator's size and paths. */
    public String tuningTable() {
        return CostModel.table(size, tuning, filter);
    }

    /**
     * This rank's operation counters per collective (operations, bytes, errors): cheap, read racily. See
     * {@link CollectiveStatistics}.
     */
    public CollectiveStatistics statistics() {
        return statistics;
    }

    /**
     * A snapshot of the counters of every device this rank uses, by device name (empty once closed): the message
     * path's traffic as the providers count it, and the direct path's as {@link CollectiveStatistics} adds it.
     */
    public Map<String, Map<Counter, Long>> deviceCounters() {
        Map<String, Map<Counter, Long>> all = new LinkedHashMap<>();
        MessagePath m = messagePath;
        if (m != null && !closed) {
            for (DeviceResources d : m.devices().values()) {
                all.put(d.name(), d.context().counters());
            }
        }
        return all;
    }

    /** The message path (tests inspect its peers). */
    MessagePath messagePath() {
        return messagePath;
    }

    /** The direct all-reduce, or null when the direct path is off (tests read which of its paths ran). */
    DirectAllReduce directAllReduce() {
        return dispatch.directAllReduce();
    }

    Store store() {
        return store;
    }

    WaitPolicy waits() {
        return waits;
    }

    // ============================================================================================ memory

    /**
     * Allocates {@code bytes} of registered, shareable memory: sending from it needs no registration or copy.
     * Freed when the communicator closes.
     */
    public MemorySegment allocate(long bytes) {
        checkUsable();
        DeviceResources d = messagePath.firstDevice();
        if (d == null) {
            return bounce.allocate(bytes);
        }
        MemoryRegion r = allocations.allocate(d.protectionDomain(), bytes);
        if (joined.direct()) {
            // Peers map it on first use, so direct all-reduces read it where it is (no staging copy).
            directPath.publishAllocation(allocations.idOf(r), r);
        }
        return r.segment();
    }

    // ============================================================================================ execution

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

    /**
     * Runs a collective on the calling thread: checked before it takes its turn, then run from the communicator's
     * reusable descriptor (nothing allocated: small all-reduces are the latency-critical case).
     */
    private void runBlocking(Collective c, MemorySegment send, MemorySegment recv, long count, DataType type,
                             ReduceOp op, int root) {
        long bytes = CollectiveCall.checkedBytes(c, rank, size, send, recv, count, type, root);
        long ticket = order.take();
        order.awaitTurn(ticket);
        try {
            execute(blocking.set(c, send, recv, count, type, op, root, bytes));
        } finally {
            blocking.send = null; // the caller's buffers are not kept reachable until the next call
            blocking.recv = null;
            order.release();
        }
    }

    /** Runs a collective on the executor thread, checked exactly as the blocking form before it is issued. */
    private CompletableFuture<Void> runAsync(Collective c, MemorySegment send, MemorySegment recv, long count,
                                             DataType type, ReduceOp op, int root) {
        long bytes = CollectiveCall.checkedBytes(c, rank, size, send, recv, count, type, root);
        CollectiveCall call = new CollectiveCall().set(c, send, recv, count, type, op, root, bytes);
        return order.submit(ticket -> runTicket(ticket, call));
    }

    /** Runs a point-to-point group or window operation in issue order with the op deadline. */
    private void runAction(Collective c, long count, DataType type, int peer, long bytes, Runnable action) {
        runTicket(order.take(), new CollectiveCall().action(c, count, type, peer, bytes, action));
    }

    private void runTicket(long ticket, CollectiveCall call) {
        order.awaitTurn(ticket);
        try {
            execute(call);
        } finally {
            order.release();
        }
    }

    /** Runs {@code call}, whose turn it is: algorithm, begin (sequence, signature, deadline, recorder), dispatch. */
    private void execute(CollectiveCall call) {
        long handle = -1;
        String algo = null;
        // JFR: the one event is timed only while a recording enables it (no clock read, no allocation otherwise)
        boolean counted = !warmingUp;
        boolean recording = counted && event.isEnabled();
        if (recording) {
            event.begin();
        }
        try {
            Algorithm a = choose(call.collective, call.bytes);
            algo = call.collective == Collective.SEND_RECV ? "p2p"
                : call.collective == Collective.ALL_REDUCE && a == Algorithm.DIRECT
                && call.bytes <= DirectAllReduce.INLINE_BYTES ? "direct/inline" : a.shortName();
            handle = begin(call, algo);
            dispatch.run(a, sig, call);
            recorder.end(handle, true, null);
            if (counted) {
                statistics.completed(call.collective, call.bytes, a == Algorithm.DIRECT);
            }
        } catch (RuntimeException e) {
            if (counted) {
                statistics.failed(call.collective);
            }
            CollectiveException failure = failures.failed(e, handle);
            if (recording) {
                commit(call, algo, false);
            }
            throw failure;
        }
        if (recording) {
            commit(call, algo, true);
        }
    }

    /** Ends and commits the operation's JFR event when the recording keeps it (its threshold). */
    private void commit(CollectiveCall call, String algo, boolean succeeded) {
        event.end();
        if (event.shouldCommit()) {
            event.set(options.name(), call.collective.displayName(), sig.sequence(), call.bytes, call.count,
                call.type == null ? null : call.type.shortName(), call.op == null ? null : call.op.shortName(), algo,
                transport, rank, size, succeeded);
            event.commit();
        }
    }

    /**
     * Starts the operation holding the turn: usable check, sequence number, signature, deadline, flight recorder,
     * COLL log line. Returns the recorder handle.
     */
    private long begin(CollectiveCall call, String algo) {
        checkUsable();
        Collective c = call.collective;
        // Point-to-point and one-sided calls involve some ranks only: they must not advance the collective
        // sequence number that every rank's headers and signatures carry.
        boolean local = c == Collective.SEND_RECV || (c == Collective.WINDOW && call.root >= 0);
        long seq = local ? opSeq : ++opSeq;
        // Only every TIMED_EVERY-th operation reads the clock here (a reading costs a quarter of an 8-byte
        // all-reduce between two cores): the others get their deadline from their first wait that outlasts the
        // spin (WaitPolicy.deadline()); an operation that never waits cannot hang, and the recorder marks it untimed.
        long now = ++begunOps % TIMED_EVERY == 0 ? System.nanoTime() : 0;
        long handle = recorder.begin(seq, c, call.count, call.type, call.op, call.root, algo, now);
        opHandle = handle;
        sig.set(seq, c, call.count, call.type, call.op, call.root);
        waits.opBegan(now, options.timeoutNs());
        if (log.enabled(Log.Level.INFO, Log.Subsys.COLL)) {
            // as NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL: one line per operation
            log.info(rank, Log.Subsys.COLL, sig + " bytes " + call.bytes + " algo " + algo + " comm '"
                + options.name() + "' nranks " + size);
        }
        return handle;
    }

    /** What the waits report to: abort, the recorder's timing of untimed operations, timeouts. */
    private final class WaitOwner implements WaitPolicy.Owner {
        @Override
        public void checkNotAborted() {
            failures.checkNotAborted();
        }

        @Override
        public void checkRevokedByPeers() {
            failures.checkRevokedByPeers();
        }

        @Override
        public void deadlineStarted(long nowNs) {
            recorder.timeFrom(opHandle, nowNs);
        }

        @Override
        public CollectiveException.Timeout timeout(String what) {
            return new CollectiveException.Timeout("rank " + rank + ": " + sig + " timed out after "
                + TimeUnit.NANOSECONDS.toMillis(options.timeoutNs()) + " ms (JCCL_TIMEOUT) " + what);
        }
    }

    private void checkUsable() {
        if (closed) {
            throw new IllegalStateException("communicator '" + options.name() + "' rank " + rank + " is closed");
        }
        failures.checkUsable();
    }

    // ============================================================================================ all-reduce

    /** Out-of-place (or in-place when {@code send} and {@code recv} are the same) all-reduce. */
    public void allReduce(MemorySegment send, MemorySegment recv, long count, DataType type, ReduceOp op) {
        runBlocking(Collective.ALL_REDUCE, send, recv, count, type, op, -1);
    }

    /** In-place all-reduce. */
    public void allReduce(MemorySegment buffer, long count, DataType type, ReduceOp op) {
        allReduce(buffer, buffer, count, type, op);
    }

    /** Asynchronous {@link #allReduce(MemorySegment, MemorySegment, long, DataType, ReduceOp)}. */
    public CompletableFuture<Void> allReduceAsync(MemorySegment send, MemorySegment recv, long count, DataType type,
                                                  ReduceOp op) {
        return runAsync(Collective.ALL_REDUCE, send, recv, count, type, op, -1);
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

    // ============================================================================================ broadcast / reduce

    /** Broadcast {@code count} elements of root's {@code send} into every rank's {@code recv}. */
    public void broadcast(MemorySegment send, MemorySegment recv, long count, DataType type, int root) {
        runBlocking(Collective.BROADCAST, send, recv, count, type, null, root);
    }

    /** In-place broadcast. */
    public void broadcast(MemorySegment buffer, long count, DataType type, int root) {
        broadcast(buffer, buffer, count, type, root);
    }

    /** Asynchronous broadcast. */
    public CompletableFuture<Void> broadcastAsync(MemorySegment send, MemorySegment recv, long count, DataType type,
                                                  int root) {
        return runAsync(Collective.BROADCAST, send, recv, count, type, null, root);
    }

    /** In-place broadcast of a float array. */
    public void broadcast(float[] data, int root) {
        broadcast(MemorySegment.ofArray(data), data.length, DataType.FLOAT32, root);
    }

    /** Reduce every rank's {@code send} into root's {@code recv} (recv is ignored on other ranks and may be null). */
    public void reduce(MemorySegment send, MemorySegment recv, long count, DataType type, ReduceOp op, int root) {
        runBlocking(Collective.REDUCE, send, recv, count, type, op, root);
    }

    /** Asynchronous reduce. */
    public CompletableFuture<Void> reduceAsync(MemorySegment send, MemorySegment recv, long count, DataType type,
                                               ReduceOp op, int root) {
        return runAsync(Collective.REDUCE, send, recv, count, type, op, root);
    }

    // ============================================================================================ gather family

    /** All-gather: every rank contributes {@code sendCount} elements; {@code recv} holds size × sendCount in rank order. */
    public void allGather(MemorySegment send, MemorySegment recv, long sendCount, DataType type) {
        runBlocking(Collective.ALL_GATHER, send, recv, sendCount, type, null, -1);
    }

    /** Asynchronous all-gather. */
    public CompletableFuture<Void> allGatherAsync(MemorySegment send, MemorySegment recv, long sendCount,
                                                  DataType type) {
        return runAsync(Collective.ALL_GATHER, send, recv, sendCount, type, null, -1);
    }

    /** Reduce-scatter: {@code send} holds size × recvCount elements; rank r receives the reduction of block r. */
    public void reduceScatter(MemorySegment send, MemorySegment recv, long recvCount, DataType type, ReduceOp op) {
        runBlocking(Collective.REDUCE_SCATTER, send, recv, recvCount, type, op, -1);
    }

    /** Asynchronous reduce-scatter. */
    public CompletableFuture<Void> reduceScatterAsync(MemorySegment send, MemorySegment recv, long recvCount,
                                                      DataType type, ReduceOp op) {
        return runAsync(Collective.REDUCE_SCATTER, send, recv, recvCount, type, op, -1);
    }

    /** All-to-all: block j (count elements) of {@code send} goes to rank j; block j of {@code recv} comes from j. */
    public void allToAll(MemorySegment send, MemorySegment recv, long count, DataType type) {
        runBlocking(Collective.ALL_TO_ALL, send, recv, count, type, null, -1);
    }

    /** Asynchronous all-to-all. */
    public CompletableFuture<Void> allToAllAsync(MemorySegment send, MemorySegment recv, long count, DataType type) {
        return runAsync(Collective.ALL_TO_ALL, send, recv, count, type, null, -1);
    }

    /** Gather: every rank's {@code count} elements into root's {@code recv} (size × count, rank order). */
    public void gather(MemorySegment send, MemorySegment recv, long count, DataType type, int root) {
        runBlocking(Collective.GATHER, send, recv, count, type, null, root);
    }

    /** Asynchronous gather. */
    public CompletableFuture<Void> gatherAsync(MemorySegment send, MemorySegment recv, long count, DataType type,
                                               int root) {
        return runAsync(Collective.GATHER, send, recv, count, type, null, root);
    }

    /** Scatter: block j (count elements) of root's {@code send} goes to rank j's {@code recv}. */
    public void scatter(MemorySegment send, MemorySegment recv, long count, DataType type, int root) {
        runBlocking(Collective.SCATTER, send, recv, count, type, null, root);
    }

    /** Asynchronous scatter. */
    public CompletableFuture<Void> scatterAsync(MemorySegment send, MemorySegment recv, long count, DataType type,
                                                int root) {
        return runAsync(Collective.SCATTER, send, recv, count, type, null, root);
    }

    /** Blocks until every rank has called barrier. */
    public void barrier() {
        runBlocking(Collective.BARRIER, null, null, 0, null, null, -1);
    }

    /** Asynchronous barrier. */
    public CompletableFuture<Void> barrierAsync() {
        return runAsync(Collective.BARRIER, null, null, 0, null, null, -1);
    }

    // ============================================================================================ point-to-point

    /**
     * Starts a group: {@link #send} and {@link #recv} calls until {@link #groupEnd()} are queued and then run
     * together (so a rank can send to and receive from several peers without deadlock), as ncclGroupStart/End.
     */
    public void groupStart() {
        pointToPoint.start();
    }

    /** Runs the queued sends and receives; returns when all are complete. */
    public void groupEnd() {
        List<PointToPoint.Pending> ops = pointToPoint.end();
        if (ops.isEmpty()) {
            return;
        }
        long bytes = 0;
        for (PointToPoint.Pending p : ops) {
            bytes += p.bytes();
        }
        runAction(Collective.SEND_RECV, ops.size(), null, -1, bytes, () -> PointToPoint.run(ops, messagePath,
            exchange));
    }

    /** Sends {@code count} elements to {@code peer} (matched by the peer's {@link #recv}, in call order). */
    public void send(MemorySegment buffer, long count, DataType type, int peer) {
        p2p(new PointToPoint.Pending(true, buffer, count, type, peer));
    }

    /** Receives {@code count} elements from {@code peer}. */
    public void recv(MemorySegment buffer, long count, DataType type, int peer) {
        p2p(new PointToPoint.Pending(false, buffer, count, type, peer));
    }

    private void p2p(PointToPoint.Pending op) {
        if (!pointToPoint.queue(op, rank, size)) {
            runAction(Collective.SEND_RECV, op.count(), op.type(), op.peer(), op.bytes(),
                () -> PointToPoint.run(List.of(op), messagePath, exchange));
        }
    }

    // ============================================================================================ windows

    /**
     * Collectively registers a window of {@code bytes} on every rank (NCCL's ncclCommWindowRegister): peers can
     * then {@link Window#putSignal} into it and the owner {@link Window#waitSignal}s.
     */
    public Window window(long bytes) {
        Window[] result = new Window[1];
        runAction(Collective.WINDOW, bytes, null, -1, 0, () -> result[0] = new Window(this, windowSeq++, bytes));
        return result[0];
    }

    /** Runs a window operation in issue order with the op deadline. */
    void windowOp(long count, int peer, Runnable body) {
        runAction(Collective.WINDOW, count, null, peer, count, body);
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
        Communicator c = create(((PrefixStore) store).inner(), null, newRank, members.size(), o);
        if (succession != null) {
            // the split one's shrink and agree survive the store host's death too (the parent's standby stores)
            int[] parentRanks = new int[members.size()];
            for (int i = 0; i < parentRanks.length; i++) {
                parentRanks[i] = members.get(i)[1];
            }
            c.succession = succession.forSplit(parentRanks);
        }
        return c;
    }

    // ============================================================================================ grow / join

    /** The key namespace, in a job's store, where survivors offer places to joining processes. */
    static final String JOIN_BOARD = "jccl/join";

    /**
     * A new communicator of this one's ranks plus {@code joiners} processes that join the running job
     * ({@link #join(Store, CommunicatorOptions)}, or {@code JCCL_JOIN=1} with {@link #fromEnvironment()}); NCCL's
     * {@code ncclCommGrow}, torchft's new replica at the next quorum. Every rank of this communicator calls it; the
     * ranks keep their numbers and the joiners get {@code size()..size()+joiners-1} in the order they claimed a
     * place. They learn of the offer through the store this communicator uses (rank 0 posts it under
     * {@code jccl/join/offer}; {@link #joinAddress()} says where that store is). Blocks until every joiner has joined
     * or the timeout passes. The new communicator ({@code NAME.growE}) has fresh queue pairs and takes over this
     * one's store and standby stores (the joiners learn the standby list from it); this communicator stays usable:
     * close it. Pulling the model state is the application's: a {@link Window} and {@link Window#get} (RDMA READ).
     *
     * @throws IllegalArgumentException when {@code joiners < 1}
     */
    public Communicator grow(int joiners) {
        if (joiners < 1) {
            throw new IllegalArgumentException("grow: " + joiners + " joiners; expected at least 1");
        }
        checkUsable();
        long ticket = order.take();
        order.awaitTurn(ticket);
        try {
            long startNs = System.nanoTime();
            int epoch = ++growSeq;
            String name = options.name() + ".grow" + epoch;
            Store sealed = ((PrefixStore) store).inner();
            if (rank == 0) {
                new PrefixStore(JOIN_BOARD, sealed).setString("offer", name + " " + size + " " + joiners + " "
                    + Long.toHexString(io.jccl.common.SecureIds.nonce()), options.timeoutNs());
            }
            log.info(rank, Log.Subsys.INIT, () -> "grow " + epoch + " of '" + options.name() + "': waiting for "
                + joiners + " joining process(es)");
            Communicator c = create(sealed, null, rank, size + joiners, options.withName(name));
            if (ownedStore != null) {
                c.ownedStore = ownedStore;
                ownedStore = null;
            }
            if (succession != null) {
                int[] same = new int[size];
                java.util.Arrays.setAll(same, i -> i);
                c.succession = succession.handOn(0, same);
                succession = null;
            }
            if (rank == 0) {
                // what the joiners need to survive a later loss of the store's host
                c.store.setString("succession", c.succession == null ? "-" : c.succession.describe(),
                    options.timeoutNs());
            }
            log.info(rank, Log.Subsys.INIT, () -> "grow " + epoch + " ready after "
                + TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - startNs) + " ms: " + c.size() + " ranks");
            return c;
        } finally {
            order.release();
        }
    }

    /**
     * Joins a running job through {@code store} (one the job's ranks use now: {@link #joinAddress()} of any of
     * them; the caller keeps ownership): waits for the survivors' next {@link #grow} offer, claims a place, and
     * returns the grown communicator, in which this process has a rank from the old size up. Offers that are
     * already full are skipped (the next one is waited for), so several joiners may race for places.
     *
     * @throws CollectiveException.Timeout when no offer with a free place comes within the options' timeout
     */
    public static Communicator join(Store store, CommunicatorOptions options) {
        return join(store, null, options);
    }

    /**
     * {@code JCCL_JOIN=1}: joins the job whose store JCCL_STORE_ADDR (or MASTER_ADDR/MASTER_PORT) names, as a
     * client (no server is started here); the communicator owns the store connection.
     */
    private static Communicator joinFromEnvironment(CommunicatorOptions options) {
        java.util.Map<String, String> env = System.getenv();
        String address = env.get("JCCL_STORE_ADDR");
        if ((address == null || address.isBlank()) && env.get("MASTER_ADDR") != null) {
            address = env.get("MASTER_ADDR") + ":" + env.getOrDefault("MASTER_PORT",
                Integer.toString(LaunchEnvironment.DEFAULT_PORT));
        }
        if (address == null || address.isBlank() || address.lastIndexOf(':') < 0) {
            throw new IllegalStateException("JCCL_JOIN=1 without a store address: set JCCL_STORE_ADDR=host:port to "
                + "a store the job's ranks use now (Communicator.joinAddress() of a survivor)");
        }
        int colon = address.lastIndexOf(':');
        String host = address.substring(0, colon).replace("[", "").replace("]", "");
        int port;
        try {
            port = Integer.parseInt(address.substring(colon + 1).trim());
        } catch (NumberFormatException e) {
            throw new IllegalStateException("JCCL_STORE_ADDR=" + address + ": the port is not a number", e);
        }
        TcpStore s = new TcpStore(host, port, false, options.timeoutNs(), options.authSecret());
        try {
            return join(s, s, options);
        } catch (RuntimeException e) {
            s.close();
            throw e;
        }
    }

    private static Communicator join(Store base, Store owned, CommunicatorOptions options) {
        requireNativeAccess();
        Store sealed = options.authSecret() == null || base instanceof SealedStore
            || base instanceof JoinWatchStore w && w.inner() instanceof SealedStore ? base
            : new SealedStore(base, options.authSecret(), options.jobId());
        Store board = new PrefixStore(JOIN_BOARD, sealed);
        long deadline = System.nanoTime() + options.timeoutNs();
        String full = null;
        while (true) {
            String offer;
            try {
                offer = board.getString("offer", remaining(deadline));
            } catch (io.jccl.collectives.store.StoreTimeoutException e) {
                throw new CollectiveException.Timeout("join: no grow offer in " + base.describe() + " within the "
                    + "timeout (JCCL_TIMEOUT): do the job's ranks call grow(), and is this the store they use now "
                    + "(Communicator.joinAddress())?");
            }
            if (!offer.equals(full)) {
                String[] f = offer.split(" ");
                String name = f[0];
                int size = Integer.parseInt(f[1]);
                int joiners = Integer.parseInt(f[2]);
                long place = board.add(name + "/places", 1, remaining(deadline));
                if (place <= joiners) {
                    int rank = size + (int) place - 1;
                    Log.get().info(rank, Log.Subsys.INIT, () -> "join: place " + place + " of " + joiners + " in '"
                        + name + "': rank " + rank + " of " + (size + joiners));
                    Communicator c = create(sealed, owned, rank, size + joiners, options.withName(name));
                    try {
                        String list = c.store.getString("succession", remaining(deadline));
                        if (!list.equals("-") && base instanceof TcpStore t) {
                            c.succession = StoreSuccession.fromDescription(list, t, rank, options.authSecret());
                        }
                    } catch (RuntimeException e) {
                        c.close();
                        throw e;
                    }
                    return c;
                }
                full = offer; // every place taken: wait for the next offer
            }
            if (System.nanoTime() - deadline > 0) {
                throw new CollectiveException.Timeout("join: every grow offer in " + base.describe() + " was full "
                    + "until the timeout (JCCL_TIMEOUT)");
            }
            java.util.concurrent.locks.LockSupport.parkNanos(Shrink.POLL_NS * 4);
        }
    }

    /**
     * Where a process that wants to join this job should find it ({@code host:port} for JCCL_STORE_ADDR with
     * {@code JCCL_JOIN=1}): the TCP store this communicator uses now, which after a loss of rank 0 is a standby
     * store; null when the communicator's store is not a TCP store this rank knows (then pass the store itself to
     * {@link #join(Store, CommunicatorOptions)}).
     */
    public String joinAddress() {
        Store s = succession != null ? succession.first() : ownedStore;
        return s instanceof TcpStore t ? t.host() + ":" + t.port() : null;
    }

    // ============================================================================================ shrink

    /**
     * A new communicator of the live ranks (ULFM's {@code MPIX_Comm_shrink}, NCCL's {@code ncclCommShrink}): every
     * survivor calls it; the ranks left out are those this rank's failure detector knows dead, those named in
     * {@code failedRanks}, and those that do not join within {@code JCCL_PEER_TIMEOUT} (see {@link Shrink}). The
     * survivors agree on the members through the store (the first proposal wins), so each gets the same list, and
     * the members are renumbered in their old order. The new communicator has fresh queue pairs on the same
     * providers and its own store namespace ({@code NAME.shrinkE}, E counting this communicator's shrinks); it
     * takes over the store this one owned. This communicator (failed, revoked or healthy) stays as it was: close
     * it. Works on a failed or revoked communicator. Survives the death of the store's host through standby stores
     * (a fromEnvironment job with JCCL's TCP store, docs/fault-tolerance.md); a member that dies after the decision
     * makes the new join fail, and the members then agree again within this call.
     *
     * @throws CollectiveException.Refused when the others agreed on a member list without this rank (it came late)
     * @throws IllegalArgumentException when {@code failedRanks} names this rank or a rank outside 0..size-1
     */
    public Communicator shrink(int... failedRanks) {
        if (closed) {
            throw new IllegalStateException("communicator '" + options.name() + "' rank " + rank + " is closed");
        }
        failures.checkNotAbortedForShrink();
        java.util.BitSet suspected = new java.util.BitSet(size);
        for (int r : failedRanks) {
            if (r < 0 || r >= size || r == rank) {
                throw new IllegalArgumentException("shrink: failed rank " + r + (r == rank ? " is this rank"
                    : " outside 0.." + (size - 1)));
            }
            suspected.set(r);
        }
        long ticket = order.take();
        order.awaitTurn(ticket); // operations still queued end first (on a failed communicator they fail at once)
        try {
            long startNs = System.nanoTime();
            long deadline = startNs + options.timeoutNs();
            int epoch = ++shrinkSeq;
            failures.addKnownFailed(suspected);
            suspected.clear(rank); // peers may name this rank (it was stopped); it is here now, and it joins
            // The new join waits for every member's records: a member that died after the decision must not hold
            // the others for JCCL_TIMEOUT; they then agree again (a new attempt under the same epoch).
            long joinTimeoutNs = Math.min(options.timeoutNs(), Math.max(2 * options.peerTimeoutNs(), MIN_SHRINK_JOIN_NS));
            for (int attempt = 1; ; attempt++) {
                String tag = epoch + (attempt > 1 ? "." + attempt : "");
                Located at = decide("shrink " + tag, "shrink" + tag + "/", -1, suspected, deadline);
                long decidedNs = System.nanoTime();
                int[] members = at.decision().members();
                int newRank = java.util.Arrays.binarySearch(members, rank);
                if (newRank < 0) {
                    throw new CollectiveException.Refused("rank " + rank + " of '" + options.name() + "' was left "
                        + "out of shrink " + tag + ": the survivors agreed on ranks " + java.util.Arrays.toString(
                        members) + " before it joined");
                }
                log.info(rank, Log.Subsys.INIT, () -> "shrink " + tag + " of '" + options.name() + "': members "
                    + java.util.Arrays.toString(members) + " (left out: " + leftOut(members) + "), this rank becomes "
                    + newRank + " of " + members.length);
                CommunicatorOptions o = options.withName(options.name() + ".shrink" + tag);
                Communicator c;
                // a member killed after the decision never joins: watch the members' processes while joining
                MessagePath m = messagePath;
                StoreSuccession live = succession;
                JoinWatchStore watch = new JoinWatchStore(at.base(), members.length, newRank,
                    j -> m != null && m.processGone(members[j]) || live != null && live.refused(members[j]));
                try {
                    c = create(watch, null, newRank, members.length, o, joinTimeoutNs, null);
                    watch.disarm();
                } catch (CollectiveException.PeerFailure | CollectiveException.Timeout | StoreException e) {
                    if (System.nanoTime() - deadline > 0) {
                        throw e;
                    }
                    if (e instanceof CollectiveException.PeerFailure pf && pf.rank() >= 0
                        && pf.rank() < members.length) {
                        suspected.set(members[pf.rank()]);
                    }
                    int next = attempt + 1;
                    log.warn(rank, Log.Subsys.INIT, "shrink " + tag + ": the new communicator's join failed ("
                        + e.getMessage() + "); a member may have died after the decision: agreeing again (shrink "
                        + epoch + "." + next + ")");
                    continue;
                }
                if (ownedStore != null) {
                    // the survivors go on with the new communicator: it closes the store when it closes
                    c.ownedStore = ownedStore;
                    ownedStore = null;
                }
                if (succession != null) {
                    c.succession = succession.handOn(at.index(), members);
                    succession = null;
                }
                ShrinkTimes times = new ShrinkTimes(startNs, decidedNs, c.joined.stepsNs(), c.initDoneNs,
                    System.nanoTime(), attempt, at.index());
                lastShrinkTimes = times;
                log.info(rank, Log.Subsys.INIT, () -> "shrink " + tag + " ready after "
                    + TimeUnit.NANOSECONDS.toMillis(times.readyNs() - startNs) + " ms: " + times.describe());
                return c;
            }
        } finally {
            order.release();
        }
    }

    /** Where shrink and agree decided: the decision, its store's place in the succession, that store (unwrapped). */
    private record Located(Shrink.Decision decision, int index, Store base) {
    }

    /**
     * Runs the agreement under {@code prefix} ({@link Shrink}): through the communicator's store, or, with a
     * {@link StoreSuccession}, through the first store of the succession that answers.
     */
    private Located decide(String what, String prefix, int value, java.util.BitSet suspected, long deadline) {
        MessagePath m = messagePath;
        StoreSuccession live = succession;
        // dead by the kernel's word: a same-host process gone, or a rank's liveness port refused (another host)
        java.util.function.IntPredicate gone = j -> m != null && m.processGone(j) || live != null && live.refused(j);
        long waitNs = options.peerTimeoutNs();
        if (succession == null) {
            Shrink.Decision d = Shrink.decide(store, prefix, rank, size, value, suspected, gone, waitNs, deadline);
            return new Located(d, 0, ((PrefixStore) store).inner());
        }
        StoreSuccession.Located at = succession.decide(what, (ns, moved) -> Shrink.decideOrMove(ns, prefix, rank,
            size, value, suspected, gone, waitNs, deadline, moved, live.ownAddress(), live::learnAddress),
            b -> namespaced(b, options), prefix, waitNs, deadline);
        return new Located(at.decision(), at.index(), at.base());
    }

    /**
     * What {@link #agree} returns: the bitwise AND of the participating ranks' values, and the ranks left out
     * (failed, or too late), the same on every rank that returns.
     *
     * @param value       the AND of the values of the ranks not in {@code failedRanks}
     * @param failedRanks the ranks whose values are not in it (ascending)
     */
    public record Agreement(int value, int[] failedRanks) {
    }

    /**
     * Fault-tolerant agreement (ULFM's {@code MPIX_Comm_agree}): every live rank calls it with a value; each that
     * returns gets the bitwise AND of the values of the ranks that took part and the same set of ranks that did not
     * (failed ones: known dead, or not joined within {@code JCCL_PEER_TIMEOUT}), even when ranks fail during the call.
     * Works on a failed or revoked communicator (it goes through the store, or a standby store when the store's host
     * died, not through the links): survivors use it to decide together, for example whether a step commits. Costs store round trips:
     * not for every step of a hot loop.
     *
     * @throws CollectiveException.Refused when the others decided without this rank (it came too late)
     */
    public Agreement agree(int value) {
        if (closed) {
            throw new IllegalStateException("communicator '" + options.name() + "' rank " + rank + " is closed");
        }
        failures.checkNotAbortedForShrink();
        long ticket = order.take();
        order.awaitTurn(ticket);
        try {
            long deadline = System.nanoTime() + options.timeoutNs();
            int epoch = ++agreeSeq;
            java.util.BitSet suspected = new java.util.BitSet(size);
            failures.addKnownFailed(suspected);
            suspected.clear(rank);
            Shrink.Decision d = decide("agreement " + epoch, "agree" + epoch + "/", value, suspected, deadline)
                .decision();
            if (java.util.Arrays.binarySearch(d.members(), rank) < 0) {
                throw new CollectiveException.Refused("rank " + rank + " of '" + options.name() + "' was left out "
                    + "of agreement " + epoch + ": the others decided with ranks " + java.util.Arrays.toString(
                    d.members()) + " before it joined");
            }
            java.util.BitSet out = new java.util.BitSet(size);
            out.set(0, size);
            for (int r : d.members()) {
                out.clear(r);
            }
            return new Agreement(d.value(), out.stream().toArray());
        } finally {
            order.release();
        }
    }

    /**
     * The ranks this rank knows have failed (ULFM's {@code MPIX_Comm_get_failed}): those its failure detector named
     * and those peers' abort notices named. Different ranks may know different sets; {@link #shrink} agrees on one.
     */
    public int[] knownFailedRanks() {
        java.util.BitSet s = new java.util.BitSet(size);
        failures.addKnownFailed(s);
        return s.stream().toArray();
    }

    private String leftOut(int[] members) {
        java.util.BitSet s = new java.util.BitSet(size);
        s.set(0, size);
        for (int r : members) {
            s.clear(r);
        }
        return s.toString();
    }

    private static long remaining(long deadline) {
        return Math.max(1, deadline - System.nanoTime());
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
        if (closed) {
            return;
        }
        failures.abort(reason);
    }

    /**
     * Revokes the communicator (ULFM's {@code MPIX_Comm_revoke}, NCCL's {@code ncclCommRevoke}), from any thread and
     * without the other ranks' help: this rank's pending and later operations fail with
     * {@link CollectiveException.Revoked} naming this rank and {@code reason}; the revocation travels along the links
     * (a notice on each queue pair, the direct path's status word), and each rank that learns of it revokes its own
     * communicator and passes it on, so no rank stays blocked in an operation its peers have left. Unlike
     * {@link #abort()} the communicator stays open: the survivors then {@link #shrink} it. Idempotent; concurrent
     * revocations from several ranks are harmless. See docs/fault-tolerance.md.
     */
    public void revoke(String reason) {
        if (closed) {
            return;
        }
        failures.revoke(reason == null ? "revoke() called" : reason);
    }

    /** Whether this rank knows the communicator is revoked (by itself, or by a peer's notice it has read). */
    public boolean isRevoked() {
        return failures.isRevoked();
    }

    /** Whether the communicator was aborted or failed. */
    public boolean isFailed() {
        return failures.isFailed();
    }

    /**
     * Releases queue pairs, memory and (for {@link #fromEnvironment()}) the store. Waits for operations still in
     * flight (another thread's, or queued asynchronous ones) at most 10 seconds (or the timeout, if shorter), then
     * aborts them and releases everything once they have failed: close never waits out an operation's deadline.
     * Call {@link #abort()} first to give up on them at once.
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        long ticket = order.takeAfterAll();
        long graceNs = Math.min(options.timeoutNs(), CLOSE_GRACE_NS);
        if (!order.awaitTurn(ticket, graceNs)) {
            // An operation (another thread's, or queued ones) is still running or stuck: close is bounded, so it
            // aborts them (they fail at their next wait) and takes the turn once they have given up.
            failures.abort("close() was called while operations were still running after "
                + TimeUnit.NANOSECONDS.toMillis(graceNs) + " ms");
            if (!order.awaitTurn(ticket, CLOSE_GRACE_NS)) {
                log.warn(rank, Log.Subsys.INIT, "close: an operation did not end after abort; releasing resources "
                    + "under it");
            }
        }
        if (directBarrier != null && !failures.anyFailure() && !failures.aborted()) {
            // Peers may still be reading this rank's staging buffer (the last direct op's gather phase): meet
            // them once more before the memory goes away. Short deadline: a peer that never closes costs 5 s.
            try {
                sig.set(opSeq + 1, Collective.BARRIER, 0, null, null, -2);
                waits.setDeadline(System.nanoTime() + Math.min(options.timeoutNs(), TimeUnit.SECONDS.toNanos(5)));
                directBarrier.await(sig, false);
            } catch (RuntimeException e) {
                log.info(rank, Log.Subsys.INIT, () -> "close: peers did not all reach the closing barrier (" + e.getMessage()
                    + ")");
            }
        }
        closed = true;
        order.release();
        order.shutdown();
        closeResources();
    }

    private void closeResources() {
        for (ProcessExits.Watch w : exitWatches) {
            w.close();
        }
        if (messagePath != null) {
            messagePath.closeSourceCaches();
        }
        allocations.close();
        if (messagePath != null) {
            messagePath.close();
        }
        if (directPath != null) {
            directPath.close();
        }
        statistics.closeDirect();
        if (messagePath != null) {
            messagePath.closeDevices();
        }
        bounce.close();
        if (succession != null) {
            succession.close();
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
