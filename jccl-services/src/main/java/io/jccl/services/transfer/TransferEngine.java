package io.jccl.services.transfer;

import io.jccl.collectives.CommunicatorOptions;
import io.jccl.collectives.LaunchEnvironment;
import io.jccl.collectives.bootstrap.Bootstrap;
import io.jccl.collectives.bootstrap.DeviceChoice;
import io.jccl.collectives.bootstrap.JoinRecord;
import io.jccl.collectives.bootstrap.SealedStore;
import io.jccl.collectives.message.DeviceResources;
import io.jccl.collectives.store.PrefixStore;
import io.jccl.collectives.store.Store;
import io.jccl.common.Log;
import io.jccl.common.ProcessIds;
import io.jccl.common.idle.BackoffIdleStrategy;
import io.jccl.common.idle.IdleStrategy;
import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.DeviceAttributes;
import io.jccl.verbs.Endpoint;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.Reach;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.WorkCompletion;
import io.jccl.verbs.WorkCompletionStatus;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;
import java.util.concurrent.locks.ReentrantLock;
import java.util.regex.Pattern;

/**
 * The transfer engine: one per process, joined to the job through the job's store (the same store, rank, size and
 * options a {@link io.jccl.collectives.Communicator} uses), moving bytes between named memory segments of the job's
 * processes with one-sided READ and WRITE over whatever device reaches each peer (shm0 on one host, tcp0 across
 * hosts, any provider later: the device is chosen per peer exactly as communicators choose it). The API follows
 * Mooncake's Transfer Engine and NIXL's agents, in Java's terms:
 *
 * <ul>
 *   <li>{@link #registerSegment(String, MemorySegment)} / {@link #registerSegment(String, long)} publish
 *       name → (rank, length, address and key per device) in the store, sealed when {@code JCCL_AUTH_SECRET} is
 *       set; {@link LocalSegment#close()} revokes it.</li>
 *   <li>{@link #openSegment(String)} returns a {@link RemoteSegment}; the first open of a peer's segment connects
 *       this engine to that peer ({@code JCCL_TRANSFER_QPS} queue pairs, lazily: see docs/services.md).</li>
 *   <li>{@link #newBatch(int)} returns a reusable {@link TransferBatch} (Mooncake's {@code allocateBatchID}): add
 *       READs and WRITEs, optionally a {@linkplain TransferBatch#notify(byte[]) notification}, submit, then poll,
 *       await or take its {@link java.util.concurrent.CompletableFuture}; each transfer has its own status.</li>
 *   <li>{@link #pollNotification(long, TimeUnit)} returns notifications peers attached to batches that landed
 *       here.</li>
 * </ul>
 *
 * <p>Progress: callers that poll or await a batch drive the completion queues themselves; a daemon agent thread
 * drives them otherwise (futures, notifications), answers peers' connection requests, and reconnects a link whose
 * queue pair failed. Every wait has a deadline ({@code JCCL_TIMEOUT}).
 */
public final class TransferEngine implements AutoCloseable {
    /** Largest notification message in bytes. */
    public static final int NOTIFICATION_MAX_BYTES = 64;
    /** Send-queue depth of each queue pair towards a peer: slices in flight per queue pair. */
    static final int SEND_DEPTH = 128;
    /**
     * Transfers up to this size fill one queue pair before the next ({@link OutLink#pickQueuePairForSmall}); larger
     * ones go round robin, slice by slice, so that their bytes spread over several connections.
     */
    static final long SMALL_TRANSFER_BYTES = 16 << 10;
    /**
     * In a post list of small transfers at least every this many is signaled (and the list's last): the others
     * complete unsignaled, covered by the next signaled completion of their queue pair (an RC queue pair completes
     * its requests in order, ibv_post_send(3)), so a 256-row lookup costs 8 completions instead of 256.
     */
    static final int SIGNAL_EVERY = 32;
    /** Receives posted per inbound queue pair, for notifications. */
    static final int RECEIVE_DEPTH = 32;
    /** The transfer index that marks a notification's work request. */
    static final int NOTIFY = 0x3FFFFF;
    /** Work-request ids with this bit are receives (notifications); see {@link #sendId}. */
    private static final long RECEIVE_BIT = 1L << 63;
    private static final Pattern NAME = Pattern.compile("[A-Za-z0-9._:@+=-][A-Za-z0-9._:@+=/-]{0,199}");
    private static final long STORE_PERIOD_IDLE_NS = 5_000_000L;
    private static final long STORE_PERIOD_BUSY_NS = 500_000L;

    private final Log log = Log.get();
    private final Store store;
    private final Store owned;
    private final int rank;
    private final int size;
    private final CommunicatorOptions options;
    private final TransferSettings settings;
    private final DeviceChoice deviceChoice;
    /** Devices in use (some peer's choice), in preference order; a segment has one region per entry. */
    final DeviceResources[] devices;
    /**
     * Completion queue of the inbound queue pairs (peers' links to this engine) per device: the agent's alone, so it
     * can wait in the provider's blocking poll for notifications without the engine's lock.
     */
    private final CompletionQueue[] inboundQueues;
    /** Slice size per device (by its link layer unless set). */
    private final int[] sliceBytes;
    /**
     * Threads in {@link TransferBatch#await()}: they drive the completion queue themselves, so the agent leaves it to
     * them instead of spinning beside them for the same cores.
     */
    final java.util.concurrent.atomic.AtomicInteger awaiting = new java.util.concurrent.atomic.AtomicInteger();
    /** Batches submitted and not done (written under the lock; the agent reads it to choose how to wait). */
    private volatile int inflightCount;
    /** Index into {@link #devices} per peer (-1 for this rank). */
    private final int[] deviceIndex;
    private final JoinRecord[] records;
    private final OutLink[] out;
    private final InLink[] in;
    private final long[] inGeneration;
    private final ReentrantLock lock = new ReentrantLock();
    private final WorkCompletion[] completions = WorkCompletion.array(64);
    private final WorkCompletion[] inboundCompletions = WorkCompletion.array(64);
    private final ReceiveWorkRequest inboundReceive = new ReceiveWorkRequest(1);
    private final SendWorkRequest send = new SendWorkRequest(1);
    private final TransferBatch[] batches = new TransferBatch[1 << 15];
    private final ArrayDeque<TransferBatch> pending = new ArrayDeque<>();
    private final ArrayList<TransferBatch> inflight = new ArrayList<>();
    private final LinkedBlockingQueue<Notification> notifications = new LinkedBlockingQueue<>();
    /** Listeners that see each notification before the queue does (services built on the engine). */
    private final java.util.concurrent.CopyOnWriteArrayList<NotificationListener> listeners =
        new java.util.concurrent.CopyOnWriteArrayList<>();
    private final Map<String, LocalSegment> locals = new ConcurrentHashMap<>();
    private final Thread agent;
    private int nextSlot;
    /** Requests posted so far (slices and notifications); guarded by the lock. */
    private long posted;
    private long nextDeadlineCheckNs;
    private long lastBell = -1;
    private volatile boolean closed;

    // ================================================================================================ creation

    private TransferEngine(Store base, Store owned, int rank, int size, CommunicatorOptions options,
                           TransferSettings settings) {
        if (size < 1 || rank < 0 || rank >= size) {
            throw new IllegalArgumentException("rank " + rank + " outside 0.." + (size - 1) + " (size " + size + ")");
        }
        this.owned = owned;
        this.rank = rank;
        this.size = size;
        this.options = options;
        this.settings = settings;
        // Sealed as a communicator's values are (same key derivation): endpoints and rkeys are secrets.
        Store sealed = options.authSecret() == null || base instanceof SealedStore ? base
            : new SealedStore(base, options.authSecret(), options.jobId());
        this.store = new PrefixStore("jccl-transfer/" + options.name(), sealed);
        this.out = new OutLink[size];
        this.in = new InLink[size];
        this.inGeneration = new long[size];
        this.deviceIndex = new int[size];
        long deadlineNs = System.nanoTime() + options.timeoutNs();
        String hostId = Bootstrap.hostIdentity(options);
        int q = settings.queuePairsPerPeer();
        int cqCapacity = Math.max(1024, size * q * (SEND_DEPTH + RECEIVE_DEPTH) + 64);
        deviceChoice = new DeviceChoice(options);
        try {
            if (size > 1) {
                deviceChoice.open(true, cqCapacity, Reach.HOST);
            }
            String settingsHash = Integer.toHexString(TransferSettings.fingerprint().hashCode());
            records = Bootstrap.exchangeJoinRecords(store, rank, size, options, hostId, settingsHash,
                String.join(",", deviceChoice.opened().keySet()), deadlineNs);
            String[] hostIds = new String[size];
            String[] devicesOf = new String[size];
            for (int j = 0; j < size; j++) {
                hostIds[j] = records[j].hostId();
                devicesOf[j] = records[j].devices();
            }
            DeviceChoice.Choices choices = deviceChoice.choosePeers(store, rank, hostId, hostIds, devicesOf,
                cqCapacity, deadlineNs);
            Map<String, Integer> used = new LinkedHashMap<>();
            for (String d : deviceChoice.order()) {
                for (int j = 0; j < size; j++) {
                    if (j != rank && d.equals(choices.devices()[j])) {
                        used.putIfAbsent(d, used.size());
                    }
                }
            }
            for (int j = 0; j < size; j++) {
                if (j == rank) {
                    deviceIndex[j] = -1;
                    continue;
                }
                String d = choices.devices()[j];
                if (d == null) {
                    throw new TransferException("rank " + rank + " has no transport in common with rank " + j + ": "
                        + choices.reasons()[j] + "(JCCL_TRANSPORT=" + options.transports() + ")");
                }
                deviceIndex[j] = used.get(d);
            }
            devices = new DeviceResources[used.size()];
            for (var e : used.entrySet()) {
                devices[e.getValue()] = deviceChoice.opened().get(e.getKey());
            }
            sliceBytes = new int[devices.length];
            for (int d = 0; d < devices.length; d++) {
                sliceBytes[d] = settings.sliceBytesFor(devices[d].linkLayer());
            }
            inboundQueues = new CompletionQueue[devices.length];
            for (int d = 0; d < devices.length; d++) {
                inboundQueues[d] = devices[d].context().createCompletionQueue(Math.min(
                    size * q * RECEIVE_DEPTH + 64, devices[d].context().query().maxCompletionQueueEntries()));
            }
            // Close the devices nobody uses.
            for (var it = deviceChoice.opened().entrySet().iterator(); it.hasNext(); ) {
                var e = it.next();
                if (!used.containsKey(e.getKey())) {
                    e.getValue().close();
                    it.remove();
                }
            }
            if (log.enabled(Log.Level.INFO, Log.Subsys.INIT)) {
                StringBuilder sb = new StringBuilder("transfer engine: rank " + rank + " of " + size + ", devices");
                for (int d = 0; d < devices.length; d++) {
                    sb.append(' ').append(devices[d].name()).append(" (slices of ").append(sliceBytes[d]).append(" B)");
                }
                log.info(rank, Log.Subsys.INIT, sb.append(", ").append(q).append(" QPs per peer").toString());
            }
        } catch (RuntimeException e) {
            deviceChoice.closeAll();
            throw e;
        }
        agent = Thread.ofPlatform().daemon().name("jccl-transfer-" + rank).unstarted(this::runAgent);
        agent.start();
    }

    /**
     * Joins the job as {@code rank} of {@code size} through {@code store} (which the caller keeps ownership of):
     * every rank's engine publishes its join record (checked as a communicator checks them: job, settings, secret)
     * and the devices it opened; the device per peer is chosen as communicators choose it. Blocks until every rank
     * has joined or {@code options}' timeout passes. Queue pairs are created later, per peer, on first use.
     */
    public static TransferEngine create(Store store, int rank, int size, CommunicatorOptions options,
                                        TransferSettings settings) {
        return new TransferEngine(store, null, rank, size, options, settings);
    }

    /** {@link #create(Store, int, int, CommunicatorOptions, TransferSettings)} with settings from the environment. */
    public static TransferEngine create(Store store, int rank, int size, CommunicatorOptions options) {
        return create(store, rank, size, options, TransferSettings.fromEnvironment());
    }

    /**
     * Joins using the launcher's environment as {@link io.jccl.collectives.Communicator#fromEnvironment()} does
     * (JCCL_RANK/JCCL_WORLD_SIZE/JCCL_STORE_ADDR, torchrun, Open MPI, Slurm); the engine owns the store.
     */
    public static TransferEngine fromEnvironment() {
        CommunicatorOptions options = CommunicatorOptions.fromEnvironment();
        LaunchEnvironment env = LaunchEnvironment.detect(System.getenv());
        Store s = env.openStore(options.timeoutNs(), options.authSecret());
        try {
            return new TransferEngine(s, s, env.rank(), env.worldSize(), options, TransferSettings.fromEnvironment());
        } catch (RuntimeException e) {
            s.close();
            throw e;
        }
    }

    /** This engine's rank. */
    public int rank() {
        return rank;
    }

    /** Number of ranks in the job. */
    public int size() {
        return size;
    }

    /** The settings every rank of the job shares. */
    public TransferSettings settings() {
        return settings;
    }

    /** Largest slice of a transfer to {@code peer} (this rank: no slicing, a memory copy). */
    public int sliceBytesTo(int peer) {
        return peer == rank ? Integer.MAX_VALUE : sliceBytes[deviceIndex[peer]];
    }

    /** The name of the device that reaches {@code peer} ({@code shm0}, {@code tcp0}), or null for this rank. */
    public String deviceFor(int peer) {
        return peer == rank ? null : devices[deviceIndex[peer]].name();
    }

    // ================================================================================================ segments

    /**
     * Allocates {@code length} bytes of zeroed memory that every device can share without copies (for shm, a file
     * under /dev/shm) and registers it as {@code name}.
     *
     * @throws TransferException when the name is taken by some rank of the job
     */
    public LocalSegment registerSegment(String name, long length) {
        checkName(name);
        if (length < 1) {
            throw new IllegalArgumentException("segment '" + name + "': length " + length + " must be at least 1");
        }
        if (devices.length == 0) {
            Arena arena = Arena.ofShared();
            return register(name, arena.allocate(length, 64), null, arena);
        }
        MemoryRegion first = devices[0].protectionDomain().allocateMemory(length, access());
        return register(name, first.segment(), first, null);
    }

    /**
     * Registers existing off-heap memory as {@code name} (the caller keeps it alive until the segment is closed).
     *
     * @throws TransferException when the name is taken by some rank of the job
     */
    public LocalSegment registerSegment(String name, MemorySegment memory) {
        checkName(name);
        if (!memory.isNative()) {
            throw new IllegalArgumentException("segment '" + name + "': heap memory cannot be registered (the garbage "
                + "collector moves it); allocate it from an Arena");
        }
        if (memory.byteSize() < 1) {
            throw new IllegalArgumentException("segment '" + name + "' is empty");
        }
        return register(name, memory, null, null);
    }

    private static AccessFlag[] access() {
        return new AccessFlag[] {AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ};
    }

    private static void checkName(String name) {
        if (name == null || !NAME.matcher(name).matches()) {
            throw new IllegalArgumentException("segment name '" + name + "': 1 to 200 of A-Z a-z 0-9 . _ : @ + = - /"
                + " (not starting with /)");
        }
    }

    private LocalSegment register(String name, MemorySegment memory, MemoryRegion first, Arena arena) {
        checkOpen();
        MemoryRegion[] regions = new MemoryRegion[devices.length];
        StringBuilder record = new StringBuilder().append(rank).append(' ').append(memory.byteSize()).append(' ');
        try {
            for (int d = 0; d < devices.length; d++) {
                regions[d] = d == 0 && first != null ? first
                    : devices[d].protectionDomain().registerMemory(memory, access());
                record.append(d == 0 ? "" : ",").append(devices[d].name()).append('=')
                    .append(Long.toHexString(regions[d].address())).append(':')
                    .append(Integer.toHexString(regions[d].rkey()));
            }
            LocalSegment segment = new LocalSegment(this, name, memory, regions, arena);
            if (!store.compareAndSet(segmentKey(name), null, record.toString().getBytes(StandardCharsets.UTF_8),
                options.timeoutNs())) {
                String owner;
                try {
                    owner = "rank " + store.getString(segmentKey(name), options.timeoutNs()).split(" ")[0];
                } catch (RuntimeException e) {
                    owner = "another rank";
                }
                throw new TransferException("segment name '" + name + "' is already registered by " + owner);
            }
            locals.put(name, segment);
            return segment;
        } catch (RuntimeException e) {
            closeRegions(regions);
            if (arena != null) {
                arena.close();
            }
            throw e;
        }
    }

    private static void closeRegions(MemoryRegion[] regions) {
        // Region 0 may own the memory the others were registered over: it goes last.
        for (int d = regions.length - 1; d >= 0; d--) {
            if (regions[d] != null) {
                try {
                    regions[d].close();
                } catch (RuntimeException ignored) {
                    // closing anyway
                }
            }
        }
    }

    /** Revokes {@code segment}: its name leaves the store, then its keys are refused. */
    void unregister(LocalSegment segment) {
        locals.remove(segment.name(), segment);
        try {
            if (!closed) {
                store.delete(segmentKey(segment.name()), options.timeoutNs());
            }
        } catch (RuntimeException e) {
            log.info(rank, Log.Subsys.NET, () -> "could not remove segment '" + segment.name() + "' from the store: " + e);
        }
        lock.lock();
        try {
            closeRegions(segment.regions);
        } finally {
            lock.unlock();
        }
        if (segment.arena != null) {
            segment.arena.close();
        }
    }

    private static String segmentKey(String name) {
        return "seg/" + name;
    }

    /**
     * {@link #openSegment(String, Duration)} without waiting: fails at once when no rank has registered
     * {@code name}.
     */
    public RemoteSegment openSegment(String name) {
        return openSegment(name, Duration.ZERO);
    }

    /**
     * Opens the segment some rank registered as {@code name}, waiting up to {@code wait} for it to be registered;
     * connects this engine to the owner if it is not yet (bounded by the job's timeout).
     *
     * @throws TransferException when no rank registered the name in time, or the owner cannot be reached
     */
    public RemoteSegment openSegment(String name, Duration wait) {
        checkName(name);
        checkOpen();
        long start = System.nanoTime();
        long waitDeadlineNs = start + wait.toNanos();
        String key = segmentKey(name);
        // Polls rather than blocking in the store: a blocking get would hold a TcpStore's connection, which the
        // agent needs to answer peers' connection requests meanwhile.
        while (!store.check(key, options.timeoutNs())) {
            if (System.nanoTime() - waitDeadlineNs >= 0) {
                throw new TransferException("no segment named '" + name + "' is registered in job '" + options.jobId()
                    + "'" + (wait.isZero() ? "" : " (waited " + wait.toMillis() + " ms)") + " in " + store.describe());
            }
            LockSupport.parkNanos(500_000);
        }
        String record;
        try {
            record = store.getString(key, options.timeoutNs());
        } catch (RuntimeException e) {
            throw new TransferException("segment '" + name + "' could not be read from " + store.describe() + ": "
                + e.getMessage(), e);
        }
        String[] f = record.split(" ");
        int owner = Integer.parseInt(f[0]);
        long length = Long.parseLong(f[1]);
        if (owner < 0 || owner >= size) {
            throw new TransferException("segment '" + name + "' names rank " + owner + " outside this job of " + size);
        }
        if (owner == rank) {
            LocalSegment self = locals.get(name);
            if (self == null) {
                throw new TransferException("segment '" + name + "' was unregistered");
            }
            return new RemoteSegment(this, name, owner, length, self.memory().address(), 0, self);
        }
        String device = devices[deviceIndex[owner]].name();
        long address = -1;
        int rkey = 0;
        for (String entry : f[2].split(",")) {
            int eq = entry.indexOf('=');
            int colon = entry.indexOf(':');
            if (entry.substring(0, eq).equals(device)) {
                address = Long.parseUnsignedLong(entry.substring(eq + 1, colon), 16);
                rkey = Integer.parseUnsignedInt(entry.substring(colon + 1), 16);
            }
        }
        if (address == -1) {
            throw new TransferException("segment '" + name + "' of rank " + owner + " is not registered on " + device
                + ", the device that reaches it (registered on " + f[2] + ")");
        }
        connect(owner, start + options.timeoutNs());
        return new RemoteSegment(this, name, owner, length, address, rkey, null);
    }

    /**
     * A read-only view of {@code segment}'s memory for plain loads, or null when the device that reaches its owner
     * offers no direct access (tcp0, RDMA NICs): on shm0 the owner's pages mapped into this process, granted under
     * the checks of a READ ({@code QueuePair.mapRemote}); for this rank's own segment, its memory. Loads through the
     * view post no work request and see no completion, so nothing in them says that the owner died or revoked the
     * segment (the view stays readable for up to about a second after a revocation, then its accesses throw
     * {@code IllegalStateException}; a rebuilt link unmaps it too): a caller confirms what it read with a transfer
     * now and then, as the embedding cache does.
     *
     * @throws TransferException when the owner refuses the mapping (segment unregistered, key refused)
     */
    public MemorySegment mapSegment(RemoteSegment segment) {
        checkOpen();
        if (segment.engine != this) {
            throw new IllegalArgumentException(segment + " belongs to another transfer engine");
        }
        if (segment.self != null) {
            return segment.self.memory().asReadOnly();
        }
        lock.lock();
        try {
            OutLink link = out[segment.rank()];
            if (link == null || link.state != OutLink.CONNECTED || link.qps.length == 0
                || !link.qps[0].supportsDirectAccess()) {
                return null;
            }
            return link.qps[0].mapRemote(segment.address, segment.length(), segment.rkey, false);
        } catch (io.jccl.verbs.VerbsException e) {
            throw new TransferException(segment + " cannot be mapped: " + e.getMessage(), e);
        } finally {
            lock.unlock();
        }
    }

    // ================================================================================================ batches

    /**
     * A batch holding up to {@code capacity} transfers (Mooncake's {@code allocateBatchID}), reusable after it
     * completes ({@link TransferBatch#clear()}); {@link TransferBatch#close()} frees it.
     *
     * @throws IllegalArgumentException when {@code capacity} exceeds {@code JCCL_TRANSFER_BATCH_MAX}
     */
    public TransferBatch newBatch(int capacity) {
        checkOpen();
        if (capacity < 1 || capacity > settings.maxBatchTransfers()) {
            throw new IllegalArgumentException("batch capacity " + capacity + " outside 1.."
                + settings.maxBatchTransfers() + " (JCCL_TRANSFER_BATCH_MAX)");
        }
        lock.lock();
        try {
            for (int i = 0; i < batches.length; i++) {
                int slot = (nextSlot + i) & (batches.length - 1);
                if (batches[slot] == null) {
                    nextSlot = slot + 1;
                    TransferBatch b = new TransferBatch(this, slot, capacity);
                    batches[slot] = b;
                    return b;
                }
            }
        } finally {
            lock.unlock();
        }
        throw new TransferException("too many batches open at once (" + batches.length + "): close some");
    }

    /** Slices of {@code b} posted (or waiting for a retry) whose completion has not come back; read under the lock. */
    int inFlight(TransferBatch b) {
        lock.lock();
        try {
            return b.inFlight;
        } finally {
            lock.unlock();
        }
    }

    /** Frees {@code b}'s slot once nothing of it is in flight (else when its last slice returns). */
    void release(TransferBatch b) {
        lock.lock();
        try {
            b.closed = true;
            if (b.inFlight == 0 && batches[b.slot] == b) {
                batches[b.slot] = null;
            }
        } finally {
            lock.unlock();
        }
    }

    /** Posts what can be posted of {@code b} now (the batch checked its transfers); the rest goes on later. */
    void submit(TransferBatch b) {
        checkOpen();
        lock.lock();
        try {
            b.deadlineNs = System.nanoTime() + options.timeoutNs();
            inflight.add(b);
            inflightCount = inflight.size();
            for (int t = 0; t < b.count; t++) {
                if (b.status[t] == TransferBatch.PENDING && b.remote[t].self != null) {
                    copyLocally(b, t);
                }
            }
            if (b.unresolved == 0) {
                b.transfersResolved();
            } else {
                enqueue(b);
            }
            pump();
        } finally {
            lock.unlock();
        }
    }

    /** A transfer to this rank's own segment: a memory copy. */
    private static void copyLocally(TransferBatch b, int t) {
        LocalSegment target = b.remote[t].self;
        if (!target.isRegistered()) {
            b.fail(t, "segment '" + target.name() + "' of rank " + b.remote[t].rank() + " was unregistered");
            return;
        }
        if (b.write[t]) {
            MemorySegment.copy(b.local[t].memory(), b.localOffset[t], target.memory(), b.remoteOffset[t],
                b.length[t]);
        } else {
            MemorySegment.copy(target.memory(), b.remoteOffset[t], b.local[t].memory(), b.localOffset[t],
                b.length[t]);
        }
        b.sliceDone(t, b.slicesLeft[t]);
    }

    /**
     * Drives progress once: completions of every device, posting of waiting slices, deadlines. Returns the work
     * done (for idle strategies).
     */
    int progress() {
        lock.lock();
        try {
            return progressLocked();
        } finally {
            lock.unlock();
        }
    }

    /**
     * Waits up to {@code maxNs} for a completion in the provider's own blocking poll (its spin, then its wake-up
     * source: a futex for shm, the socket for tcp), which wakes a waiter sooner than sleeping between polls; with
     * several devices in use it polls them once and idles with the batch's strategy. Returns at once when
     * {@code batch} is done: the agent may have taken its last completion meanwhile (it dispatches under the lock,
     * so the check under the lock is exact), and waiting for another would cost the waiter the whole
     * {@code maxNs}.
     */
    int awaitCompletions(TransferBatch batch, long maxNs) {
        if (devices.length != 1) {
            // Several devices: no one blocking poll covers them all; poll them, then the batch's idle strategy.
            int n = progress();
            if (n > 0) {
                batch.idle.reset();
            } else if (!batch.isDone()) {
                batch.idle.idleAtMost(maxNs);
            }
            return n;
        }
        lock.lock();
        try {
            if (batch.isDone()) {
                return 1;
            }
            int n = devices[0].completionQueue().poll(completions, completions.length, maxNs);
            for (int i = 0; i < n; i++) {
                dispatch(completions[i]);
            }
            return n + progressLocked();
        } finally {
            lock.unlock();
        }
    }

    private int progressLocked() {
        int work = 0;
        for (DeviceResources d : devices) {
            int n = d.completionQueue().poll(completions, completions.length);
            for (int i = 0; i < n; i++) {
                dispatch(completions[i]);
            }
            work += n;
        }
        work += pump();
        long now = System.nanoTime();
        if (now - nextDeadlineCheckNs >= 0) {
            nextDeadlineCheckNs = now + 1_000_000L;
            checkDeadlines(now);
        }
        return work;
    }

    /** Work-request id of a send: slot (15 bits), queue pair (4), transfer (22), slice (22). */
    static long sendId(int slot, int qp, int transfer, int slice) {
        return ((long) slot << 48) | ((long) qp << 44) | ((long) transfer << 22) | slice;
    }

    private void dispatch(WorkCompletion wc) {
        long id = wc.wrId();
        if ((id & RECEIVE_BIT) != 0) {
            onReceive(wc, id);
            return;
        }
        int slot = (int) (id >>> 48);
        int qp = (int) ((id >>> 44) & 0xF);
        int t = (int) ((id >>> 22) & 0x3FFFFF);
        TransferBatch b = batches[slot];
        if (b == null) {
            return;
        }
        int peer = t == NOTIFY ? b.notifyRank : b.remote[t].rank();
        OutLink link = out[peer];
        link.completions++;
        int before = link.postedBefore(qp, id);
        if (before >= 0) {
            // Requests posted before this one on its queue pair completed before it: unsignaled successes (an
            // error or a flush of any of them would have completed it with its own status, and been taken).
            for (int k = 0; k < before; k++) {
                completeUnsignaled(link, qp, link.takeOldest(qp));
            }
            link.takeOldest(qp);
        }
        link.outstanding[qp]--;
        WorkCompletionStatus status = wc.status();
        if (status != WorkCompletionStatus.WR_FLUSH_ERR) {
            b.inFlight--;
        }
        if (status == WorkCompletionStatus.SUCCESS) {
            if (t == NOTIFY) {
                b.notifyDone(null);
            } else {
                b.sliceDone(t, 1);
            }
        } else if (status == WorkCompletionStatus.WR_FLUSH_ERR) {
            // Flushed because another request of this queue pair failed: nothing is wrong with this one; it goes
            // again on the link's next queue pairs.
            // (A retry stays counted in the batch's inFlight until it is posted again and completes, or dropped.)
            link.broken();
            if (t == NOTIFY || b.status[t] == TransferBatch.PENDING) {
                link.retry(id & ~(0xFL << 44));
            } else {
                b.inFlight--;
            }
        } else {
            link.broken();
            String why = describe(status, peer, t == NOTIFY ? null : b.remote[t]);
            if (t == NOTIFY) {
                b.notifyDone(why);
            } else {
                b.fail(t, why);
            }
        }
        release(b, slot);
    }

    /** An unsignaled request of {@code link}'s queue pair {@code qp} completed successfully. */
    private void completeUnsignaled(OutLink link, int qp, long id) {
        link.coveredUnsignaled++;
        link.outstanding[qp]--;
        int slot = (int) (id >>> 48);
        int t = (int) ((id >>> 22) & 0x3FFFFF);
        TransferBatch b = batches[slot];
        if (b == null) {
            return;
        }
        b.inFlight--;
        b.sliceDone(t, 1);
        release(b, slot);
    }

    /** Frees a closed batch's slot once nothing of it is in flight. */
    private void release(TransferBatch b, int slot) {
        if (b.closed && b.inFlight == 0 && batches[slot] == b) {
            batches[slot] = null;
        }
    }

    private String describe(WorkCompletionStatus status, int peer, RemoteSegment target) {
        return switch (status) {
            case REM_ACCESS_ERR -> (target == null ? "rank " + peer : target)
                + " refused the access (REM_ACCESS_ERR): the segment was unregistered, or the key is wrong";
            case RETRY_EXC_ERR, RESP_TIMEOUT_ERR, REM_ABORT_ERR, FATAL_ERR, GENERAL_ERR -> "rank " + peer + " ("
                + describePeer(peer) + ") is unreachable (" + status + "): it exited or its link broke";
            default -> "rank " + peer + " completed the request with " + status;
        };
    }

    private String describePeer(int peer) {
        return "pid " + records[peer].pid() + " on " + records[peer].hostId().replaceAll(".*@", "");
    }

    private void onReceive(WorkCompletion wc, long id) {
        int peer = (int) ((id >>> 24) & 0xFFFFFF);
        int qp = (int) ((id >>> 16) & 0xFF);
        int slot = (int) (id & 0xFFFF);
        InLink link = in[peer];
        if (link == null || qp >= link.qps.length || link.qps[qp].queuePairNumber() != wc.queuePairNumber()) {
            return; // a receive of replaced queue pairs
        }
        if (wc.status() != WorkCompletionStatus.SUCCESS) {
            return; // flushed: the initiator's queue pair failed; it connects afresh
        }
        byte[] message;
        if (wc.withImmediate()) {
            // A TransferBatch.notifyImmediate: the four bytes of immediate data, big-endian.
            int imm = wc.immediateData();
            message = new byte[] {(byte) (imm >>> 24), (byte) (imm >>> 16), (byte) (imm >>> 8), (byte) imm};
        } else {
            long offset = ((long) qp * RECEIVE_DEPTH + slot) * NOTIFICATION_MAX_BYTES;
            message = link.buffers.segment().asSlice(offset, wc.byteLength()).toArray(
                java.lang.foreign.ValueLayout.JAVA_BYTE);
        }
        deliver(new Notification(peer, message));
        postReceive(link, peer, qp, slot);
    }

    private void postReceive(InLink link, int peer, int qp, int slot) {
        inboundReceive.wrId(RECEIVE_BIT | ((long) peer << 24) | ((long) qp << 16) | slot)
            .local(link.buffers, ((long) qp * RECEIVE_DEPTH + slot) * NOTIFICATION_MAX_BYTES, NOTIFICATION_MAX_BYTES);
        link.qps[qp].postReceive(inboundReceive);
    }

    /**
     * Posts retries and waiting batches as far as the queue pairs have room; returns how many requests it posted (a
     * batch waiting for its link is no work: waiters then sleep instead of spinning).
     */
    private int pump() {
        long before = posted;
        for (OutLink link : out) {
            if (link != null && link.retryCount > 0) {
                postRetries(link);
            }
        }
        // Each waiting batch once (a batch that resolves while posting leaves the queue: it may shrink meanwhile).
        for (int i = pending.size(); i > 0; i--) {
            TransferBatch b = pending.pollFirst();
            if (b == null) {
                break;
            }
            b.queued = false;
            if (!postFrom(b)) {
                enqueue(b);
            }
        }
        if (posted != before) {
            for (OutLink link : out) {
                if (link != null && link.listed) {
                    flushLists(link);
                }
            }
        }
        return (int) (posted - before);
    }

    /**
     * Posts the slices listed for each of the link's queue pairs as one post list per queue pair
     * ({@link QueuePair#postSend(SendWorkRequest[], int)}): tcp0 then writes a batch's small READs with one system
     * call instead of one each. A request the queue pair refuses fails its transfer, as a refused single post does,
     * and so does every request listed after it (never posted).
     */
    private void flushLists(OutLink link) {
        link.listed = false;
        for (int qp = 0; qp < link.listCount.length; qp++) {
            int count = link.listCount[qp];
            if (count == 0) {
                continue;
            }
            link.listCount[qp] = 0;
            SendWorkRequest[] list = link.lists[qp];
            for (int k = 0; k < count; k++) {
                // Small transfers: only every SIGNAL_EVERY-th and the list's last are signaled; the others complete
                // with them (dispatch). Large slices each signal: their completions let the next slices go.
                boolean signal = k == count - 1 || (k + 1) % SIGNAL_EVERY == 0
                    || list[k].totalLength() > SMALL_TRANSFER_BYTES;
                list[k].flags(signal ? SendFlag.SIGNALED : 0);
            }
            int done = 0;
            String why = null;
            try {
                done = link.qps[qp].postSend(list, count);
                while (done < count) {
                    link.qps[qp].postSend(list[done]); // the refused one (bad_wr) again, alone: throws its reason
                    done++;
                }
            } catch (RuntimeException e) {
                why = e.getMessage();
            }
            // A refusal after an unsignaled request leaves it without a completion to cover it: the batch's
            // deadline fails it (a refusal mid-list needs a queue pair that left RTS, whose flushes complete it).
            for (int k = 0; k < done; k++) {
                link.posted(qp, list[k].wrId());
            }
            for (int k = done; k < count; k++) {
                long id = list[k].wrId();
                int slot = (int) (id >>> 48);
                int t = (int) ((id >>> 22) & 0x3FFFFF);
                TransferBatch b = batches[slot];
                link.outstanding[qp]--;
                link.posted[qp]--;
                posted--;
                b.inFlight--;
                b.fail(t, "posting to rank " + link.peer + " failed: " + why);
                release(b, slot);
            }
        }
    }

    /** Posts (or drops, or fails) the link's retries as far as its queue pairs have room. */
    private void postRetries(OutLink link) {
        if (link.state == OutLink.FAILED) {
            for (int i = 0; i < link.retryCount; i++) {
                failSlice(link.retries[i], link.failure);
            }
            link.retryCount = 0;
            return;
        }
        int done = 0;
        while (link.state == OutLink.CONNECTED && done < link.retryCount) {
            long id = link.retries[done];
            int slot = (int) (id >>> 48);
            int t = (int) ((id >>> 22) & 0x3FFFFF);
            TransferBatch b = batches[slot];
            if (t == NOTIFY) {
                if (b.notifyState != TransferBatch.NOTIFY_POSTED) {
                    b.inFlight--;
                } else if (!postNotify(b, link, true)) {
                    break;
                }
            } else if (b.status[t] == TransferBatch.PENDING) {
                int qp = link.pickQueuePair();
                if (qp < 0) {
                    break;
                }
                postSlice(b, t, (int) (id & 0x3FFFFF), link, qp, true);
            } else {
                b.inFlight--;
            }
            release(b, slot);
            done++;
        }
        System.arraycopy(link.retries, done, link.retries, 0, link.retryCount - done);
        link.retryCount -= done;
    }

    private void failSlice(long id, String why) {
        int slot = (int) (id >>> 48);
        TransferBatch b = batches[slot];
        int t = (int) ((id >>> 22) & 0x3FFFFF);
        b.inFlight--;
        release(b, slot);
        if (t == NOTIFY) {
            b.notifyDone(why);
        } else {
            b.fail(t, why);
        }
    }

    /** Posts what it can of {@code b}; returns whether nothing of it waits for posting any more. */
    private boolean postFrom(TransferBatch b) {
        while (b.cursor < b.count) {
            int t = b.cursor;
            if (b.status[t] != TransferBatch.PENDING) {
                b.cursor++;
                b.cursorSlice = 0;
                continue;
            }
            OutLink link = out[b.remote[t].rank()];
            if (link.state == OutLink.FAILED) {
                b.fail(t, link.failure);
                continue;
            }
            if (link.state != OutLink.CONNECTED) {
                return false;
            }
            if (!b.local[t].isRegistered()) {
                b.fail(t, "local segment '" + b.local[t].name() + "' was unregistered before the transfer was posted");
                continue;
            }
            int slices = b.sliceCount(t);
            boolean small = b.length[t] <= SMALL_TRANSFER_BYTES;
            while (b.cursorSlice < slices) {
                int qp = small ? link.pickQueuePairForSmall() : link.pickQueuePair();
                if (qp < 0) {
                    return false;
                }
                postSlice(b, t, b.cursorSlice, link, qp, false);
                b.cursorSlice++;
            }
            b.cursor++;
            b.cursorSlice = 0;
        }
        if (b.notifyState == TransferBatch.NOTIFY_WANTED && b.unresolved == 0) {
            if (b.failedCount() > 0) {
                b.notifyDone("not sent: " + b.failedCount() + " transfer(s) of the batch failed");
                return true;
            }
            OutLink link = out[b.notifyRank];
            if (link.state == OutLink.FAILED) {
                b.notifyDone(link.failure);
                return true;
            }
            return link.state == OutLink.CONNECTED && postNotify(b, link, false);
        }
        return b.notifyState != TransferBatch.NOTIFY_WANTED;
    }

    /** Posts one slice; a {@code retry} is already counted in the batch's inFlight. */
    private void postSlice(TransferBatch b, int t, int slice, OutLink link, int qp, boolean retry) {
        int sliceLength = sliceBytes[link.device];
        long offset = (long) slice * sliceLength;
        int length = (int) Math.min(sliceLength, b.length[t] - offset);
        RemoteSegment r = b.remote[t];
        MemoryRegion local = b.local[t].regions[link.device];
        // Listed, not posted: pump() posts each queue pair's list at once (flushLists), a refusal fails it there.
        link.listed = true;
        link.lists[qp][link.listCount[qp]++].wrId(sendId(b.slot, qp, t, slice))
            .opcode(b.write[t] ? SendOpcode.RDMA_WRITE : SendOpcode.RDMA_READ).flags(SendFlag.SIGNALED)
            .remote(r.address + b.remoteOffset[t] + offset, r.rkey)
            .local(local, b.localOffset[t] + offset, length);
        link.outstanding[qp]++;
        link.posted[qp]++;
        posted++;
        b.inFlight += retry ? 0 : 1;
    }

    /** Posts {@code b}'s notification on the link's first queue pair; false when that queue pair is full. */
    private boolean postNotify(TransferBatch b, OutLink link, boolean retry) {
        if (link.outstanding[0] >= SEND_DEPTH) {
            return false;
        }
        if (link.listed) {
            flushLists(link); // slices listed before it are posted before it
        }
        if (b.notifyWithImmediate) {
            // Zero length: no bytes land, the segment's address and key only make it a well-formed WRITE.
            RemoteSegment r = b.remote[0];
            send.wrId(sendId(b.slot, 0, NOTIFY, 0)).opcode(SendOpcode.RDMA_WRITE_WITH_IMM).flags(SendFlag.SIGNALED)
                .remote(r.address, r.rkey).immediateData(b.notifyImmediate).noData();
        } else {
            int ring = link.notifyNext++ & (SEND_DEPTH - 1);
            long offset = (long) ring * NOTIFICATION_MAX_BYTES;
            MemorySegment.copy(MemorySegment.ofArray(b.notifyMessage), 0, link.notifyBuffers.segment(), offset,
                b.notifyLength);
            send.wrId(sendId(b.slot, 0, NOTIFY, 0)).opcode(SendOpcode.SEND).flags(SendFlag.SIGNALED);
            if (b.notifyLength == 0) {
                send.noData();
            } else {
                send.local(link.notifyBuffers, offset, b.notifyLength);
            }
        }
        try {
            link.qps[0].postSend(send);
        } catch (RuntimeException e) {
            b.inFlight -= retry ? 1 : 0;
            b.notifyDone("posting the notification to rank " + b.notifyRank + " failed: " + e.getMessage());
            return true;
        }
        b.notifyState = TransferBatch.NOTIFY_POSTED;
        posted++;
        link.outstanding[0]++;
        link.posted(0, send.wrId());
        b.inFlight += retry ? 0 : 1;
        return true;
    }

    /** Called by a batch whose transfers all resolved and that wants its notification posted. */
    void notifyReady(TransferBatch b) {
        if (b.notifyRank == rank) {
            deliver(new Notification(rank, java.util.Arrays.copyOf(b.notifyMessage, b.notifyLength)));
            b.notifyDone(null);
        } else {
            enqueue(b);
        }
    }

    /** Queues {@code b} for posting, once. */
    private void enqueue(TransferBatch b) {
        if (!b.queued) {
            b.queued = true;
            pending.addLast(b);
        }
    }

    /** Called by a batch that resolved entirely. */
    void resolved(TransferBatch b) {
        inflight.remove(b);
        inflightCount = inflight.size();
        if (b.queued) {
            b.queued = false;
            pending.remove(b);
        }
    }

    private void checkDeadlines(long now) {
        for (int i = inflight.size() - 1; i >= 0 && i < inflight.size(); i--) {
            TransferBatch b = inflight.get(i);
            if (now - b.deadlineNs >= 0) {
                String why = "no completion within " + TimeUnit.NANOSECONDS.toMillis(options.timeoutNs())
                    + " ms (JCCL_TIMEOUT)";
                for (int t = 0; t < b.count; t++) {
                    if (b.status[t] == TransferBatch.PENDING) {
                        int peer = b.remote[t].rank();
                        b.fail(t, why + ": rank " + peer + " (" + describePeer(peer) + "), link "
                            + out[peer].describeState());
                    }
                }
                if (b.notifyState == TransferBatch.NOTIFY_WANTED || b.notifyState == TransferBatch.NOTIFY_POSTED) {
                    b.notifyDone(why);
                }
            }
        }
    }

    // ================================================================================================ notifications

    /**
     * The next notification a peer attached to a batch that landed here, waiting up to {@code timeout}; null when
     * none came in time.
     */
    public Notification pollNotification(long timeout, TimeUnit unit) throws InterruptedException {
        return notifications.poll(timeout, unit);
    }

    /** The next notification already here, or null (never waits). */
    public Notification pollNotification() {
        return notifications.poll();
    }

    /**
     * Adds a listener that sees every notification arriving from now on before {@link #pollNotification} does; a
     * notification it consumes (returns true for) never reaches the queue. How services built on the engine (the
     * KV-cache transfer) take their own messages while the application polls for the rest.
     */
    public void addNotificationListener(NotificationListener listener) {
        listeners.add(java.util.Objects.requireNonNull(listener, "listener"));
    }

    /** Removes a listener added with {@link #addNotificationListener}; idempotent. */
    public void removeNotificationListener(NotificationListener listener) {
        listeners.remove(listener);
    }

    /** Hands {@code n} to the first listener that consumes it, else to the queue. */
    private void deliver(Notification n) {
        for (NotificationListener l : listeners) {
            try {
                if (l.onNotification(n)) {
                    return;
                }
            } catch (RuntimeException e) {
                log.warn(rank, Log.Subsys.NET, "notification listener " + l + " failed: " + e);
            }
        }
        notifications.add(n);
    }

    /**
     * Why {@code peer} can no longer take part, as far as this engine can tell without sending anything, or null
     * while it looks alive: it closed its engine (the store says so), its process exited (same host and PID
     * namespace only), or this engine's link to it failed. Lets a service waiting for a peer's message (which a dead
     * peer never sends) stop with the reason instead of at its deadline.
     */
    public String peerFailure(int peer) {
        if (peer < 0 || peer >= size) {
            throw new IllegalArgumentException("rank " + peer + " outside 0.." + (size - 1));
        }
        if (peer == rank) {
            return null;
        }
        OutLink link = out[peer];
        if (link != null && link.state == OutLink.FAILED) {
            return link.failure;
        }
        try {
            if (store.check("closed/" + peer, options.timeoutNs())) {
                return "rank " + peer + " (" + describePeer(peer) + ") closed its transfer engine";
            }
        } catch (RuntimeException e) {
            return "the job's store is unreachable (" + e.getMessage() + ")";
        }
        return peerAlive(peer) ? null : "rank " + peer + " (" + describePeer(peer) + ") exited";
    }

    /** Moves what arrived on the inbound queue pairs into the notification queue; the agent's thread only. */
    private int pollInbound(long timeoutNs) {
        int work = 0;
        for (CompletionQueue cq : inboundQueues) {
            int n = cq.poll(inboundCompletions, inboundCompletions.length, timeoutNs);
            for (int i = 0; i < n; i++) {
                WorkCompletion wc = inboundCompletions[i];
                if ((wc.wrId() & RECEIVE_BIT) != 0) {
                    onReceive(wc, wc.wrId());
                }
            }
            work += n;
        }
        return work;
    }

    // ================================================================================================ links

    /**
     * The queue pairs from this engine to one peer (directional: this side posts, the peer's side only answers and
     * receives notifications), and their connection state. Guarded by the engine's lock.
     */
    private final class OutLink {
        static final int NEW = 0;
        static final int REQUESTED = 1;
        static final int CONNECTED = 2;
        /** A queue pair failed: nothing new is posted until every outstanding request came back; then NEW. */
        static final int DRAINING = 3;
        static final int FAILED = 4;

        final int peer;
        final int device;
        final MemoryRegion notifyBuffers;
        volatile int state = NEW;
        String failure;
        long generation;
        long requestedAtNs;
        QueuePair[] qps = new QueuePair[0];
        int[] outstanding = new int[0];
        /** Per queue pair, the slices pump() posts as one list, and how many are listed; whether any are. */
        SendWorkRequest[][] lists = new SendWorkRequest[0][];
        int[] listCount = new int[0];
        boolean listed;
        /**
         * Per queue pair, the work-request ids posted and not yet completed, in posting order (a ring of
         * {@link #SEND_DEPTH}): a signaled completion also completes the unsignaled requests posted before it.
         */
        long[][] order = new long[0][];
        int[] orderHead = new int[0];
        int[] orderCount = new int[0];
        /** Send completions dispatched, and unsignaled requests completed by them (tests, diagnostics). */
        long completions;
        long coveredUnsignaled;
        /** Slices posted per queue pair index (over every generation): how evenly slices spread. */
        final long[] posted = new long[16];
        int next;
        /** The queue pair picked last (small transfers stay on it while it has room). */
        int lastPicked = -1;
        int notifyNext;
        long[] retries = new long[64];
        int retryCount;

        OutLink(int peer) {
            this.peer = peer;
            this.device = deviceIndex[peer];
            this.notifyBuffers = devices[device].protectionDomain().allocateMemory(
                (long) SEND_DEPTH * NOTIFICATION_MAX_BYTES, AccessFlag.LOCAL_WRITE);
        }

        /** Post lists for {@code n} queue pairs (kept when the count is unchanged: nothing is listed between pumps). */
        void setLists(int n) {
            listCount = new int[n];
            listed = false;
            order = new long[n][SEND_DEPTH];
            orderHead = new int[n];
            orderCount = new int[n];
            if (lists.length != n) {
                lists = new SendWorkRequest[n][SEND_DEPTH];
                for (SendWorkRequest[] list : lists) {
                    for (int k = 0; k < SEND_DEPTH; k++) {
                        list[k] = new SendWorkRequest(1);
                    }
                }
            }
        }

        /** Remembers a posted request of queue pair {@code qp} (at most SEND_DEPTH are outstanding per queue pair). */
        void posted(int qp, long id) {
            long[] ring = order[qp];
            ring[(orderHead[qp] + orderCount[qp]++) & (SEND_DEPTH - 1)] = id;
        }

        /**
         * How many requests of queue pair {@code qp} were posted before {@code id}, which just completed (they
         * completed before it, unsignaled or flushed), or -1 when {@code id} is not outstanding there.
         */
        int postedBefore(int qp, long id) {
            long[] ring = order[qp];
            int head = orderHead[qp];
            for (int k = 0; k < orderCount[qp]; k++) {
                if (ring[(head + k) & (SEND_DEPTH - 1)] == id) {
                    return k;
                }
            }
            return -1;
        }

        /** Takes the oldest outstanding request id of queue pair {@code qp}. */
        long takeOldest(int qp) {
            long id = order[qp][orderHead[qp]];
            orderHead[qp] = (orderHead[qp] + 1) & (SEND_DEPTH - 1);
            orderCount[qp]--;
            return id;
        }

        /** A queue pair with room, round robin; -1 when all are full. */
        int pickQueuePair() {
            for (int i = 0; i < qps.length; i++) {
                int qp = next++ % qps.length;
                if (next == Integer.MAX_VALUE) {
                    next = 0;
                }
                if (outstanding[qp] < SEND_DEPTH) {
                    lastPicked = qp;
                    return qp;
                }
            }
            return -1;
        }

        /**
         * A queue pair for a small transfer: the one picked last while it has room, else the next with room (-1
         * when all are full). Small transfers cost system calls and wake-ups, not bandwidth: on one queue pair a
         * batch of them is one post list, one request write and one response write (tcp0), where round robin over
         * two made it two of each and two sockets for the target to serve. A batch of more than one queue pair's
         * depth still spreads (a 256-row lookup: 128 and 128, all in flight).
         */
        int pickQueuePairForSmall() {
            int last = lastPicked;
            if (last >= 0 && last < qps.length && outstanding[last] < SEND_DEPTH) {
                return last;
            }
            return pickQueuePair();
        }

        void broken() {
            if (state == CONNECTED) {
                state = DRAINING;
                log.info(rank, Log.Subsys.NET, () -> "link to rank " + peer + " generation " + generation
                    + ": a queue pair failed; reconnecting once its requests have returned");
            }
        }

        void retry(long id) {
            if (retryCount == retries.length) {
                retries = java.util.Arrays.copyOf(retries, retries.length * 2);
            }
            retries[retryCount++] = id;
        }

        boolean drained() {
            for (int o : outstanding) {
                if (o != 0) {
                    return false;
                }
            }
            return true;
        }

        String describeState() {
            return switch (state) {
                case NEW -> "not connected yet";
                case REQUESTED -> "waiting for the peer's answer to connection request " + generation;
                case CONNECTED -> "connected (generation " + generation + ")";
                case DRAINING -> "reconnecting after a queue-pair error";
                default -> "failed: " + failure;
            };
        }
    }

    /** The queue pairs a peer's engine connected to this one (they answer its READs/WRITEs, receive notifications). */
    private static final class InLink {
        final QueuePair[] qps;
        final MemoryRegion buffers;

        InLink(QueuePair[] qps, MemoryRegion buffers) {
            this.qps = qps;
            this.buffers = buffers;
        }

        void close() {
            for (QueuePair qp : qps) {
                try {
                    qp.close();
                } catch (RuntimeException ignored) {
                    // closing anyway
                }
            }
            buffers.close();
        }
    }

    /** Makes sure a link to {@code peer} exists and waits (to {@code deadlineNs}) until it connected or failed. */
    private void connect(int peer, long deadlineNs) {
        OutLink link;
        lock.lock();
        try {
            link = out[peer];
            if (link == null) {
                link = new OutLink(peer);
                out[peer] = link;
            }
        } finally {
            lock.unlock();
        }
        LockSupport.unpark(agent);
        while (link.state == OutLink.NEW || link.state == OutLink.REQUESTED) {
            if (System.nanoTime() - deadlineNs >= 0) {
                throw new TransferException("rank " + peer + " (" + describePeer(peer) + ") did not answer the "
                    + "connection request within " + TimeUnit.NANOSECONDS.toMillis(options.timeoutNs())
                    + " ms (JCCL_TIMEOUT): is it running a TransferEngine of job '" + options.jobId() + "'?");
            }
            checkOpen();
            LockSupport.parkNanos(200_000);
        }
        if (link.state == OutLink.FAILED) {
            throw new TransferException(link.failure);
        }
    }

    private QueuePair[] createQueuePairs(DeviceResources d, CompletionQueue cq, int n, int sendDepth,
                                         int receiveDepth, AccessFlag... remoteAccess) {
        QueuePair[] qps = new QueuePair[n];
        try {
            for (int k = 0; k < n; k++) {
                qps[k] = d.protectionDomain().createQueuePair(QueuePairInitAttributes.of(cq)
                    .withDepths(sendDepth, receiveDepth));
                qps[k].modify(QueuePairAttributes.toInit(remoteAccess));
            }
            return qps;
        } catch (RuntimeException e) {
            closeAll(qps);
            throw e;
        }
    }

    private static void closeAll(QueuePair[] qps) {
        for (QueuePair qp : qps) {
            if (qp != null) {
                try {
                    qp.close();
                } catch (RuntimeException ignored) {
                    // closing anyway
                }
            }
        }
    }

    private static void toReadyToSend(DeviceResources d, QueuePair qp, Endpoint remote, long peerTimeoutNs) {
        // READs in flight per queue pair: the verbs default (16) made a batch of 256 lookups 8+ round trips per QP
        // over tcp0; ask for as many as the send queue holds and the device allows (both directions).
        int depth = readDepth(d);
        qp.modify(QueuePairAttributes.toReadyToReceive(remote).maxDestRdAtomic(depth));
        qp.modify(QueuePairAttributes.toReadyToSend(qp.initialPsn()).maxRdAtomic(depth)
            .linkTimeoutNs(peerTimeoutNs));
    }

    /** READs/atomics in flight per queue pair: the send depth, capped by the device's max_qp_rd_atom/init_rd_atom. */
    static int readDepth(DeviceResources d) {
        DeviceAttributes a = d.context().query();
        int depth = Math.min(SEND_DEPTH, Math.min(a.maxQueuePairReadAtomic(), a.maxQueuePairInitiatorReadAtomic()));
        return Math.max(1, depth);
    }

    /**
     * The agent: progress when nobody else drives it, notifications, connection requests and answers,
     * reconnections. With nothing in flight and one device it waits in the inbound completion queue's blocking poll
     * (the provider's wake-up source), else with the idle strategy.
     */
    private void runAgent() {
        IdleStrategy idle = new BackoffIdleStrategy();
        long nextStoreNs = 0;
        while (!closed) {
            int work = 0;
            try {
                boolean driving = inflightCount > 0 && awaiting.get() == 0;
                if (driving && lock.tryLock()) {
                    try {
                        work += progressLocked();
                    } finally {
                        lock.unlock();
                    }
                }
                work += pollInbound(0);
                long now = System.nanoTime();
                boolean busy = false;
                for (OutLink link : out) {
                    busy |= link != null && link.state != OutLink.CONNECTED && link.state != OutLink.FAILED;
                }
                if (now - nextStoreNs >= 0 || busy) {
                    work += answerRequests();
                    work += advanceLinks();
                    nextStoreNs = System.nanoTime() + (busy ? STORE_PERIOD_BUSY_NS : STORE_PERIOD_IDLE_NS);
                }
                if (work > 0) {
                    idle.reset();
                } else if (!driving && inboundQueues.length == 1 && !busy) {
                    work += pollInbound(Math.max(1, nextStoreNs - System.nanoTime()));
                } else {
                    idle.idleAtMost(STORE_PERIOD_IDLE_NS);
                }
            } catch (RuntimeException e) {
                if (closed) {
                    return;
                }
                log.warn(rank, Log.Subsys.NET, "transfer agent: " + e);
                LockSupport.parkNanos(1_000_000);
            }
        }
    }

    /** Answers peers' connection requests: creates the queue pairs of this side and publishes their endpoints. */
    private int answerRequests() {
        long bell = store.add("bell/" + rank, 0, options.timeoutNs());
        if (bell == lastBell) {
            return 0;
        }
        lastBell = bell;
        int work = 0;
        for (int j = 0; j < size; j++) {
            String req = "req/" + rank + "/" + j;
            if (j == rank || !store.check(req, options.timeoutNs())) {
                continue;
            }
            long g = Long.parseLong(store.getString(req, options.timeoutNs()));
            if (g <= inGeneration[j]) {
                continue;
            }
            inGeneration[j] = g;
            accept(j, g);
            work++;
        }
        return work;
    }

    private void accept(int peer, long generation) {
        String[] endpoints = store.getString("ep/" + peer + "/" + rank + "/" + generation, options.timeoutNs())
            .split(" ");
        DeviceResources d = devices[deviceIndex[peer]];
        QueuePair[] qps = createQueuePairs(d, inboundQueues[deviceIndex[peer]], endpoints.length, 4, RECEIVE_DEPTH,
            AccessFlag.LOCAL_WRITE,
            AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ);
        MemoryRegion buffers = null;
        try {
            buffers = d.protectionDomain().allocateMemory(
                (long) endpoints.length * RECEIVE_DEPTH * NOTIFICATION_MAX_BYTES, AccessFlag.LOCAL_WRITE);
            InLink link = new InLink(qps, buffers);
            StringBuilder mine = new StringBuilder();
            lock.lock();
            try {
                for (int k = 0; k < qps.length; k++) {
                    for (int s = 0; s < RECEIVE_DEPTH; s++) {
                        postReceive(link, peer, k, s);
                    }
                    toReadyToSend(d, qps[k], Endpoint.decode(endpoints[k]), options.peerTimeoutNs());
                    mine.append(k == 0 ? "" : " ").append(qps[k].localEndpoint().encode());
                }
                InLink old = in[peer];
                in[peer] = link;
                if (old != null) {
                    old.close();
                }
            } finally {
                lock.unlock();
            }
            store.setString("epr/" + rank + "/" + peer + "/" + generation, mine.toString(), options.timeoutNs());
            log.info(rank, Log.Subsys.NET, () -> "accepted " + qps.length + " queue pairs from rank " + peer + " on "
                + d.name() + " (generation " + generation + ")");
        } catch (RuntimeException e) {
            closeAll(qps);
            if (buffers != null) {
                buffers.close();
            }
            throw e;
        }
    }

    /** Moves every link's connection along: request, answer, reconnection after a failure. */
    private int advanceLinks() {
        int work = 0;
        for (int peer = 0; peer < size; peer++) {
            OutLink link = out[peer];
            if (link == null) {
                continue;
            }
            try {
                switch (link.state) {
                    case OutLink.DRAINING -> work += restart(link);
                    case OutLink.NEW -> work += request(link);
                    case OutLink.REQUESTED -> work += complete(link);
                    default -> {
                    }
                }
            } catch (RuntimeException e) {
                fail(link, "connecting to rank " + peer + " (" + describePeer(peer) + ") failed: " + e.getMessage());
            }
        }
        return work;
    }

    private int restart(OutLink link) {
        lock.lock();
        try {
            if (link.state != OutLink.DRAINING || !link.drained()) {
                return 0;
            }
            closeAll(link.qps);
            link.qps = new QueuePair[0];
            link.outstanding = new int[0];
            link.setLists(0);
            link.state = OutLink.NEW;
        } finally {
            lock.unlock();
        }
        return 1;
    }

    private int request(OutLink link) {
        DeviceResources d = devices[link.device];
        QueuePair[] qps = createQueuePairs(d, d.completionQueue(), settings.queuePairsPerPeer(), SEND_DEPTH, 1,
            AccessFlag.LOCAL_WRITE);
        StringBuilder mine = new StringBuilder();
        for (int k = 0; k < qps.length; k++) {
            mine.append(k == 0 ? "" : " ").append(qps[k].localEndpoint().encode());
        }
        long g;
        lock.lock();
        try {
            link.generation++;
            g = link.generation;
            link.qps = qps;
            link.outstanding = new int[qps.length];
            link.setLists(qps.length);
            link.requestedAtNs = System.nanoTime();
            link.state = OutLink.REQUESTED;
        } finally {
            lock.unlock();
        }
        String me = rank + "/" + g;
        store.setString("ep/" + rank + "/" + link.peer + "/" + g, mine.toString(), options.timeoutNs());
        store.setString("req/" + link.peer + "/" + rank, Long.toString(g), options.timeoutNs());
        store.add("bell/" + link.peer, 1, options.timeoutNs());
        log.info(rank, Log.Subsys.NET, () -> "requested " + qps.length + " queue pairs to rank " + link.peer + " on "
            + d.name() + " (" + me + ")");
        return 1;
    }

    private int complete(OutLink link) {
        String key = "epr/" + link.peer + "/" + rank + "/" + link.generation;
        if (!store.check(key, options.timeoutNs())) {
            long waitedNs = System.nanoTime() - link.requestedAtNs;
            if (store.check("closed/" + link.peer, options.timeoutNs())) {
                fail(link, "rank " + link.peer + " (" + describePeer(link.peer) + ") closed its transfer engine");
            } else if (!peerAlive(link.peer)) {
                fail(link, "rank " + link.peer + " (" + describePeer(link.peer) + ") exited");
            } else if (waitedNs > options.timeoutNs()) {
                fail(link, "rank " + link.peer + " (" + describePeer(link.peer) + ") did not answer the connection "
                    + "request within " + TimeUnit.NANOSECONDS.toMillis(options.timeoutNs()) + " ms (JCCL_TIMEOUT)");
            }
            return 0;
        }
        String[] endpoints = store.getString(key, options.timeoutNs()).split(" ");
        lock.lock();
        try {
            if (endpoints.length != link.qps.length) {
                throw new TransferException("rank " + link.peer + " answered with " + endpoints.length
                    + " queue pairs for " + link.qps.length);
            }
            for (int k = 0; k < link.qps.length; k++) {
                toReadyToSend(devices[link.device], link.qps[k], Endpoint.decode(endpoints[k]),
                    options.peerTimeoutNs());
            }
            link.state = OutLink.CONNECTED;
            pump();
        } finally {
            lock.unlock();
        }
        log.info(rank, Log.Subsys.NET, () -> "connected to rank " + link.peer + " (generation " + link.generation + ")");
        return 1;
    }

    private void fail(OutLink link, String why) {
        lock.lock();
        try {
            link.failure = why;
            link.state = OutLink.FAILED;
            closeAll(link.qps);
            for (int k = 0; k < link.outstanding.length; k++) {
                link.outstanding[k] = 0;
            }
            pump();
        } finally {
            lock.unlock();
        }
        log.warn(rank, Log.Subsys.NET, why);
    }

    /** Whether {@code peer}'s process still runs, where this process can tell (same host and PID namespace). */
    private boolean peerAlive(int peer) {
        JoinRecord r = records[peer];
        if (r.pid() == ProcessIds.self() || !r.hostId().equals(records[rank].hostId())
            || !r.pidNamespace().equals(ProcessIds.pidNamespace())) {
            return true;
        }
        return ProcessHandle.of(r.pid()).map(ProcessHandle::isAlive).orElse(false);
    }

    // ================================================================================================ closing

    private void checkOpen() {
        if (closed) {
            throw new IllegalStateException("transfer engine of rank " + rank + " is closed");
        }
    }

    /**
     * Fails what is still in flight ("engine closed"), revokes this engine's segments, and releases queue pairs,
     * memory and devices (and, from {@link #fromEnvironment()}, the store: rank 0, which serves it, waits up to 10 s
     * for the others to close first).
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        for (LocalSegment s : new ArrayList<>(locals.values())) {
            s.close();
        }
        try {
            // Peers that connect (or reconnect) to this engine from now on fail at once instead of at their deadline.
            store.setString("closed/" + rank, "1", options.timeoutNs());
        } catch (RuntimeException e) {
            log.info(rank, Log.Subsys.NET, () -> "could not mark the engine closed in the store: " + e);
        }
        closed = true;
        LockSupport.unpark(agent);
        try {
            agent.join(10_000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        lock.lock();
        try {
            for (TransferBatch b : new ArrayList<>(inflight)) {
                for (int t = 0; t < b.count; t++) {
                    if (b.status[t] == TransferBatch.PENDING) {
                        b.fail(t, "the transfer engine was closed");
                    }
                }
                if (b.notifyState == TransferBatch.NOTIFY_WANTED || b.notifyState == TransferBatch.NOTIFY_POSTED) {
                    b.notifyDone("the transfer engine was closed");
                }
            }
            for (OutLink link : out) {
                if (link != null) {
                    closeAll(link.qps);
                    link.notifyBuffers.close();
                }
            }
            for (InLink link : in) {
                if (link != null) {
                    link.close();
                }
            }
        } finally {
            lock.unlock();
        }
        deviceChoice.closeAll();
        if (owned != null) {
            try {
                store.add("left", 1, options.timeoutNs());
                long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                while (rank == 0 && store.add("left", 0, options.timeoutNs()) < size
                    && System.nanoTime() - until < 0) {
                    LockSupport.parkNanos(10_000_000);
                }
            } catch (RuntimeException ignored) {
                // the store server is gone already
            }
            owned.close();
        }
    }

    /** Slices posted to {@code peer} per queue-pair index so far (tests, diagnostics). */
    long[] slicesPostedTo(int peer) {
        lock.lock();
        try {
            OutLink link = out[peer];
            return link == null ? new long[settings.queuePairsPerPeer()]
                : java.util.Arrays.copyOf(link.posted, settings.queuePairsPerPeer());
        } finally {
            lock.unlock();
        }
    }

    /** {send completions dispatched, unsignaled requests they completed} on the link to {@code peer} (tests). */
    long[] completionsFrom(int peer) {
        lock.lock();
        try {
            OutLink link = out[peer];
            return link == null ? new long[2] : new long[] {link.completions, link.coveredUnsignaled};
        } finally {
            lock.unlock();
        }
    }

    /** READs/atomics each queue pair to {@code peer} may have in flight (its max_rd_atomic; 0 unconnected; tests). */
    int readDepthTo(int peer) {
        lock.lock();
        try {
            OutLink link = out[peer];
            return link == null || link.qps.length == 0 ? 0 : link.qps[0].query().maxRdAtomic();
        } finally {
            lock.unlock();
        }
    }

    /** Connection generation of the link to {@code peer} (1 after the first connection; tests). */
    long generationTo(int peer) {
        lock.lock();
        try {
            return out[peer] == null ? 0 : out[peer].generation;
        } finally {
            lock.unlock();
        }
    }

    /** The engine's segments registered now, by name (diagnostics). */
    List<String> localSegmentNames() {
        return new ArrayList<>(locals.keySet());
    }
}
