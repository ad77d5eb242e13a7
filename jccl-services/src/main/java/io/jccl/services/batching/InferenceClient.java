package io.jccl.services.batching;

import io.jccl.collectives.CommunicatorOptions;
import io.jccl.collectives.bootstrap.Bootstrap;
import io.jccl.collectives.store.Store;
import io.jccl.common.Config;
import io.jccl.common.ProcessIds;
import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.Context;
import io.jccl.verbs.Endpoint;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.Verbs;
import io.jccl.verbs.WorkCompletion;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.concurrent.TimeUnit;

/**
 * A producer of an inference batching ring: it owns one lane of the consumer's ring ({@link
 * BatchingConfig#slotsPerProducer()} slots), WRITEs each request with WRITE_WITH_IMM into a free slot of its lane, and
 * reads the consumer's answers from its own registered response slots. Not thread-safe: one client per thread (each
 * has its own lane and queue pair).
 *
 * <p>A full lane (every slot's request unanswered) makes {@link #submit} wait, driving completions, up to the ring
 * wait ({@code JCCL_BATCHING_RING_WAIT_MS}, 10 s), then fail naming the consumer. A consumer that closed, exited or
 * became unreachable fails waits at once (checked every 100 ms while waiting), never at a distant deadline.
 */
public final class InferenceClient implements AutoCloseable {
    private static final long RECEIVE_BIT = 1L << 62;
    private static final long LIVENESS_PERIOD_NS = 100_000_000L;

    private final Store store;
    private final String name;
    private final String prefix;
    private final int lane;
    private final int slots;
    private final int inputBytes;
    private final int requestSlotBytes;
    private final int responseSlotBytes;
    private final long serverPid;
    private final boolean sameHost;
    private final long timeoutNs;
    private final Context context;
    private final ProtectionDomain domain;
    private final CompletionQueue queue;
    private final MemoryRegion requests;
    private final MemoryRegion responses;
    private final QueuePair qp;
    private final long ringAddress;
    private final int ringKey;
    private final InferenceResponse[] views;
    private final long[] submitNs;
    private final int[] free;
    private int freeCount;
    private final int[] done;
    private int doneHead;
    private int doneCount;
    private int lastReturned = -1;
    private int inFlight;
    private int sendsOutstanding;
    private long nextRequestId = 1;
    private int sequence;
    private long ringWaitNs = TimeUnit.MILLISECONDS.toNanos(Config.longValue("JCCL_BATCHING_RING_WAIT_MS", 10_000));
    private final WorkCompletion[] completions = WorkCompletion.array(32);
    private final ReceiveWorkRequest receive = new ReceiveWorkRequest().noData();
    private final SendWorkRequest send = new SendWorkRequest(1).opcode(SendOpcode.RDMA_WRITE_WITH_IMM)
        .flags(SendFlag.SIGNALED);
    private String broken;
    private boolean closed;

    private InferenceClient(Store store, String name, CommunicatorOptions options) {
        InferenceServer.checkName(name);
        this.store = store;
        this.name = name;
        this.prefix = Wire.prefix(name);
        this.timeoutNs = options.timeoutNs();
        String record;
        try {
            record = store.getString(prefix + "server", timeoutNs);
        } catch (RuntimeException e) {
            throw new BatchingException("no inference server named '" + name + "' in " + store.describe()
                + " within " + TimeUnit.NANOSECONDS.toMillis(timeoutNs) + " ms (JCCL_TIMEOUT)", e);
        }
        String[] f = record.split(" ");
        if (f.length != 8 || !f[0].equals(Wire.VERSION)) {
            throw new BatchingException("inference server '" + name + "' speaks another protocol: '" + record + "'");
        }
        String device = f[1];
        this.serverPid = Long.parseLong(f[2]);
        String hostId = Bootstrap.hostIdentity(options);
        this.sameHost = f[3].equals(hostId);
        this.inputBytes = Integer.parseInt(f[4]);
        int outputBytes = Integer.parseInt(f[5]);
        this.slots = Integer.parseInt(f[6]);
        int maxLanes = Integer.parseInt(f[7]);
        this.requestSlotBytes = Wire.requestSlotBytes(inputBytes);
        this.responseSlotBytes = Wire.responseSlotBytes(outputBytes);
        this.lane = (int) store.add(prefix + "lanes", 1, timeoutNs) - 1;
        if (lane >= maxLanes) {
            throw new BatchingException("inference server '" + name + "' accepts at most " + maxLanes
                + " producers (BatchingConfig.withMaxProducers); this would be producer " + (lane + 1));
        }
        Context c = Verbs.device(device).open();
        ProtectionDomain pd = null;
        CompletionQueue cq = null;
        MemoryRegion req = null;
        MemoryRegion resp = null;
        QueuePair q = null;
        try {
            pd = c.allocateProtectionDomain();
            cq = c.createCompletionQueue(4 * slots + 16);
            req = pd.allocateMemory((long) slots * requestSlotBytes, AccessFlag.LOCAL_WRITE);
            resp = pd.allocateMemory((long) slots * responseSlotBytes, AccessFlag.LOCAL_WRITE,
                AccessFlag.REMOTE_WRITE);
            q = pd.createQueuePair(QueuePairInitAttributes.of(cq).withDepths(slots + 2, slots + 2));
            q.modify(QueuePairAttributes.toInit(AccessFlag.REMOTE_WRITE));
            for (int s = 0; s < slots; s++) {
                q.postReceive(receive.wrId(RECEIVE_BIT));
            }
            store.setString(prefix + "req/" + lane, q.localEndpoint().encode() + " " + resp.address() + " "
                + resp.rkey() + " " + ProcessIds.self() + " " + hostId, timeoutNs);
            String answer = awaitAcceptance();
            if (!answer.startsWith("ok ")) {
                throw new BatchingException("inference server '" + name + "' refused producer " + lane + ": "
                    + answer.substring(answer.indexOf(' ') + 1));
            }
            String[] a = answer.split(" ");
            q.modify(QueuePairAttributes.toReadyToReceive(Endpoint.decode(a[1])));
            q.modify(QueuePairAttributes.toReadyToSend(q.initialPsn()).linkTimeoutNs(options.peerTimeoutNs()));
            this.ringAddress = Long.parseLong(a[2]);
            this.ringKey = Integer.parseInt(a[3]);
        } catch (RuntimeException e) {
            for (AutoCloseable r : new AutoCloseable[] {q, resp, req, cq, pd, c}) {
                if (r != null) {
                    try {
                        r.close();
                    } catch (Exception ignored) {
                        // closing anyway
                    }
                }
            }
            throw e;
        }
        this.context = c;
        this.domain = pd;
        this.queue = cq;
        this.requests = req;
        this.responses = resp;
        this.qp = q;
        this.views = new InferenceResponse[slots];
        this.submitNs = new long[slots];
        this.free = new int[slots];
        this.done = new int[slots];
        for (int s = 0; s < slots; s++) {
            views[s] = new InferenceResponse(resp.segment().asSlice((long) s * responseSlotBytes, responseSlotBytes),
                outputBytes);
            free[s] = slots - 1 - s;
        }
        freeCount = slots;
    }

    private String awaitAcceptance() {
        long deadline = System.nanoTime() + timeoutNs;
        String key = prefix + "acc/" + lane;
        while (true) {
            long left = deadline - System.nanoTime();
            try {
                return store.getString(key, Math.max(1, Math.min(left, LIVENESS_PERIOD_NS * 5)));
            } catch (RuntimeException e) {
                String dead = consumerGone();
                if (dead != null) {
                    throw new BatchingException(dead + " before accepting producer " + lane);
                }
                if (System.nanoTime() - deadline >= 0) {
                    throw new BatchingException("inference server '" + name + "' (pid " + serverPid + ") did not "
                        + "accept producer " + lane + " within " + TimeUnit.NANOSECONDS.toMillis(timeoutNs)
                        + " ms (JCCL_TIMEOUT)", e);
                }
            }
        }
    }

    /**
     * Connects to the server named {@code name} in {@code store} (waiting for it up to {@code options}' timeout) and
     * claims a lane of its ring.
     */
    public static InferenceClient connect(Store store, String name, CommunicatorOptions options) {
        return new InferenceClient(store, name, options);
    }

    /** {@link #connect(Store, String, CommunicatorOptions)} with options from the environment. */
    public static InferenceClient connect(Store store, String name) {
        return connect(store, name, CommunicatorOptions.fromEnvironment());
    }

    /** This producer's lane in the server's ring (0 for the first producer to connect). */
    public int lane() {
        return lane;
    }

    /** Requests submitted and not yet returned by {@link #poll}. */
    public int inFlight() {
        return inFlight;
    }

    /** Slots of this producer's lane: the most requests it may have in flight. */
    public int slots() {
        return slots;
    }

    /** Largest request in bytes. */
    public int maxRequestBytes() {
        return inputBytes;
    }

    /** Sets how long {@link #submit} waits for a free slot when the lane is full before it fails. */
    public InferenceClient ringWait(long waitNs) {
        if (waitNs < 0) {
            throw new IllegalArgumentException("ring wait " + waitNs + " ns < 0");
        }
        this.ringWaitNs = waitNs;
        return this;
    }

    /** {@link #submit(MemorySegment, long)} with the server's default timeout. */
    public long submit(MemorySegment input) {
        return submit(input, 0);
    }

    /**
     * WRITEs {@code input} (at most {@link #maxRequestBytes()} bytes) into a free slot of this producer's lane and
     * signals it; the server rejects it with {@link InferenceStatus#TIMEOUT} if no batch takes it within
     * {@code timeoutNs} of its arrival (0: the server's default). Waits for a free slot up to the ring wait.
     *
     * @return the request's id, which its {@link InferenceResponse#requestId()} repeats
     * @throws IllegalArgumentException when {@code input} is larger than a slot
     * @throws BatchingException when the lane stayed full for the ring wait, or the consumer is gone
     */
    public long submit(MemorySegment input, long timeoutNs) {
        checkUsable();
        if (input.byteSize() > inputBytes) {
            throw new IllegalArgumentException("request of " + input.byteSize() + " B exceeds the " + inputBytes
                + " B a slot of inference server '" + name + "' holds (BatchingConfig.inputBytes)");
        }
        if (timeoutNs < 0) {
            throw new IllegalArgumentException("timeout " + timeoutNs + " ns < 0");
        }
        releaseLast();
        if (freeCount == 0) {
            awaitFreeSlot();
        }
        int slot = free[--freeCount];
        long id = nextRequestId++;
        int seq = ++sequence & 0x7FFF;
        MemorySegment r = requests.segment();
        long base = (long) slot * requestSlotBytes;
        r.set(ValueLayout.JAVA_LONG_UNALIGNED, base + Wire.REQ_ID, id);
        r.set(ValueLayout.JAVA_LONG_UNALIGNED, base + Wire.REQ_TIMEOUT, timeoutNs);
        r.set(ValueLayout.JAVA_INT_UNALIGNED, base + Wire.REQ_LENGTH, (int) input.byteSize());
        r.set(ValueLayout.JAVA_INT_UNALIGNED, base + Wire.REQ_MAGIC, Wire.MAGIC);
        r.set(ValueLayout.JAVA_INT_UNALIGNED, base + Wire.REQ_SEQUENCE, seq);
        MemorySegment.copy(input, 0, r, base + Wire.REQUEST_HEADER, input.byteSize());
        post(slot, Wire.requestImmediate(slot, seq), base, Wire.REQUEST_HEADER + (int) input.byteSize());
        return id;
    }

    /** Tests: posts slot {@code slot}'s bytes as they are (a hand-made header) with immediate {@code imm}. */
    int submitRaw(int slot, int imm, MemorySegment header) {
        releaseLast();
        long base = (long) slot * requestSlotBytes;
        MemorySegment.copy(header, 0, requests.segment(), base, header.byteSize());
        for (int i = 0; i < freeCount; i++) {
            if (free[i] == slot) {
                free[i] = free[--freeCount];
                break;
            }
        }
        post(slot, imm, base, (int) header.byteSize());
        return slot;
    }

    private void post(int slot, int imm, long base, int length) {
        while (sendsOutstanding >= slots) {
            progress(queue.poll(completions, completions.length, 1_000_000L));
            checkUsable();
        }
        submitNs[slot] = System.nanoTime();
        send.wrId(slot).immediateData(imm).remote(ringAddress + base, ringKey).local(requests, base, length);
        try {
            qp.postSend(send);
        } catch (RuntimeException e) {
            free[freeCount++] = slot;
            throw new BatchingException("inference server '" + name + "': cannot post to producer lane " + lane
                + " (" + e.getMessage() + ")", e);
        }
        sendsOutstanding++;
        inFlight++;
    }

    private void awaitFreeSlot() {
        long start = System.nanoTime();
        long nextLiveness = start + LIVENESS_PERIOD_NS;
        while (freeCount == 0) {
            // A slot frees when its response is returned by poll: responses that arrived are queued in done[];
            // waiting here means every slot is unanswered or answered and not yet polled.
            if (doneCount > 0) {
                throw new BatchingException("lane full: all " + slots + " slots hold answered requests nobody polled;"
                    + " call poll() before submitting more");
            }
            long now = System.nanoTime();
            if (now - start >= ringWaitNs) {
                throw new BatchingException("ring full: all " + slots + " slots of producer " + lane + " still wait"
                    + " for inference server '" + name + "' after " + TimeUnit.NANOSECONDS.toMillis(ringWaitNs)
                    + " ms (JCCL_BATCHING_RING_WAIT_MS)");
            }
            progress(queue.poll(completions, completions.length, Math.min(1_000_000L, ringWaitNs - (now - start))));
            checkUsable();
            if (System.nanoTime() - nextLiveness >= 0) {
                checkConsumer();
                nextLiveness = System.nanoTime() + LIVENESS_PERIOD_NS;
            }
        }
    }

    /** The next answered request, or {@code null} when none has arrived; never waits. */
    public InferenceResponse poll() {
        checkUsable();
        releaseLast();
        if (doneCount == 0) {
            progress(queue.poll(completions, completions.length));
        }
        return next();
    }

    /**
     * The next answered request, waiting up to {@code waitNs}; {@code null} when none arrived in that time.
     *
     * @throws BatchingException when the consumer closed, exited or became unreachable (detected within 100 ms)
     */
    public InferenceResponse poll(long waitNs) {
        checkUsable();
        releaseLast();
        long start = System.nanoTime();
        long nextLiveness = start + LIVENESS_PERIOD_NS;
        while (doneCount == 0) {
            long now = System.nanoTime();
            if (now - start >= waitNs) {
                return null;
            }
            progress(queue.poll(completions, completions.length, Math.min(waitNs - (now - start),
                LIVENESS_PERIOD_NS)));
            checkUsable();
            if (doneCount == 0 && inFlight > 0 && System.nanoTime() - nextLiveness >= 0) {
                checkConsumer();
                nextLiveness = System.nanoTime() + LIVENESS_PERIOD_NS;
            }
        }
        return next();
    }

    /**
     * Submits {@code input} and waits for its answer (responses to other requests of this client that arrive
     * meanwhile stay queued for {@link #poll}).
     *
     * @throws BatchingException when no answer came within {@code waitNs}, or the consumer is gone
     */
    public InferenceResponse infer(MemorySegment input, long timeoutNs, long waitNs) {
        long id = submit(input, timeoutNs);
        long start = System.nanoTime();
        long nextLiveness = start + LIVENESS_PERIOD_NS;
        while (true) {
            for (int i = 0; i < doneCount; i++) {
                int slot = done[(doneHead + i) % slots];
                if (views[slot].requestId() == id) {
                    // Move it to the front and return it as poll would.
                    done[(doneHead + i) % slots] = done[doneHead];
                    done[doneHead] = slot;
                    return next();
                }
            }
            long now = System.nanoTime();
            if (now - start >= waitNs) {
                throw new BatchingException("no answer to request " + id + " from inference server '" + name
                    + "' within " + TimeUnit.NANOSECONDS.toMillis(waitNs) + " ms");
            }
            progress(queue.poll(completions, completions.length, Math.min(waitNs - (now - start),
                LIVENESS_PERIOD_NS)));
            checkUsable();
            if (System.nanoTime() - nextLiveness >= 0) {
                checkConsumer();
                nextLiveness = System.nanoTime() + LIVENESS_PERIOD_NS;
            }
        }
    }

    private InferenceResponse next() {
        if (doneCount == 0) {
            return null;
        }
        int slot = done[doneHead];
        doneHead = (doneHead + 1) % slots;
        doneCount--;
        lastReturned = slot;
        inFlight--;
        return views[slot];
    }

    private void releaseLast() {
        if (lastReturned >= 0) {
            free[freeCount++] = lastReturned;
            lastReturned = -1;
        }
    }

    private void progress(int n) {
        for (int k = 0; k < n; k++) {
            WorkCompletion wc = completions[k];
            if ((wc.wrId() & RECEIVE_BIT) == 0) {
                sendsOutstanding--;
                if (!wc.isSuccess()) {
                    fail("a request WRITE failed (" + wc.status() + ")");
                }
                continue;
            }
            if (!wc.isSuccess()) {
                fail("the response queue failed (" + wc.status() + ")");
                continue;
            }
            int slot = wc.immediateData() & 0xFFFF;
            qp.postReceive(receive.wrId(RECEIVE_BIT));
            if (slot >= slots) {
                fail("the server answered slot " + slot + " of " + slots);
                continue;
            }
            views[slot].latencyNs = System.nanoTime() - submitNs[slot];
            done[(doneHead + doneCount) % slots] = slot;
            doneCount++;
        }
    }

    private void fail(String why) {
        if (broken == null) {
            String gone = consumerGone();
            broken = "inference server '" + name + "' (pid " + serverPid + ") is unreachable from producer " + lane
                + ": " + why + (gone != null ? "; " + gone : "");
        }
    }

    private void checkConsumer() {
        String gone = consumerGone();
        if (gone != null && broken == null) {
            broken = gone + " with " + inFlight + " requests of producer " + lane + " unanswered";
        }
        checkUsable();
    }

    /** Why the consumer is known to be gone, or {@code null}. */
    private String consumerGone() {
        if (sameHost && ProcessHandle.of(serverPid).map(p -> !p.isAlive()).orElse(true)) {
            return "inference server '" + name + "' (pid " + serverPid + ") exited";
        }
        try {
            if (store.check(prefix + "closed", timeoutNs)) {
                return "inference server '" + name + "' (pid " + serverPid + ") closed";
            }
        } catch (RuntimeException e) {
            return "inference server '" + name + "': its store " + store.describe() + " is unreachable ("
                + e.getMessage() + ")";
        }
        return null;
    }

    private void checkUsable() {
        if (closed) {
            throw new IllegalStateException("inference client of '" + name + "' is closed");
        }
        if (broken != null) {
            throw new BatchingException(broken);
        }
    }

    /** Releases the lane's queue pair and memory (requests in flight are abandoned). Idempotent. */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        try {
            // Tells the server this lane's queue pair errors are a goodbye, not a failure.
            store.setString(prefix + "bye/" + lane, "1", timeoutNs);
        } catch (RuntimeException ignored) {
            // the store is gone: the server logs the lane as failed
        }
        for (AutoCloseable r : new AutoCloseable[] {qp, responses, requests, queue, domain, context}) {
            try {
                r.close();
            } catch (Exception ignored) {
                // closing anyway
            }
        }
    }
}
