package io.jccl.services.rendezvous;

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

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayDeque;
import java.util.BitSet;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.LockSupport;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * Readiness and small control messages between the ranks of a job, on WRITE_WITH_IMM. Rank 0 is the hub: every
 * other rank has one RC link to it (a star: {@code 2(N-1)} queue pairs, and {@code 4(N-1)} store operations to set
 * them up, against the {@code N²} store reads of an all-to-all exchange through the store). A record is 128 bytes
 * WRITTEN into a slot of the peer's mailbox with the record's sequence number as the immediate; each link has
 * {@value #MAILBOX_SLOTS} slots and as many posted receives, and a sender uses a slot only while it holds a credit
 * for it (credits return in every record's header, or in a credit record once half the mailbox was consumed): a slow
 * consumer holds its senders back, never into RNR retries (R6.3).
 *
 * <ul>
 *   <li>{@link #publish(int)}: this rank is ready on a topic (idempotent). The hub merges readiness and broadcasts
 *       it to every rank in bitmaps, one record per rank and round, not one per pair.</li>
 *   <li>{@link #await(int, int, long)} / {@link #await(int, long)}: waits until N ranks (all) published the topic;
 *       on timeout a {@link RendezvousException} names the ranks still missing, and a rank known dead fails the
 *       wait at once.</li>
 *   <li>{@link #send(int, byte[])} / {@link #receive(long)}: up to {@value #MESSAGE_MAX_BYTES} bytes to any rank,
 *       relayed by the hub between two non-hub ranks, in order per sender.</li>
 * </ul>
 *
 * <p>Keys live under {@code jccl-rendezvous/<job id>/<communicator name>/} so nothing of an earlier attempt with
 * another job id is read (R6.1). Every wait has the caller's deadline; joining waits at most {@code JCCL_TIMEOUT}.
 * A daemon agent thread per instance consumes records; a rank's death is noticed through its link (errors) or, on
 * one host, its process id (checked every 100 ms).
 */
public final class Rendezvous implements AutoCloseable {
    /** Largest control message in bytes. */
    public static final int MESSAGE_MAX_BYTES = 96;
    /** Mailbox slots (and credits) per link. */
    static final int MAILBOX_SLOTS = 64;
    static final int RECORD_BYTES = 128;
    static final int PAYLOAD = 32;
    static final int READY = 1;
    static final int READY_SET = 2;
    static final int MESSAGE = 3;
    static final int CREDIT = 4;
    static final int BYE = 5;
    static final int FAILED = 6;
    /** Ranks one READY_SET record covers (its 96-byte bitmap). */
    static final int RANKS_PER_SET = MESSAGE_MAX_BYTES * 8;
    private static final long RECEIVE_BIT = 1L << 62;
    private static final long LIVENESS_PERIOD_NS = 100_000_000L;
    private static final int PENDING_MAX = 4096;
    /**
     * How long {@link #close()} waits for queued records, goodbyes and their completions while nothing moves (a
     * completion or a record from a peer restarts it; the job's timeout bounds the whole).
     */
    static final long CLOSE_FLUSH_MS = 2000;
    /** Hub: how often readiness of a topic not yet complete is broadcast. */
    private static final long BROADCAST_PERIOD_NS = 1_000_000L;

    private final Log log = Log.get();
    private final int rank;
    private final int size;
    private final String deviceName;
    private final Context context;
    private final ProtectionDomain domain;
    private final CompletionQueue queue;
    /** Per peer: the hub has one per other rank, the others only {@code links[0]}. */
    private final Link[] links;
    private final ReentrantLock lock = new ReentrantLock();
    /** Held by whoever polls the completion queue and handles what it returns (ordered handling). */
    private final ReentrantLock pollLock = new ReentrantLock();
    /** Threads in {@link #await}: they drive the queue, the agent steps aside. */
    private final AtomicInteger awaiting = new AtomicInteger();
    private long nextLivenessNs;
    /** Hub: when readiness was last broadcast for incomplete topics. */
    private long lastBroadcastNs;
    /** Records posted and not completed (under the lock). */
    private int sendsOutstanding;
    /** The job's timeout ({@code JCCL_TIMEOUT}): the longest a close waits for its peers to take what it sends. */
    private final long jobTimeoutNs;
    private final Condition changed = lock.newCondition();
    private final Map<Integer, BitSet> ready = new HashMap<>();
    /** Hub: topics with ranks not yet broadcast. */
    private final BitSet dirtyTopics = new BitSet();
    private final BitSet dead = new BitSet();
    private final Map<Integer, String> deathReasons = new HashMap<>();
    private final LinkedBlockingQueue<Message> inbox = new LinkedBlockingQueue<>();
    private final WorkCompletion[] completions = WorkCompletion.array(64);
    private final ReceiveWorkRequest receive = new ReceiveWorkRequest().noData();
    private final SendWorkRequest send = new SendWorkRequest(1).opcode(SendOpcode.RDMA_WRITE_WITH_IMM)
        .flags(SendFlag.SIGNALED);
    private final Thread agent;
    private volatile boolean closed;
    /** Set when the hub is gone (non-hub ranks): every call fails with it. */
    private volatile String hubGone;

    /** One RC link to a peer: its mailbox here, ours there, sequence numbers and credits. */
    private static final class Link {
        final int peer;
        final QueuePair qp;
        final MemoryRegion mailbox;
        final MemoryRegion outbox;
        final long remoteMailbox;
        final int remoteKey;
        final long pid;
        final boolean sameHost;
        final ArrayDeque<byte[]> pending = new ArrayDeque<>();
        int sent;
        int peerConsumed;
        int consumed;
        int reported;
        boolean gone;
        /** Our goodbye is posted (at close, once the records queued before it went). */
        boolean byeSent;

        Link(int peer, QueuePair qp, MemoryRegion mailbox, MemoryRegion outbox, long remoteMailbox, int remoteKey,
             long pid, boolean sameHost) {
            this.peer = peer;
            this.qp = qp;
            this.mailbox = mailbox;
            this.outbox = outbox;
            this.remoteMailbox = remoteMailbox;
            this.remoteKey = remoteKey;
            this.pid = pid;
            this.sameHost = sameHost;
        }
    }

    private Rendezvous(Store store, int rank, int size, CommunicatorOptions options) {
        if (size < 1 || rank < 0 || rank >= size) {
            throw new IllegalArgumentException("rank " + rank + " outside 0.." + (size - 1) + " (size " + size + ")");
        }
        this.rank = rank;
        this.size = size;
        this.jobTimeoutNs = options.timeoutNs();
        String prefix = "jccl-rendezvous/" + options.jobId() + "/" + options.name() + "/";
        String list = options.transports();
        this.deviceName = list != null && !list.isBlank() ? list.split(",")[0].trim()
            : Verbs.defaultDeviceNames().get(0);
        long deadlineNs = System.nanoTime() + options.timeoutNs();
        String hostId = Bootstrap.hostIdentity(options);
        this.links = new Link[rank == 0 ? size : 1];
        Device device = Verbs.device(deviceName);
        Context c = device.open();
        ProtectionDomain pd = null;
        CompletionQueue cq = null;
        try {
            pd = c.allocateProtectionDomain();
            cq = c.createCompletionQueue(Math.min(c.query().maxCompletionQueueEntries(),
                Math.max(256, links.length * 3 * MAILBOX_SLOTS + 64)));
            if (rank == 0) {
                for (int r = 1; r < size; r++) {
                    String spoke = get(store, prefix + "sp/" + r, deadlineNs, prefix, r);
                    String[] f = spoke.split(" ");
                    boolean same = f[4].equals(hostId);
                    if (!same && device.reach() != Reach.NETWORK) {
                        store.setString(prefix + "hub/" + r, "refused rank " + r + " on host " + f[4]
                            + " cannot reach device " + deviceName + " of rank 0 (host " + hostId + ", reach "
                            + device.reach() + "): set JCCL_TRANSPORT to a network device", remaining(deadlineNs));
                        throw new RendezvousException("rank " + r + " is on another host (" + f[4] + ") and device "
                            + deviceName + " reaches only " + device.reach());
                    }
                    links[r] = connect(pd, cq, r, f, same, options);
                    store.setString(prefix + "hub/" + r, "ok " + links[r].qp.localEndpoint().encode() + " "
                        + links[r].mailbox.address() + " " + links[r].mailbox.rkey() + " " + ProcessIds.self() + " "
                        + hostId, remaining(deadlineNs));
                }
            } else {
                QueuePair qp = newQueuePair(pd, cq);
                MemoryRegion mailbox = pd.allocateMemory((long) MAILBOX_SLOTS * RECORD_BYTES, AccessFlag.LOCAL_WRITE,
                    AccessFlag.REMOTE_WRITE);
                MemoryRegion outbox = pd.allocateMemory((long) MAILBOX_SLOTS * RECORD_BYTES, AccessFlag.LOCAL_WRITE);
                for (int s = 0; s < MAILBOX_SLOTS; s++) {
                    qp.postReceive(receive.wrId(RECEIVE_BIT));
                }
                store.setString(prefix + "sp/" + rank, qp.localEndpoint().encode() + " " + mailbox.address() + " "
                    + mailbox.rkey() + " " + ProcessIds.self() + " " + hostId, remaining(deadlineNs));
                String answer = get(store, prefix + "hub/" + rank, deadlineNs, prefix, 0);
                if (!answer.startsWith("ok ")) {
                    throw new RendezvousException("rank 0 refused rank " + rank + ": " + answer.substring(8));
                }
                String[] f = answer.substring(3).split(" ");
                qp.modify(QueuePairAttributes.toReadyToReceive(Endpoint.decode(f[0])));
                qp.modify(QueuePairAttributes.toReadyToSend(qp.initialPsn()).linkTimeoutNs(options.peerTimeoutNs()));
                links[0] = new Link(0, qp, mailbox, outbox, Long.parseLong(f[1]), Integer.parseInt(f[2]),
                    Long.parseLong(f[3]), f[4].equals(hostId));
            }
        } catch (RuntimeException e) {
            for (Link l : links) {
                if (l != null) {
                    closeLink(l);
                }
            }
            if (cq != null) {
                cq.close();
            }
            if (pd != null) {
                pd.close();
            }
            c.close();
            throw e;
        }
        this.context = c;
        this.domain = pd;
        this.queue = cq;
        log.info(rank, Log.Subsys.INIT, () -> "rendezvous: rank " + rank + " of " + size + " joined on "
            + deviceName + (rank == 0 ? " (hub)" : ""));
        agent = Thread.ofPlatform().daemon().name("jccl-rendezvous-" + rank).unstarted(this::runAgent);
        agent.start();
    }

    /**
     * Joins as {@code rank} of {@code size} through {@code store} (the caller keeps it): rank 0 becomes the hub and
     * connects every other rank as it appears; the others connect to rank 0. Returns once this rank's link(s) are up;
     * waits at most {@code options}' timeout ({@code JCCL_TIMEOUT}), then names the ranks that never appeared. The
     * device is the first of {@code JCCL_TRANSPORT} (else the default device); ranks on other hosts need one whose
     * reach is the network.
     */
    public static Rendezvous join(Store store, int rank, int size, CommunicatorOptions options) {
        return new Rendezvous(store, rank, size, options);
    }

    private static long remaining(long deadlineNs) {
        return Math.max(1, deadlineNs - System.nanoTime());
    }

    private static String get(Store store, String key, long deadlineNs, String prefix, int waitedFor) {
        try {
            return store.getString(key, remaining(deadlineNs));
        } catch (RuntimeException e) {
            throw new RendezvousException("rank " + waitedFor + " did not join the rendezvous in " + store.describe()
                + " (" + prefix + ") in time (JCCL_TIMEOUT): " + e.getMessage(), e);
        }
    }

    private QueuePair newQueuePair(ProtectionDomain pd, CompletionQueue cq) {
        QueuePair qp = pd.createQueuePair(QueuePairInitAttributes.of(cq).withDepths(2 * MAILBOX_SLOTS + 4,
            MAILBOX_SLOTS + 4));
        qp.modify(QueuePairAttributes.toInit(AccessFlag.REMOTE_WRITE));
        return qp;
    }

    private Link connect(ProtectionDomain pd, CompletionQueue cq, int peer, String[] f, boolean sameHost,
                         CommunicatorOptions options) {
        QueuePair qp = newQueuePair(pd, cq);
        MemoryRegion mailbox = pd.allocateMemory((long) MAILBOX_SLOTS * RECORD_BYTES, AccessFlag.LOCAL_WRITE,
            AccessFlag.REMOTE_WRITE);
        MemoryRegion outbox = pd.allocateMemory((long) MAILBOX_SLOTS * RECORD_BYTES, AccessFlag.LOCAL_WRITE);
        for (int s = 0; s < MAILBOX_SLOTS; s++) {
            qp.postReceive(receive.wrId(RECEIVE_BIT | peer));
        }
        qp.modify(QueuePairAttributes.toReadyToReceive(Endpoint.decode(f[0])));
        qp.modify(QueuePairAttributes.toReadyToSend(qp.initialPsn()).linkTimeoutNs(options.peerTimeoutNs()));
        return new Link(peer, qp, mailbox, outbox, Long.parseLong(f[1]), Integer.parseInt(f[2]),
            Long.parseLong(f[3]), sameHost);
    }

    /** This rank. */
    public int rank() {
        return rank;
    }

    /** Ranks in the job. */
    public int size() {
        return size;
    }

    /** The verbs device the links use. */
    public String device() {
        return deviceName;
    }

    // ================================================================================================ readiness

    /** Announces that this rank is ready on {@code topic} (≥ 0); publishing again changes nothing. */
    public void publish(int topic) {
        if (topic < 0) {
            throw new IllegalArgumentException("topic " + topic + " < 0");
        }
        lock.lock();
        try {
            checkUsable();
            BitSet set = ready.computeIfAbsent(topic, t -> new BitSet(size));
            if (set.get(rank)) {
                return;
            }
            set.set(rank);
            if (rank == 0) {
                dirtyTopics.set(topic);
                broadcastReadiness(false);
            } else {
                byte[] r = record(READY, rank, 0, topic, 0);
                sendRecord(links[0], r);
            }
            changed.signalAll();
        } finally {
            lock.unlock();
        }
    }

    /** {@link #await(int, int, long)} for every rank of the job. */
    public void await(int topic, long timeoutNs) {
        await(topic, size, timeoutNs);
    }

    /**
     * Waits until at least {@code count} ranks (this one included if it published) are ready on {@code topic}.
     *
     * @throws RendezvousException after {@code timeoutNs}, naming the ranks not ready; at once when a rank died and
     *                             too few live ranks remain to reach {@code count}, or when the hub is gone
     */
    public void await(int topic, int count, long timeoutNs) {
        if (count < 0 || count > size) {
            throw new IllegalArgumentException("count " + count + " outside 0.." + size);
        }
        long deadline = System.nanoTime() + timeoutNs;
        long nextLiveness = System.nanoTime() + LIVENESS_PERIOD_NS;
        // The waiting thread drives the completion queue itself (the agent steps aside): one thread hand-off less
        // per side, which on a loaded host is most of a readiness round's time.
        awaiting.incrementAndGet();
        try {
            while (true) {
                lock.lock();
                try {
                    checkUsable();
                    BitSet set = ready.get(topic);
                    int n = set == null ? 0 : set.cardinality();
                    if (n >= count) {
                        return;
                    }
                    BitSet missing = missing(set);
                    BitSet deadMissing = (BitSet) missing.clone();
                    deadMissing.and(dead);
                    if (size - deadMissing.cardinality() < count) {
                        throw new RendezvousException("topic " + topic + ": cannot reach " + count + " ready ranks: "
                            + describeDead(deadMissing) + "; not ready: " + list(missing));
                    }
                    long now = System.nanoTime();
                    if (now - deadline >= 0) {
                        throw new RendezvousException("topic " + topic + ": " + n + " of " + size + " ranks ready "
                            + "after " + TimeUnit.NANOSECONDS.toMillis(timeoutNs) + " ms (" + count + " awaited); "
                            + "not ready: " + list(missing));
                    }
                    if (now - nextLiveness >= 0) {
                        checkLiveness();
                        nextLiveness = now + LIVENESS_PERIOD_NS;
                        continue;
                    }
                } finally {
                    lock.unlock();
                }
                pollLock.lock();
                try {
                    progress(Math.max(1, Math.min(deadline - System.nanoTime(), 1_000_000L)));
                } finally {
                    pollLock.unlock();
                }
            }
        } finally {
            awaiting.decrementAndGet();
        }
    }

    /** The ranks known ready on {@code topic} now. */
    public int[] readyRanks(int topic) {
        lock.lock();
        try {
            BitSet set = ready.get(topic);
            return set == null ? new int[0] : set.stream().toArray();
        } finally {
            lock.unlock();
        }
    }

    private BitSet missing(BitSet set) {
        BitSet m = new BitSet(size);
        m.set(0, size);
        if (set != null) {
            m.andNot(set);
        }
        return m;
    }

    private static String list(BitSet ranks) {
        StringBuilder sb = new StringBuilder();
        int shown = 0;
        for (int r = ranks.nextSetBit(0); r >= 0; r = ranks.nextSetBit(r + 1)) {
            if (shown++ == 64) {
                sb.append(", … (").append(ranks.cardinality()).append(" in all)");
                break;
            }
            sb.append(sb.isEmpty() ? "" : ", ").append(r);
        }
        return sb.isEmpty() ? "none" : "ranks " + sb;
    }

    private String describeDead(BitSet ranks) {
        StringBuilder sb = new StringBuilder();
        for (int r = ranks.nextSetBit(0); r >= 0; r = ranks.nextSetBit(r + 1)) {
            sb.append(sb.isEmpty() ? "" : "; ").append("rank ").append(r).append(' ')
                .append(deathReasons.getOrDefault(r, "died"));
        }
        return sb.toString();
    }

    // ================================================================================================ messages

    /**
     * Sends {@code payload} (at most {@value #MESSAGE_MAX_BYTES} bytes) to {@code peer} (relayed by rank 0 between
     * two other ranks). Never blocks: without a credit the record waits in order for one (at most 4096 per link).
     */
    public void send(int peer, byte[] payload) {
        if (peer < 0 || peer >= size) {
            throw new IllegalArgumentException("peer " + peer + " outside 0.." + (size - 1));
        }
        if (payload.length > MESSAGE_MAX_BYTES) {
            throw new IllegalArgumentException("message of " + payload.length + " B exceeds " + MESSAGE_MAX_BYTES
                + " B (Rendezvous.MESSAGE_MAX_BYTES)");
        }
        lock.lock();
        try {
            checkUsable();
            if (peer == rank) {
                inbox.add(new Message(rank, payload.clone()));
                return;
            }
            Link link = rank == 0 ? links[peer] : links[0];
            if (rank == 0 && dead.get(peer)) {
                throw new RendezvousException("rank " + peer + " " + deathReasons.get(peer));
            }
            byte[] r = record(MESSAGE, rank, peer, 0, payload.length);
            System.arraycopy(payload, 0, r, PAYLOAD, payload.length);
            sendRecord(link, r);
        } finally {
            lock.unlock();
        }
    }

    /**
     * The next control message sent to this rank, waiting up to {@code timeoutNs}; {@code null} when none came.
     *
     * @throws RendezvousException when the hub is gone (non-hub ranks)
     */
    public Message receive(long timeoutNs) {
        long deadline = System.nanoTime() + timeoutNs;
        try {
            while (true) {
                Message m = inbox.poll();
                if (m != null) {
                    return m;
                }
                checkUsable();
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    return null;
                }
                m = inbox.poll(Math.min(left, LIVENESS_PERIOD_NS), TimeUnit.NANOSECONDS);
                if (m != null) {
                    return m;
                }
                lock.lock();
                try {
                    checkLiveness();
                } finally {
                    lock.unlock();
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return null;
        }
    }

    // ================================================================================================ records

    private static byte[] record(int type, int from, int to, int topic, int length) {
        byte[] r = new byte[RECORD_BYTES];
        MemorySegment m = MemorySegment.ofArray(r);
        m.set(ValueLayout.JAVA_INT_UNALIGNED, 0, type);
        m.set(ValueLayout.JAVA_INT_UNALIGNED, 4, from);
        m.set(ValueLayout.JAVA_INT_UNALIGNED, 8, to);
        m.set(ValueLayout.JAVA_INT_UNALIGNED, 12, topic);
        m.set(ValueLayout.JAVA_INT_UNALIGNED, 16, length);
        return r;
    }

    /** Sends now if a credit allows (the last credit is kept for credit records), else queues. Under the lock. */
    private void sendRecord(Link link, byte[] r) {
        if (link.gone) {
            return;
        }
        if (link.pending.isEmpty() && post(link, r, 2)) {
            return;
        }
        if (link.pending.size() >= PENDING_MAX) {
            throw new RendezvousException("rank " + link.peer + " does not consume its rendezvous records: "
                + PENDING_MAX + " wait for credits");
        }
        link.pending.add(r);
    }

    /** Posts {@code r} on {@code link} if at least {@code credits} credits are free; under the lock. */
    private boolean post(Link link, byte[] r, int credits) {
        if (link.sent - link.peerConsumed > MAILBOX_SLOTS - credits) {
            return false;
        }
        int seq = link.sent;
        long offset = (long) (seq % MAILBOX_SLOTS) * RECORD_BYTES;
        MemorySegment out = link.outbox.segment();
        MemorySegment.copy(r, 0, out, ValueLayout.JAVA_BYTE, offset, RECORD_BYTES);
        out.set(ValueLayout.JAVA_INT_UNALIGNED, offset + 20, link.consumed);
        out.set(ValueLayout.JAVA_INT_UNALIGNED, offset + 24, seq);
        link.reported = link.consumed;
        send.wrId(link.peer).immediateData(seq).remote(link.remoteMailbox + offset, link.remoteKey)
            .local(link.outbox, offset, RECORD_BYTES);
        try {
            link.qp.postSend(send);
        } catch (RuntimeException e) {
            linkFailed(link, "its link failed (" + e.getMessage() + ")");
            return true;
        }
        link.sent++;
        sendsOutstanding++;
        return true;
    }

    private void flush(Link link) {
        while (!link.pending.isEmpty() && post(link, link.pending.peek(), 2)) {
            link.pending.poll();
        }
        if (link.consumed - link.reported >= MAILBOX_SLOTS / 2) {
            post(link, record(CREDIT, rank, link.peer, 0, 0), 1);
        }
    }

    // ================================================================================================ the agent

    private void runAgent() {
        try {
            while (!closed) {
                if (awaiting.get() > 0) {
                    // A waiting thread drives the queue; the agent only keeps an eye on liveness.
                    LockSupport.parkNanos(1_000_000L);
                    continue;
                }
                pollLock.lock();
                try {
                    progress(1_000_000L);
                } finally {
                    pollLock.unlock();
                }
            }
        } catch (RuntimeException e) {
            if (!closed) {
                log.warn(rank, Log.Subsys.NET, "rendezvous agent of rank " + rank + " stopped: " + e);
                hubGone = "the rendezvous agent of rank " + rank + " stopped: " + e;
            }
        }
    }

    /**
     * Polls the completion queue (waiting up to {@code timeoutNs}) and handles what came: records, forwarding, the
     * hub's broadcasts, credits, liveness. The caller holds {@link #pollLock}, so records are handled in order.
     */
    private void progress(long timeoutNs) {
        int n = queue.poll(completions, completions.length, timeoutNs);
        lock.lock();
        try {
            for (int k = 0; k < n; k++) {
                onCompletion(completions[k]);
            }
            if (rank == 0 && !dirtyTopics.isEmpty()) {
                broadcastReadiness(false);
            }
            for (Link l : links) {
                if (l != null && !l.gone) {
                    flush(l);
                }
            }
            if (System.nanoTime() - nextLivenessNs >= 0) {
                checkLiveness();
                nextLivenessNs = System.nanoTime() + LIVENESS_PERIOD_NS;
            }
            if (n > 0) {
                changed.signalAll();
            }
        } finally {
            lock.unlock();
        }
    }

    private void onCompletion(WorkCompletion wc) {
        long id = wc.wrId();
        Link link = links[rank == 0 ? (int) (id & ~RECEIVE_BIT) : 0];
        if (link == null) {
            return;
        }
        if ((id & RECEIVE_BIT) == 0) {
            sendsOutstanding--;
        }
        if (!wc.isSuccess()) {
            linkFailed(link, "its link failed (" + wc.status() + ")");
            return;
        }
        if ((id & RECEIVE_BIT) == 0) {
            return; // a record of ours landed
        }
        link.qp.postReceive(receive.wrId(RECEIVE_BIT | link.peer));
        MemorySegment box = link.mailbox.segment();
        long offset = (long) (wc.immediateData() % MAILBOX_SLOTS) * RECORD_BYTES;
        int type = box.get(ValueLayout.JAVA_INT_UNALIGNED, offset);
        int from = box.get(ValueLayout.JAVA_INT_UNALIGNED, offset + 4);
        int to = box.get(ValueLayout.JAVA_INT_UNALIGNED, offset + 8);
        int topic = box.get(ValueLayout.JAVA_INT_UNALIGNED, offset + 12);
        int length = box.get(ValueLayout.JAVA_INT_UNALIGNED, offset + 16);
        link.peerConsumed = Math.max(link.peerConsumed, box.get(ValueLayout.JAVA_INT_UNALIGNED, offset + 20));
        link.consumed++;
        switch (type) {
            case READY -> {
                if (rank == 0 && from == link.peer) {
                    ready.computeIfAbsent(topic, t -> new BitSet(size)).set(from);
                    dirtyTopics.set(topic);
                }
            }
            case READY_SET -> {
                BitSet set = ready.computeIfAbsent(topic, t -> new BitSet(size));
                for (int i = 0; i < RANKS_PER_SET && length + i < size; i++) {
                    int b = box.get(ValueLayout.JAVA_BYTE, offset + PAYLOAD + i / 8);
                    if ((b >> (i % 8) & 1) != 0) {
                        set.set(length + i);
                    }
                }
            }
            case MESSAGE -> {
                if (length < 0 || length > MESSAGE_MAX_BYTES || to < 0 || to >= size) {
                    log.warn(rank, Log.Subsys.NET, "rendezvous: malformed message record from rank " + link.peer
                        + " (length " + length + ", to " + to + "): dropped");
                } else if (to == rank) {
                    byte[] payload = new byte[length];
                    MemorySegment.copy(box, ValueLayout.JAVA_BYTE, offset + PAYLOAD, payload, 0, length);
                    inbox.add(new Message(rank == 0 ? link.peer : from, payload));
                } else if (rank == 0 && links[to] != null && !links[to].gone) {
                    byte[] r = record(MESSAGE, link.peer, to, 0, length);
                    MemorySegment.copy(box, ValueLayout.JAVA_BYTE, offset + PAYLOAD, r, PAYLOAD, length);
                    sendRecord(links[to], r);
                }
            }
            case FAILED -> markDead(topic, "is gone (rank 0 reported: " + describeReason(box, offset, length) + ")");
            case BYE -> {
                link.gone = true;
                if (rank == 0) {
                    markDead(link.peer, "left the rendezvous (closed)");
                } else if (hubGone == null) {
                    hubGone = "rank 0 (the rendezvous hub, pid " + link.pid + ") closed the rendezvous";
                }
            }
            default -> { } // CREDIT: its header did the work
        }
    }

    private static String describeReason(MemorySegment box, long offset, int length) {
        byte[] b = new byte[Math.max(0, Math.min(length, MESSAGE_MAX_BYTES))];
        MemorySegment.copy(box, ValueLayout.JAVA_BYTE, offset + PAYLOAD, b, 0, b.length);
        return new String(b, java.nio.charset.StandardCharsets.UTF_8);
    }

    /**
     * Hub: sends dirty topics' readiness, as bitmaps, to every live rank: a topic that became complete at once, the
     * others at most every {@link #BROADCAST_PERIOD_NS} (or when {@code all}). Why not at every arrival: with N ranks
     * arriving one by one that is N² records, each waking a process; on an oversubscribed host the wake-ups, not the
     * records, were the cost. Under the lock.
     */
    private void broadcastReadiness(boolean all) {
        long now = System.nanoTime();
        boolean periodic = all || now - lastBroadcastNs >= BROADCAST_PERIOD_NS;
        for (int topic = dirtyTopics.nextSetBit(0); topic >= 0; topic = dirtyTopics.nextSetBit(topic + 1)) {
            BitSet set = ready.get(topic);
            if (!periodic && set.cardinality() < size) {
                continue;
            }
            dirtyTopics.clear(topic);
            for (int base = 0; base < size; base += RANKS_PER_SET) {
                byte[] r = record(READY_SET, 0, 0, topic, base);
                for (int i = 0; i < RANKS_PER_SET && base + i < size; i++) {
                    if (set.get(base + i)) {
                        r[PAYLOAD + i / 8] |= (byte) (1 << (i % 8));
                    }
                }
                for (int peer = 1; peer < size; peer++) {
                    if (links[peer] != null && !links[peer].gone) {
                        sendRecord(links[peer], r);
                    }
                }
            }
        }
        if (periodic) {
            lastBroadcastNs = now;
        }
    }

    private void linkFailed(Link link, String why) {
        if (link.gone) {
            return;
        }
        link.gone = true;
        if (rank == 0) {
            markDead(link.peer, "(pid " + link.pid + ") is unreachable: " + why);
        } else if (hubGone == null) {
            hubGone = "rank 0 (the rendezvous hub, pid " + link.pid + ") is unreachable: " + why;
        }
        changed.signalAll();
    }

    /** Records {@code peer} dead; the hub tells every other rank. Under the lock. */
    private void markDead(int peer, String why) {
        if (peer <= 0 || peer >= size || dead.get(peer)) {
            return;
        }
        dead.set(peer);
        deathReasons.put(peer, why);
        if (!why.contains("left the rendezvous")) {
            log.warn(rank, Log.Subsys.NET, "rendezvous: rank " + peer + " " + why);
        }
        if (rank == 0) {
            byte[] text = why.getBytes(java.nio.charset.StandardCharsets.UTF_8);
            int length = Math.min(text.length, MESSAGE_MAX_BYTES);
            byte[] r = record(FAILED, 0, 0, peer, length);
            System.arraycopy(text, 0, r, PAYLOAD, length);
            for (int p = 1; p < size; p++) {
                if (p != peer && links[p] != null && !links[p].gone) {
                    sendRecord(links[p], r);
                }
            }
        }
        changed.signalAll();
    }

    /** Same-host peers whose process exited are dead (their links may never report it). Under the lock. */
    private void checkLiveness() {
        for (Link l : links) {
            if (l != null && !l.gone && l.sameHost && !ProcessHandle.of(l.pid).map(ProcessHandle::isAlive)
                .orElse(false)) {
                linkFailed(l, "process " + l.pid + " exited");
            }
        }
    }

    private void checkUsable() {
        if (closed) {
            throw new IllegalStateException("rendezvous of rank " + rank + " is closed");
        }
        if (hubGone != null) {
            throw new RendezvousException(hubGone);
        }
    }

    // ================================================================================================ closing

    /**
     * Stops the agent, sends what {@link #send} queued and then a goodbye on every link (the hub tells the others this
     * rank left), waits for the peers to take them (as long as they take something every {@value #CLOSE_FLUSH_MS} ms,
     * at most the job's timeout; what a peer did not take is logged as dropped), and releases the links. Idempotent.
     */
    @Override
    public void close() {
        lock.lock();
        try {
            if (closed) {
                return;
            }
            closed = true;
        } finally {
            lock.unlock();
        }
        try {
            agent.join(2000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        // Queued records, then goodbyes, and their completions awaited: a queue pair closed under a WRITE in flight
        // drops it (the peer would learn of the departure only from its link timeout), and a record still waiting for
        // a credit was lost without a word. Incoming records are still handled meanwhile: they carry the credits.
        pollLock.lock();
        try {
            // A slow peer that still takes records keeps the close waiting (at most the job's timeout); one that
            // took nothing for CLOSE_FLUSH_MS does not: a fixed 2 s in all would drop records a live peer on a
            // loaded host was still taking.
            long start = System.nanoTime();
            long moved = start;
            while (!flushForClose()) {
                long now = System.nanoTime();
                if (now - moved >= CLOSE_FLUSH_MS * 1_000_000L || now - start >= jobTimeoutNs) {
                    break;
                }
                int n = queue.poll(completions, completions.length, 1_000_000L);
                if (n > 0) {
                    moved = System.nanoTime();
                }
                lock.lock();
                try {
                    for (int k = 0; k < n; k++) {
                        onCompletion(completions[k]);
                    }
                } catch (RuntimeException e) {
                    log.warn(rank, Log.Subsys.NET, "rendezvous close of rank " + rank + ": " + e.getMessage());
                } finally {
                    lock.unlock();
                }
            }
            lock.lock();
            try {
                warnUndelivered();
            } finally {
                lock.unlock();
            }
        } finally {
            pollLock.unlock();
        }
        for (Link l : links) {
            if (l != null) {
                closeLink(l);
            }
        }
        queue.close();
        domain.close();
        context.close();
    }

    /**
     * One step of the close: sends the queued records and credits each link allows, then its goodbye. Returns whether
     * every live link has its goodbye posted and every send completed. Under {@link #pollLock}.
     */
    private boolean flushForClose() {
        lock.lock();
        try {
            boolean said = true;
            for (Link l : links) {
                if (l == null || l.gone || l.byeSent) {
                    continue;
                }
                flush(l);
                if (!l.pending.isEmpty() || l.gone) {
                    said &= l.gone;
                    continue;
                }
                l.byeSent = post(l, record(BYE, rank, l.peer, 0, 0), 1);
                said &= l.byeSent;
            }
            return said && sendsOutstanding == 0;
        } finally {
            lock.unlock();
        }
    }

    /** At close, after the wait: names the links whose records or goodbye the peer did not take. Under the lock. */
    private void warnUndelivered() {
        for (Link l : links) {
            if (l != null && !l.gone && (!l.pending.isEmpty() || !l.byeSent)) {
                log.warn(rank, Log.Subsys.NET, "rendezvous close of rank " + rank + ": rank " + l.peer
                    + " did not take " + l.pending.size() + " queued records and the goodbye (nothing moved for "
                    + CLOSE_FLUSH_MS + " ms, or the job's timeout passed); dropped");
            }
        }
        if (sendsOutstanding > 0) {
            log.warn(rank, Log.Subsys.NET, "rendezvous close of rank " + rank + ": " + sendsOutstanding
                + " records unconfirmed when it gave up");
        }
    }

    private static void closeLink(Link l) {
        try {
            l.qp.close();
        } catch (RuntimeException ignored) {
            // closing anyway
        }
        l.mailbox.close();
        l.outbox.close();
    }
}
