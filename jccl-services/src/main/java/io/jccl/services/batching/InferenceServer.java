package io.jccl.services.batching;

import io.jccl.collectives.CommunicatorOptions;
import io.jccl.collectives.bootstrap.Bootstrap;
import io.jccl.collectives.store.Store;
import io.jccl.common.Log;
import io.jccl.common.ProcessIds;
import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.Context;
import io.jccl.verbs.Device;
import io.jccl.verbs.Endpoint;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.Reach;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.Verbs;
import io.jccl.verbs.WorkCompletion;
import io.jccl.verbs.WorkCompletionOpcode;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * The consumer of an inference batching ring: it owns the ring (one lane of {@link BatchingConfig#slotsPerProducer()}
 * request slots per producer, in registered memory the producers WRITE into), forms batches with Triton's dynamic
 * batcher rules ({@link DynamicBatcher}), runs the {@link BatchModel} on each, and WRITEs every result into its
 * requester's response slot with WRITE_WITH_IMM. Requests that wait in the queue past their timeout are answered
 * with {@link InferenceStatus#TIMEOUT} and never reach the model.
 *
 * <p>One thread (started here, {@code jccl-batching-NAME}) does all of it: polls the completion queue, accepts new
 * producers (through the store, every 5 ms), decides, runs the model, answers. Producers find the server by name in
 * the store: {@code InferenceServer.create(store, "digits", config, model)} then {@code InferenceClient.connect(store,
 * "digits")} anywhere the store and the device reach.
 */
public final class InferenceServer implements AutoCloseable {
    private static final long RECEIVE_BIT = 1L << 62;
    private static final long STORE_PERIOD_NS = 5_000_000L;
    private static final long IDLE_POLL_MAX_NS = 1_000_000L;
    /** Longest wait at close for the responses in flight (a live producer's transport acknowledges within it). */
    private static final long CLOSE_DELIVERY_NS = 2_000_000_000L;

    private final Log log = Log.get();
    private final Store store;
    private final String name;
    private final String prefix;
    private final BatchingConfig config;
    private final BatchModel model;
    private final int slots;
    private final int requestSlotBytes;
    private final int responseSlotBytes;
    private final String deviceName;
    private final Reach reach;
    private final String hostId;
    private final long timeoutNs;
    private final long peerTimeoutNs;
    private final Context context;
    private final ProtectionDomain domain;
    private final CompletionQueue queue;
    private final Arena arena = Arena.ofShared();
    private final MemorySegment inputs;
    private final MemorySegment outputs;
    /** The model's views per batch size, made once (nothing allocated per batch). */
    private final MemorySegment[] inputViews;
    private final MemorySegment[] outputViews;
    private final Lane[] lanes;
    private final DynamicBatcher batcher;
    private final int[] batch;
    private final int[] rejected;
    private final WorkCompletion[] completions = WorkCompletion.array(64);
    private final ReceiveWorkRequest receive = new ReceiveWorkRequest().noData();
    private final SendWorkRequest send = new SendWorkRequest(1).opcode(SendOpcode.RDMA_WRITE_WITH_IMM)
        .flags(SendFlag.SIGNALED);
    private final Thread thread;
    private final CountDownLatch stopped = new CountDownLatch(1);
    // Statistics: written by the server thread only, read racily by stats().
    private final long[] batchesBySize;
    private final long[] batchesByReason = new long[CloseReason.values().length];
    private final long[] queueDelayLog2Us = new long[64];
    private long requests;
    /** Written by close() after the server thread stopped ({@link #responsesUnconfirmedAtClose()}). */
    private volatile int responsesUnconfirmedAtClose;
    private long batches;
    private long timeouts;
    private long malformed;
    private long modelErrors;
    private int accepted;
    private volatile int producers;
    private volatile boolean closing;
    private volatile Throwable failure;

    /** One producer's lane: its queue pair, its request slots here, its response slots there. */
    private static final class Lane {
        final int index;
        final QueuePair qp;
        final MemoryRegion ring;
        final MemoryRegion responses;
        final long remoteResponses;
        final int remoteKey;
        final long pid;
        int sendsOutstanding;
        boolean dead;

        Lane(int index, QueuePair qp, MemoryRegion ring, MemoryRegion responses, long remoteResponses, int remoteKey,
             long pid) {
            this.index = index;
            this.qp = qp;
            this.ring = ring;
            this.responses = responses;
            this.remoteResponses = remoteResponses;
            this.remoteKey = remoteKey;
            this.pid = pid;
        }
    }

    private InferenceServer(Store store, String name, BatchingConfig config, BatchModel model,
                            CommunicatorOptions options) {
        checkName(name);
        this.store = store;
        this.name = name;
        this.prefix = Wire.prefix(name);
        this.config = config;
        this.model = model;
        this.slots = config.slotsPerProducer();
        this.requestSlotBytes = Wire.requestSlotBytes(config.inputBytes());
        this.responseSlotBytes = Wire.responseSlotBytes(config.outputBytes());
        this.timeoutNs = options.timeoutNs();
        this.peerTimeoutNs = options.peerTimeoutNs();
        this.hostId = Bootstrap.hostIdentity(options);
        this.deviceName = config.device() != null ? config.device() : defaultDevice(options);
        Device device = Verbs.device(deviceName);
        this.reach = device.reach();
        int maxLanes = config.maxProducers();
        this.lanes = new Lane[maxLanes];
        int total = maxLanes * slots;
        this.batcher = new DynamicBatcher(config, total);
        this.batch = new int[config.maxBatchSize()];
        this.rejected = new int[total];
        this.batchesBySize = new long[config.maxBatchSize() + 1];
        this.inputs = arena.allocate((long) config.maxBatchSize() * config.inputBytes(), 64);
        this.outputs = arena.allocate((long) config.maxBatchSize() * config.outputBytes(), 64);
        this.inputViews = new MemorySegment[config.maxBatchSize() + 1];
        this.outputViews = new MemorySegment[config.maxBatchSize() + 1];
        for (int b = 1; b <= config.maxBatchSize(); b++) {
            inputViews[b] = inputs.asSlice(0, (long) b * config.inputBytes());
            outputViews[b] = outputs.asSlice(0, (long) b * config.outputBytes());
        }
        Context c = device.open();
        try {
            this.context = c;
            this.domain = c.allocateProtectionDomain();
            int capacity = Math.min(c.query().maxCompletionQueueEntries(), Math.max(1024, total * 4 + 64));
            this.queue = c.createCompletionQueue(capacity);
            String record = String.join(" ", Wire.VERSION, deviceName, Long.toString(ProcessIds.self()), hostId,
                Integer.toString(config.inputBytes()), Integer.toString(config.outputBytes()),
                Integer.toString(slots), Integer.toString(maxLanes));
            store.delete(prefix + "closed", timeoutNs);
            if (!store.compareAndSet(prefix + "server", null, record.getBytes(java.nio.charset.StandardCharsets.UTF_8),
                timeoutNs)) {
                throw new BatchingException("an inference server named '" + name + "' is already registered in "
                    + store.describe() + " (" + store.getString(prefix + "server", timeoutNs) + ")");
            }
        } catch (RuntimeException e) {
            c.close();
            arena.close();
            throw e;
        }
        log.info(0, Log.Subsys.INIT, () -> "inference server '" + name + "' on " + deviceName + ": " + config);
        thread = Thread.ofPlatform().daemon().name("jccl-batching-" + name).unstarted(this::run);
        thread.start();
    }

    /**
     * Starts a server named {@code name} (unique in the store: 1 to 200 of {@code A-Z a-z 0-9 . _ - /}), publishing
     * it in {@code store} (which the caller keeps ownership of) for producers to find; deadlines and link timeouts
     * from {@code options} ({@code JCCL_TIMEOUT}, {@code JCCL_PEER_TIMEOUT}).
     */
    public static InferenceServer create(Store store, String name, BatchingConfig config, BatchModel model,
                                         CommunicatorOptions options) {
        return new InferenceServer(store, name, config, model, options);
    }

    /** {@link #create(Store, String, BatchingConfig, BatchModel, CommunicatorOptions)} with options from the
     * environment. */
    public static InferenceServer create(Store store, String name, BatchingConfig config, BatchModel model) {
        return create(store, name, config, model, CommunicatorOptions.fromEnvironment());
    }

    static void checkName(String name) {
        if (name == null || !name.matches("[A-Za-z0-9._-][A-Za-z0-9._/-]{0,199}")) {
            throw new IllegalArgumentException("server name '" + name + "': use 1 to 200 of A-Z a-z 0-9 . _ - /,"
                + " not starting with /");
        }
    }

    static String defaultDevice(CommunicatorOptions options) {
        String list = options.transports();
        if (list != null && !list.isBlank()) {
            return list.split(",")[0].trim();
        }
        return Verbs.defaultDeviceNames().get(0);
    }

    /** The server's name in the store. */
    public String name() {
        return name;
    }

    /** The verbs device producers reach this server through. */
    public String device() {
        return deviceName;
    }

    /** The configuration. */
    public BatchingConfig config() {
        return config;
    }

    /** A snapshot of the counters (approximate while requests flow: read without stopping the server thread). */
    public BatchingStats stats() {
        return new BatchingStats(requests, batches, timeouts, malformed, modelErrors, batchesBySize.clone(),
            batchesByReason.clone(), queueDelayLog2Us.clone(), producers, batcher.size());
    }

    // ================================================================================================ the loop

    private void run() {
        long nextStoreNs = 0;
        try {
            while (!closing) {
                int work = drainCompletions(queue.poll(completions, completions.length));
                long now = System.nanoTime();
                if (now - nextStoreNs >= 0) {
                    work += acceptProducers();
                    nextStoreNs = now + STORE_PERIOD_NS;
                }
                if (batcher.size() > 0 && now >= batcher.nextDeadlineNs()) {
                    work += rejectExpired(now);
                }
                int size = batcher.decide(now);
                if (size > 0) {
                    runBatch(size, batcher.reason(), now);
                    continue;
                }
                if (work == 0) {
                    long waitNs = Math.min(Math.min(batcher.waitNs(), IDLE_POLL_MAX_NS), nextStoreNs - now);
                    if (batcher.nextDeadlineNs() != Long.MAX_VALUE) {
                        waitNs = Math.min(waitNs, batcher.nextDeadlineNs() - now);
                    }
                    if (waitNs > 0) {
                        // The provider's blocking poll: its wake-up source, no spinning of our own.
                        drainCompletions(queue.poll(completions, completions.length, waitNs));
                    }
                }
            }
            int n = batcher.drain(rejected);
            for (int i = 0; i < n; i++) {
                reject(rejected[i], InferenceStatus.SHUTDOWN);
            }
            awaitResponsesDelivered();
        } catch (Throwable t) {
            failure = t;
            log.warn(0, Log.Subsys.NET, "inference server '" + name + "' stopped: " + t);
        } finally {
            stopped.countDown();
        }
    }

    /**
     * At close: waits until the responses in flight completed (at most {@link #CLOSE_DELIVERY_NS}). A response still
     * posted when the queue pairs close can be lost: over tcp0 the producer then saw its lane flushed instead of its
     * last SHUTDOWN answer. A send completes when the producer's side executed it, so none is lost after this.
     */
    private void awaitResponsesDelivered() {
        long deadline = System.nanoTime() + CLOSE_DELIVERY_NS;
        while (responsesInFlight() > 0 && System.nanoTime() - deadline < 0) {
            drainCompletions(queue.poll(completions, completions.length, IDLE_POLL_MAX_NS));
        }
    }

    /** Responses posted to live lanes whose completions have not come yet. */
    private int responsesInFlight() {
        int n = 0;
        for (Lane lane : lanes) {
            if (lane != null && !lane.dead) {
                n += Math.max(0, lane.sendsOutstanding);
            }
        }
        return n;
    }

    private int drainCompletions(int n) {
        for (int k = 0; k < n; k++) {
            onCompletion(completions[k]);
        }
        return n;
    }

    private void onCompletion(WorkCompletion wc) {
        long id = wc.wrId();
        if ((id & RECEIVE_BIT) == 0) {
            Lane lane = lanes[(int) id];
            lane.sendsOutstanding--;
            if (!wc.isSuccess()) {
                laneFailed(lane, "a response WRITE failed (" + wc.status() + ")");
            }
            return;
        }
        Lane lane = lanes[(int) (id & ~RECEIVE_BIT)];
        if (!wc.isSuccess()) {
            laneFailed(lane, "its queue pair failed (" + wc.status() + ")");
            return;
        }
        if (wc.opcode() != WorkCompletionOpcode.RECV_RDMA_WITH_IMM) {
            malformed++;
            lane.qp.postReceive(receive.wrId(RECEIVE_BIT | lane.index));
            return;
        }
        // One receive consumed per signal: put it back before anything can answer (the producer may send again as
        // soon as it has its response).
        lane.qp.postReceive(receive.wrId(RECEIVE_BIT | lane.index));
        int imm = wc.immediateData();
        int slot = imm & 0xFFFF;
        if (slot >= slots) {
            malformed++;
            log.warn(0, Log.Subsys.NET, "inference server '" + name + "': producer " + lane.index + " (pid "
                + lane.pid + ") signalled slot " + slot + " of " + slots + ": ignored (malformed signal)");
            return;
        }
        int global = lane.index * slots + slot;
        MemorySegment ring = lane.ring.segment();
        long base = (long) slot * requestSlotBytes;
        int magic = ring.get(ValueLayout.JAVA_INT_UNALIGNED, base + Wire.REQ_MAGIC);
        int sequence = ring.get(ValueLayout.JAVA_INT_UNALIGNED, base + Wire.REQ_SEQUENCE);
        int length = ring.get(ValueLayout.JAVA_INT_UNALIGNED, base + Wire.REQ_LENGTH);
        long timeout = ring.get(ValueLayout.JAVA_LONG_UNALIGNED, base + Wire.REQ_TIMEOUT);
        if (magic != Wire.MAGIC || (sequence & 0x7FFF) != (imm >>> 16 & 0x7FFF) || length < 0 || timeout < 0) {
            malformed++;
            answer(global, InferenceStatus.MALFORMED, 0, 0, 0, CloseReason.NONE, -1);
            return;
        }
        if (length > config.inputBytes()) {
            malformed++;
            answer(global, InferenceStatus.TOO_LARGE, 0, 0, 0, CloseReason.NONE, -1);
            return;
        }
        batcher.add(global, System.nanoTime(), timeout > 0 ? timeout : config.defaultTimeoutNs());
    }

    private int rejectExpired(long now) {
        int n = batcher.expire(now, rejected);
        for (int i = 0; i < n; i++) {
            timeouts++;
            reject(rejected[i], InferenceStatus.TIMEOUT);
        }
        return n;
    }

    private void runBatch(int size, CloseReason reason, long now) {
        batcher.take(size, batch);
        long batchId = ++batches;
        batchesBySize[size]++;
        batchesByReason[reason.ordinal()]++;
        int in = config.inputBytes();
        for (int i = 0; i < size; i++) {
            int global = batch[i];
            Lane lane = lanes[global / slots];
            long base = (long) (global % slots) * requestSlotBytes;
            int length = lane.ring.segment().get(ValueLayout.JAVA_INT_UNALIGNED, base + Wire.REQ_LENGTH);
            MemorySegment.copy(lane.ring.segment(), base + Wire.REQUEST_HEADER, inputs, (long) i * in, length);
            if (length < in) {
                inputs.asSlice((long) i * in + length, in - length).fill((byte) 0);
            }
            long delayNs = now - batcher.enqueuedNs[global];
            queueDelayLog2Us[64 - Long.numberOfLeadingZeros(Math.max(0, delayNs) / 1000)]++;
        }
        InferenceStatus status = InferenceStatus.OK;
        try {
            model.run(inputViews[size], size, outputViews[size]);
        } catch (RuntimeException e) {
            status = InferenceStatus.MODEL_ERROR;
            modelErrors += size;
            log.warn(0, Log.Subsys.COLL, "inference server '" + name + "': the model failed on batch " + batchId
                + " of " + size + ": " + e);
        }
        if (status == InferenceStatus.OK) {
            requests += size;
        }
        for (int i = 0; i < size; i++) {
            int global = batch[i];
            answer(global, status, size, batchId, now - batcher.enqueuedNs[global], reason, i);
        }
    }

    private void reject(int global, InferenceStatus status) {
        answer(global, status, 0, 0, System.nanoTime() - batcher.enqueuedNs[global], CloseReason.NONE, -1);
    }

    /** Writes the response slot of request {@code global} (and its output row {@code row}, if any) to its producer. */
    private void answer(int global, InferenceStatus status, int batchSize, long batchId, long queueDelayNs,
                        CloseReason reason, int row) {
        Lane lane = lanes[global / slots];
        if (lane.dead) {
            return;
        }
        int slot = global % slots;
        long requestBase = (long) slot * requestSlotBytes;
        MemorySegment ring = lane.ring.segment();
        MemorySegment out = lane.responses.segment();
        long base = (long) slot * responseSlotBytes;
        out.set(ValueLayout.JAVA_LONG_UNALIGNED, base + Wire.RESP_ID,
            ring.get(ValueLayout.JAVA_LONG_UNALIGNED, requestBase + Wire.REQ_ID));
        out.set(ValueLayout.JAVA_INT_UNALIGNED, base + Wire.RESP_STATUS, status.ordinal());
        out.set(ValueLayout.JAVA_INT_UNALIGNED, base + Wire.RESP_BATCH_SIZE, batchSize);
        out.set(ValueLayout.JAVA_LONG_UNALIGNED, base + Wire.RESP_BATCH_ID, batchId);
        out.set(ValueLayout.JAVA_LONG_UNALIGNED, base + Wire.RESP_QUEUE_DELAY, queueDelayNs);
        out.set(ValueLayout.JAVA_INT_UNALIGNED, base + Wire.RESP_REASON, reason.ordinal());
        out.set(ValueLayout.JAVA_INT_UNALIGNED, base + Wire.RESP_SEQUENCE,
            ring.get(ValueLayout.JAVA_INT_UNALIGNED, requestBase + Wire.REQ_SEQUENCE));
        int length = Wire.RESPONSE_HEADER;
        if (row >= 0 && status == InferenceStatus.OK) {
            MemorySegment.copy(outputs, (long) row * config.outputBytes(), out, base + Wire.RESPONSE_HEADER,
                config.outputBytes());
            length += config.outputBytes();
        }
        // Responses in flight per lane are bounded by the send queue: wait for completions rather than overrun it.
        while (lane.sendsOutstanding >= 2 * slots && !lane.dead) {
            drainCompletions(queue.poll(completions, completions.length, IDLE_POLL_MAX_NS));
        }
        if (lane.dead) {
            return;
        }
        send.wrId(lane.index).immediateData(slot | status.ordinal() << 16)
            .remote(lane.remoteResponses + base, lane.remoteKey).local(lane.responses, base, length);
        try {
            lane.qp.postSend(send);
            lane.sendsOutstanding++;
        } catch (RuntimeException e) {
            laneFailed(lane, "posting a response failed (" + e.getMessage() + ")");
        }
    }

    private void laneFailed(Lane lane, String why) {
        if (lane.dead) {
            return;
        }
        lane.dead = true;
        if (producerLeft(lane)) {
            log.info(0, Log.Subsys.NET, () -> "inference server '" + name + "': producer " + lane.index + " (pid "
                + lane.pid + ") disconnected");
            return;
        }
        log.warn(0, Log.Subsys.NET, "inference server '" + name + "': producer " + lane.index + " (pid " + lane.pid
            + ") dropped: " + why + "; its queued requests are discarded");
    }

    private boolean producerLeft(Lane lane) {
        try {
            return store.check(prefix + "bye/" + lane.index, timeoutNs);
        } catch (RuntimeException e) {
            return false;
        }
    }

    // ================================================================================================ producers

    /** Connects producers that published a request since the last look; returns how many. */
    private int acceptProducers() {
        long announced = store.add(prefix + "lanes", 0, timeoutNs);
        int work = 0;
        for (int lane = accepted; lane < Math.min(announced, lanes.length); lane++) {
            if (lanes[lane] != null) {
                continue;
            }
            String key = prefix + "req/" + lane;
            if (!store.check(key, timeoutNs)) {
                continue;
            }
            work++;
            try {
                lanes[lane] = accept(lane, store.getString(key, timeoutNs));
                producers++;
            } catch (RuntimeException e) {
                lanes[lane] = null;
                store.setString(prefix + "acc/" + lane, "refused " + e.getMessage(), timeoutNs);
                // A refused lane stays unused; later lanes still connect.
                lanes[lane] = refusedLane(lane);
            }
        }
        while (accepted < lanes.length && lanes[accepted] != null) {
            accepted++;
        }
        return work;
    }

    private Lane refusedLane(int lane) {
        Lane l = new Lane(lane, null, null, null, 0, 0, -1);
        l.dead = true;
        return l;
    }

    private Lane accept(int lane, String request) {
        String[] f = request.split(" ");
        if (f.length != 5) {
            throw new BatchingException("malformed producer record '" + request + "'");
        }
        Endpoint remote = Endpoint.decode(f[0]);
        long responses = Long.parseLong(f[1]);
        int responseKey = Integer.parseInt(f[2]);
        long pid = Long.parseLong(f[3]);
        String host = f[4];
        if (reach != Reach.NETWORK && !host.equals(hostId)) {
            throw new BatchingException("producer on host " + host + " cannot reach device " + deviceName
                + " of server '" + name + "' (host " + hostId + ", reach " + reach + "): serve on a network device"
                + " (JCCL_BATCHING_DEVICE, BatchingConfig.withDevice)");
        }
        MemoryRegion ring = null;
        MemoryRegion staging = null;
        QueuePair qp = null;
        try {
            ring = domain.allocateMemory((long) slots * requestSlotBytes, AccessFlag.LOCAL_WRITE,
                AccessFlag.REMOTE_WRITE);
            staging = domain.allocateMemory((long) slots * responseSlotBytes, AccessFlag.LOCAL_WRITE);
            qp = domain.createQueuePair(QueuePairInitAttributes.of(queue).withDepths(2 * slots + 2, slots + 2));
            qp.modify(QueuePairAttributes.toInit(AccessFlag.REMOTE_WRITE));
            for (int s = 0; s < slots; s++) {
                qp.postReceive(receive.wrId(RECEIVE_BIT | lane));
            }
            qp.modify(QueuePairAttributes.toReadyToReceive(remote));
            qp.modify(QueuePairAttributes.toReadyToSend(qp.initialPsn()).linkTimeoutNs(peerTimeoutNs));
            store.setString(prefix + "acc/" + lane, "ok " + qp.localEndpoint().encode() + " " + ring.address() + " "
                + ring.rkey(), timeoutNs);
            Lane l = new Lane(lane, qp, ring, staging, responses, responseKey, pid);
            log.info(0, Log.Subsys.INIT, () -> "inference server '" + name + "': producer " + lane + " (pid " + pid
                + ") connected");
            return l;
        } catch (RuntimeException e) {
            if (qp != null) {
                qp.close();
            }
            if (staging != null) {
                staging.close();
            }
            if (ring != null) {
                ring.close();
            }
            throw e;
        }
    }

    // ================================================================================================ closing

    /**
     * Stops: queued requests are answered {@link InferenceStatus#SHUTDOWN}, {@code closed} goes into the store (waiting
     * producers fail at once, naming the server), queue pairs and memory are released. Idempotent.
     */
    @Override
    public void close() {
        if (closing) {
            return;
        }
        closing = true;
        try {
            stopped.await(10, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        try {
            store.setString(prefix + "closed", "1", timeoutNs);
            store.delete(prefix + "server", timeoutNs);
        } catch (RuntimeException e) {
            log.warn(0, Log.Subsys.INIT, "inference server '" + name + "': could not mark itself closed in "
                + store.describe() + ": " + e.getMessage());
        }
        release();
    }

    /** Tests: stops answering and drops the queue pairs without telling the store, as a crashed process would. */
    void crash() {
        closing = true;
        try {
            stopped.await(10, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        release();
    }

    private void release() {
        int unconfirmed = responsesInFlight();
        responsesUnconfirmedAtClose = unconfirmed;
        if (unconfirmed > 0) {
            log.warn(0, Log.Subsys.NET, "inference server '" + name + "': " + unconfirmed + " responses were not"
                + " confirmed by their producers within " + CLOSE_DELIVERY_NS / 1_000_000 + " ms of closing; they"
                + " may be lost");
        }
        for (Lane l : lanes) {
            if (l != null && l.qp != null) {
                try {
                    l.qp.close();
                } catch (RuntimeException ignored) {
                    // closing anyway
                }
                l.ring.close();
                l.responses.close();
            }
        }
        queue.close();
        domain.close();
        context.close();
        arena.close();
    }

    /** Responses whose delivery no completion confirmed when the queue pairs were released (tests). */
    int responsesUnconfirmedAtClose() {
        return responsesUnconfirmedAtClose;
    }

    /** The error that stopped the server thread, if any. */
    public Throwable failure() {
        return failure;
    }
}
