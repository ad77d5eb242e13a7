package io.jccl.services.ingest;

import io.jccl.common.Log;
import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.ConnectionManager;
import io.jccl.verbs.ConnectionParameters;
import io.jccl.verbs.Context;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.Verbs;
import io.jccl.verbs.VerbsException;
import io.jccl.verbs.WorkCompletion;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.zip.CRC32C;

/**
 * The consumer of a feature ingestion ring: owns the ring in its registered memory, reads committed records in
 * order, snapshots them to disk and acknowledges what is durable.
 *
 * <p>Protocol (docs/services.md, "Feature ingestion"): a producer reserves {@code n} bytes with FETCH_ADD on the
 * ring's tail (positions only grow; position p lies at p mod ringBytes), waits until {@code p + n - head <=
 * ringBytes} (it READs the head), WRITEs the record and commits it with WRITE_WITH_IMM whose immediate is the low 32
 * bits of p (the consumer rebuilds p from its head: every commit lies within one ring of it). Positions are
 * <em>reserved</em> (before tail), <em>committed</em> (their WRITE_WITH_IMM arrived), <em>consumed</em> (before
 * head). A record is <em>accepted</em> when the consumer reads it in order (its sequence is the next of its
 * producer), <em>visible</em> once the handler saw it, and <em>acknowledged</em> once a committed snapshot holds it:
 * the consumer publishes the highest acknowledged sequence per producer in the ring's header, and producers keep
 * every record until it is acknowledged, so a consumer killed at any moment loses nothing acknowledged, and a
 * restarted consumer starts every producer at its durable sequence + 1, so nothing is accepted twice.
 *
 * <p>A reservation nobody commits (its producer died, or held it past its lease) blocks the head for at most the
 * hole timeout: then the consumer skips from the head to the next committed position (or to the tail it saw when the
 * wait began: reservations before it are older than any lease, so nobody writes there any more), counted as a hole.
 *
 * <p>{@link #poll} is driven by one application thread; connections are accepted on a daemon thread, snapshots are
 * committed on another, so the poll loop never waits for a disk.
 */
public final class IngestConsumer implements AutoCloseable {
    private static final Log LOG = Log.get();
    private static final int RECEIVE_DEPTH = 1024;
    private static final int POLL_BATCH = 64;
    /**
     * One accept call's deadline. Long: ConnectionManager drops a handshake still in progress when the call's deadline
     * passes, after the client may have taken the reply as success (its first request then fails RETRY_EXC_ERR and it
     * reconnects), so slice boundaries should be rare; close() ends the call at once anyway.
     */
    private static final long ACCEPT_SLICE_MS = 60_000;
    /** A segment file takes records until it passes this size, then the next one starts. */
    static final long SEGMENT_ROLL_BYTES = 64L << 20;

    private final IngestSettings settings;
    private final Context context;
    private final ProtectionDomain domain;
    private final CompletionQueue queue;
    private final MemoryRegion region;
    private final MemorySegment memory;
    private final ByteBuffer ringView;
    private final long dataOffset;
    private final int ringBytes;
    private final long ringMask;
    private final long[] committed;
    private final Arena arena = Arena.ofShared();
    private final MemorySegment scratch;
    private final ByteBuffer scratchView;
    /** Records accepted and not yet written to the segment file: one write per 256 KiB, not one per record. */
    private final MemorySegment staging;
    private final ByteBuffer stagingView;
    private int stagedBytes;
    private final CRC32C crc = new CRC32C();
    private final WorkCompletion[] completions = WorkCompletion.array(POLL_BATCH);
    private final ReceiveWorkRequest receive = new ReceiveWorkRequest().noData();
    private final ConnectionManager.ConnectionListener listener;
    private final Thread acceptor;
    private final Thread snapshotter;
    private final ConcurrentLinkedQueue<Link> accepted = new ConcurrentLinkedQueue<>();
    private final Link[] links;
    private final long[] expected;
    private final long[] acknowledged;
    private final LagHistogram lag = new LagHistogram();
    private final Object snapshotLock = new Object();
    private final long epoch;

    private volatile boolean closed;
    private volatile IngestException failure;

    // Poll-thread state.
    private long head;
    private long holeSinceNs;
    private long holeTail;
    private long settledUntil;
    private long nextSnapshotNs;
    private FileChannel segment;
    private long segmentNumber;
    private long segmentBytes;
    private long segmentRecords;
    private long unsealedRecords;
    private long records;
    private long bytes;
    private long holes;
    private long holeBytes;
    private long malformed;
    private long duplicates;
    private long outOfOrder;
    private long staleCommits;

    // Shared with the snapshotter, under snapshotLock.
    private final List<SnapshotStore.Segment> sealedSegments = new ArrayList<>();
    private Sealed pendingSeal;
    private boolean sealing;
    private long snapshotNumber;
    private volatile long durableRecords;
    private volatile long snapshots;

    /** A producer's queue pair. */
    private record Link(int producer, QueuePair queuePair) {
    }

    /** A segment handed to the snapshotter. */
    private record Sealed(FileChannel channel, SnapshotStore.Segment segment, long[] accepted, long newRecords,
                          boolean last) {
    }

    private IngestConsumer(IngestSettings settings) {
        this.settings = settings;
        this.ringBytes = settings.ringBytes();
        this.ringMask = ringBytes - 1L;
        this.dataOffset = RingLayout.dataOffset(settings.maxProducers());
        SnapshotStore.State state = SnapshotStore.recover(settings.directory(), settings.maxProducers(),
            settings.maxPayloadBytes());
        this.expected = new long[settings.maxProducers()];
        this.acknowledged = SnapshotStore.copy(state.durable());
        this.links = new Link[settings.maxProducers()];
        this.sealedSegments.addAll(state.segments());
        this.snapshotNumber = state.snapshot();
        this.segmentNumber = state.lastSegmentNumber();
        this.durableRecords = state.segments().stream().mapToLong(SnapshotStore.Segment::records).sum();
        this.committed = new long[(ringBytes / 8 + 63) / 64];
        this.scratch = arena.allocate(RecordFormat.recordBytes(settings.maxPayloadBytes()), 8);
        this.scratchView = scratch.asByteBuffer();
        this.staging = arena.allocate(Math.max(256 << 10, RecordFormat.recordBytes(settings.maxPayloadBytes())), 8);
        this.stagingView = staging.asByteBuffer();
        this.epoch = new SecureRandom().nextLong() & Long.MAX_VALUE;
        Context ctx = null;
        ProtectionDomain pd = null;
        CompletionQueue cq = null;
        MemoryRegion mr = null;
        ConnectionManager.ConnectionListener l = null;
        try {
            ctx = Verbs.device(settings.device()).open();
            pd = ctx.allocateProtectionDomain();
            cq = ctx.createCompletionQueue(settings.maxProducers() * RECEIVE_DEPTH + POLL_BATCH);
            mr = pd.allocateMemory(dataOffset + ringBytes, AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE,
                AccessFlag.REMOTE_READ, AccessFlag.REMOTE_ATOMIC);
            l = ConnectionManager.listen(pd, settings.bindAddress());
        } catch (RuntimeException e) {
            closeAll(l, mr, cq, pd, ctx);
            arena.close();
            throw new IngestException("cannot open an ingest consumer on " + settings.device() + " at "
                + settings.bindAddress() + ": " + e.getMessage(), e);
        }
        this.context = ctx;
        this.domain = pd;
        this.queue = cq;
        this.region = mr;
        this.listener = l;
        this.memory = mr.segment();
        this.ringView = memory.asByteBuffer();
        memory.fill((byte) 0);
        for (int id = 0; id < expected.length; id++) {
            expected[id] = acknowledged[id] + 1;
            RingLayout.publish(memory, RingLayout.slot(id), expected[id]);
            RingLayout.publish(memory, RingLayout.slot(id) + 16, acknowledged[id]);
        }
        RingLayout.publish(memory, RingLayout.HEAD, 0);
        try {
            openSegment();
        } catch (IOException e) {
            close();
            throw new IngestException("cannot create a segment in " + settings.directory() + ": " + e, e);
        }
        this.nextSnapshotNs = System.nanoTime() + settings.snapshotIntervalNs();
        this.acceptor = Thread.ofPlatform().daemon().name("jccl-ingest-accept").start(this::acceptLoop);
        this.snapshotter = Thread.ofPlatform().daemon().name("jccl-ingest-snapshot").start(this::snapshotLoop);
        LOG.info(-1, Log.Subsys.NET, () -> "ingest consumer on " + settings.device() + " at " + address()
            + ", ring " + ringBytes + " B, snapshots in " + settings.directory() + " (recovered snapshot "
            + snapshotNumber + ", " + durableRecords + " durable records)");
    }

    /**
     * Opens a consumer: recovers the snapshot directory (checking every record), registers the ring and listens for
     * producers.
     *
     * @throws IngestException when the directory fails its checks, or the device or address cannot be used
     */
    public static IngestConsumer open(IngestSettings settings) {
        return new IngestConsumer(settings);
    }

    /**
     * The clock records are stamped with (nanoseconds since the epoch: the monotonic clock plus an offset taken once
     * per process), for measuring lag as {@link IngestStats} does.
     */
    public static long epochNanos() {
        return Wire.epochNanos();
    }

    /** The address producers connect to. */
    public InetSocketAddress address() {
        return listener.localAddress();
    }

    /** The snapshot directory. */
    public Path directory() {
        return settings.directory();
    }

    /** The highest sequence of a producer that is durable (acknowledged); 0 for none. */
    public long acknowledgedSequence(int producerId) {
        synchronized (snapshotLock) {
            return acknowledged[producerId];
        }
    }

    /** The highest sequence of a producer this consumer has accepted (visible); 0 for none. */
    public long acceptedSequence(int producerId) {
        return expected[producerId] - 1;
    }

    /**
     * Reads up to {@code maxRecords} committed records in ring order and hands each to {@code handler}; skips
     * malformed records and holes (counted in {@link #stats}); starts a snapshot when the interval has passed.
     * Never blocks.
     *
     * @return the records handed to the handler
     * @throws IngestException when a snapshot could not be written (disk full): nothing read since the last
     *     snapshot is acknowledged, and the consumer reads no more
     */
    public int poll(RecordHandler handler, int maxRecords) {
        IngestException failed = failure;
        if (failed != null) {
            throw new IngestException(failed.getMessage(), failed);
        }
        if (closed) {
            throw new IllegalStateException("ingest consumer closed");
        }
        drainCompletions();
        int delivered = 0;
        while (delivered < maxRecords) {
            int result = step(handler);
            if (result < 0) {
                break;
            }
            delivered += result;
        }
        long nowNs = System.nanoTime();
        if (nowNs - nextSnapshotNs >= 0) {
            nextSnapshotNs = nowNs + settings.snapshotIntervalNs();
            seal();
        }
        return delivered;
    }

    /**
     * Makes everything accepted so far durable: seals the current segment and waits until a snapshot holding it is
     * committed.
     *
     * @throws IngestException when the snapshot cannot be written or does not finish within {@code timeout}
     */
    public void awaitDurable(Duration timeout) {
        long deadlineNs = System.nanoTime() + timeout.toNanos();
        while (!seal()) {
            waitSnapshot(deadlineNs);
        }
        waitSnapshot(deadlineNs);
    }

    private void waitSnapshot(long deadlineNs) {
        synchronized (snapshotLock) {
            while (pendingSeal != null || sealing) {
                if (failure != null) {
                    throw new IngestException(failure.getMessage(), failure);
                }
                long leftNs = deadlineNs - System.nanoTime();
                if (leftNs <= 0) {
                    throw new IngestException("snapshot in " + settings.directory() + " not committed in time");
                }
                try {
                    snapshotLock.wait(Math.max(1, TimeUnit.NANOSECONDS.toMillis(leftNs)));
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new IngestException("interrupted while waiting for a snapshot", e);
                }
            }
        }
        if (failure != null) {
            throw new IngestException(failure.getMessage(), failure);
        }
    }

    /** The counters and the lag. */
    public IngestStats stats() {
        return new IngestStats(records, bytes, durableRecords, snapshots, holes, holeBytes, malformed, duplicates,
            outOfOrder, staleCommits, lag.last(), lag.quantile(0.5), lag.quantile(0.99), lag.max());
    }

    // ---- the ring ----------------------------------------------------------------------------------------------

    private void drainCompletions() {
        int n;
        while ((n = queue.poll(completions, POLL_BATCH)) > 0) {
            for (int i = 0; i < n; i++) {
                WorkCompletion wc = completions[i];
                Link link = link(wc.queuePairNumber());
                if (!wc.isSuccess()) {
                    if (link != null) {
                        drop(link, wc.status().toString());
                    }
                    continue;
                }
                if (link != null) {
                    try {
                        link.queuePair().postReceive(receive);
                    } catch (VerbsException e) {
                        drop(link, e.getMessage());
                    }
                }
                if (!wc.withImmediate()) {
                    continue;
                }
                long distance = (wc.immediateData() - (int) head) & 0xFFFFFFFFL;
                if (distance >= ringBytes || (distance & 7) != 0) {
                    staleCommits++; // a position already skipped (a commit after its lease), or garbage
                    continue;
                }
                setCommitted(head + distance);
            }
        }
    }

    /** One record or skip at the head: 1 delivered, 0 skipped, -1 nothing to do now. */
    private int step(RecordHandler handler) {
        long h = head;
        boolean isCommitted = isCommitted(h);
        int length = -1;
        if (isCommitted) {
            locate(h, RecordFormat.HEADER_BYTES);
            length = RecordFormat.trustedLength(locSegment, locAt, settings.maxPayloadBytes());
            if (length >= 0) {
                return consume(h, length, handler);
            }
        }
        // Not committed, or committed with a length that cannot be trusted: wait for the hole timeout.
        long tail = RingLayout.getVolatile(memory, RingLayout.TAIL);
        if (h >= tail) {
            return -1;
        }
        long nowNs = System.nanoTime();
        if (h >= settledUntil) {
            if (holeSinceNs == 0) {
                holeSinceNs = nowNs;
                holeTail = tail;
                return -1;
            }
            if (nowNs - holeSinceNs < settings.holeTimeoutNs()) {
                return -1;
            }
            settledUntil = holeTail; // every reservation before it is older than any producer's lease
            holeSinceNs = 0;
        }
        long to = nextCommitted(h + 8, settledUntil);
        if (isCommitted) {
            clearCommitted(h);
            malformed++;
        } else {
            holes++;
            holeBytes += to - h;
        }
        long skipped = to - h;
        LOG.info(-1, Log.Subsys.NET, () -> "ingest: skipped " + skipped + " bytes at position " + h
            + (isCommitted ? " (a committed record with a malformed length)" : " (a reservation nobody committed)"));
        advance(to);
        return 0;
    }

    private int consume(long h, int length, RecordHandler handler) {
        int size = RecordFormat.recordBytes(length);
        locate(h, size);
        int producer = RecordFormat.producer(locSegment, locAt);
        if (producer < 0 || producer >= expected.length
            || !RecordFormat.crcMatches(locSegment, locView, locAt, length, crc)) {
            malformed++;
            clearCommitted(h);
            advance(h + size);
            return 0;
        }
        long sequence = RecordFormat.sequence(locSegment, locAt);
        if (RecordFormat.continues(locSegment, locAt)) {
            setCommitted(h + size); // a batch: one commit for all its records, chained by this flag
        }
        if (sequence != expected[producer]) {
            if (sequence < expected[producer]) {
                duplicates++;
            } else {
                outOfOrder++;
            }
            clearCommitted(h);
            advance(h + size);
            return 0;
        }
        if (stagedBytes + size > staging.byteSize()) {
            flushStaging();
        }
        MemorySegment.copy(locSegment, locAt, staging, stagedBytes, size);
        stagedBytes += size;
        segmentBytes += size;
        segmentRecords++;
        unsealedRecords++;
        expected[producer] = sequence + 1;
        RingLayout.publish(memory, RingLayout.slot(producer), sequence + 1);
        records++;
        bytes += length;
        long timestampNs = RecordFormat.timestamp(locSegment, locAt);
        lag.record(Wire.epochNanos() - timestampNs);
        try {
            handler.onRecord(producer, sequence, timestampNs, locSegment, locAt + RecordFormat.HEADER_BYTES, length);
        } finally {
            clearCommitted(h); // only now may producers reuse the space: the handler reads the ring in place
            advance(h + size);
        }
        return 1;
    }

    /** Writes the staged records to the segment file (page cache; the snapshotter forces it). */
    private void flushStaging() {
        try {
            stagingView.limit(stagedBytes).position(0);
            while (stagingView.hasRemaining()) {
                segment.write(stagingView);
            }
            stagingView.clear();
            stagedBytes = 0;
        } catch (IOException e) {
            stagingView.clear();
            IngestException f = new IngestException("ingest consumer cannot write to " + settings.directory()
                + ": " + e.getMessage() + " (records since the last snapshot are not acknowledged; producers keep"
                + " them)", e);
            failure = f;
            throw f;
        }
    }

    private void advance(long to) {
        clearCommitted(head, to); // also marks a rogue commit inside a record gone, so a later lap cannot trust it
        head = to;
        holeSinceNs = 0;
        RingLayout.publish(memory, RingLayout.HEAD, to);
    }

    // Where locate() put the bytes: the ring itself, or the scratch copy of a record that wraps.
    private MemorySegment locSegment;
    private ByteBuffer locView;
    private long locAt;

    private void locate(long position, int length) {
        long offset = position & ringMask;
        if (offset + length <= ringBytes) {
            locSegment = memory;
            locView = ringView;
            locAt = dataOffset + offset;
            return;
        }
        long first = ringBytes - offset;
        MemorySegment.copy(memory, dataOffset + offset, scratch, 0, first);
        MemorySegment.copy(memory, dataOffset, scratch, first, length - first);
        locSegment = scratch;
        locView = scratchView;
        locAt = 0;
    }

    private boolean isCommitted(long position) {
        int granule = (int) ((position & ringMask) >>> 3);
        return (committed[granule >>> 6] & (1L << granule)) != 0;
    }

    private void setCommitted(long position) {
        int granule = (int) ((position & ringMask) >>> 3);
        committed[granule >>> 6] |= 1L << granule;
    }

    private void clearCommitted(long position) {
        int granule = (int) ((position & ringMask) >>> 3);
        committed[granule >>> 6] &= ~(1L << granule);
    }

    /** Clears the committed bits of [from, to) (at most one ring), a word at a time. */
    private void clearCommitted(long from, long to) {
        long granules = Math.min((to - from) >>> 3, ringBytes >>> 3);
        int granule = (int) ((from & ringMask) >>> 3);
        int total = ringBytes >>> 3;
        while (granules > 0) {
            int bit = granule & 63;
            int n = (int) Math.min(granules, 64 - bit);
            long mask = n == 64 ? -1L : ((1L << n) - 1) << bit;
            committed[granule >>> 6] &= ~mask;
            granules -= n;
            granule = (granule + n) % total;
        }
    }

    /** The first committed position in [from, limit), or limit. */
    private long nextCommitted(long from, long limit) {
        long position = from;
        while (position < limit) {
            int granule = (int) ((position & ringMask) >>> 3);
            long bits = committed[granule >>> 6] >>> (granule & 63);
            if (bits != 0) {
                long found = position + 8L * Long.numberOfTrailingZeros(bits);
                return Math.min(found, limit);
            }
            position += 8L * (64 - (granule & 63));
        }
        return limit;
    }

    // ---- links ---------------------------------------------------------------------------------------------

    private Link link(int queuePairNumber) {
        for (int pass = 0; pass < 2; pass++) {
            for (Link link : links) {
                if (link != null && link.queuePair().queuePairNumber() == queuePairNumber) {
                    return link;
                }
            }
            if (!adoptAccepted()) {
                return null;
            }
        }
        return null;
    }

    private boolean adoptAccepted() {
        boolean any = false;
        Link link;
        while ((link = accepted.poll()) != null) {
            Link old = links[link.producer()];
            if (old != null) {
                old.queuePair().close(); // the producer reconnected: its old queue pair is dead to it
            }
            links[link.producer()] = link;
            any = true;
        }
        return any;
    }

    private void drop(Link link, String why) {
        if (links[link.producer()] == link) {
            links[link.producer()] = null;
        }
        link.queuePair().close();
        LOG.info(-1, Log.Subsys.NET, () -> "ingest: producer " + link.producer() + "'s link failed (" + why
            + "); it reconnects");
    }

    private void acceptLoop() {
        byte[] reply = new Wire.Reply(region.address(), region.rkey(), ringBytes, dataOffset,
            settings.maxPayloadBytes(), settings.maxProducers(), settings.holeTimeoutNs(), epoch).encode();
        ConnectionParameters parameters = Wire.parameters(reply, Duration.ofMillis(ACCEPT_SLICE_MS));
        QueuePairInitAttributes init = QueuePairInitAttributes.of(queue).withDepths(16, RECEIVE_DEPTH);
        while (!closed) {
            try {
                ConnectionManager.Connection c = listener.accept(init, parameters);
                int producer = Wire.producerOf(c.remotePrivateData());
                if (producer < 0 || producer >= settings.maxProducers()) {
                    c.queuePair().close(); // the producer checks its id against the reply and says why
                    continue;
                }
                for (int i = 0; i < RECEIVE_DEPTH; i++) {
                    c.queuePair().postReceive(receive);
                }
                accepted.add(new Link(producer, c.queuePair()));
                LOG.info(-1, Log.Subsys.NET, () -> "ingest: producer " + producer + " connected");
            } catch (VerbsException e) {
                if (closed || e.reason() == VerbsException.Reason.CLOSED) {
                    return;
                }
                if (e.reason() != VerbsException.Reason.TIMEOUT) {
                    LOG.warn(-1, Log.Subsys.NET, "ingest: accepting a producer failed: " + e.getMessage());
                    sleepQuietly(10);
                }
            } catch (RuntimeException e) {
                LOG.warn(-1, Log.Subsys.NET, "ingest: accepting a producer failed: " + e);
                sleepQuietly(10);
            }
        }
    }

    // ---- snapshots -------------------------------------------------------------------------------------------

    private void openSegment() throws IOException {
        segmentNumber++;
        segment = FileChannel.open(settings.directory().resolve(SnapshotStore.segmentName(segmentNumber)),
            StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE);
        segmentBytes = 0;
        segmentRecords = 0;
    }

    /** Hands the current segment to the snapshotter; false when it is still busy with the previous one. */
    private boolean seal() {
        if (failure != null) {
            return true;
        }
        synchronized (snapshotLock) {
            if (pendingSeal != null || sealing) {
                return false;
            }
            if (unsealedRecords == 0) {
                return true; // nothing new: the last snapshot already holds everything accepted
            }
            flushStaging();
            long[] acceptedNow = new long[expected.length];
            for (int i = 0; i < acceptedNow.length; i++) {
                acceptedNow[i] = expected[i] - 1;
            }
            // A snapshot names the segment up to what is written now; the segment goes on growing until it passes
            // SEGMENT_ROLL_BYTES (one file per snapshot interval would be 20 files a second).
            boolean roll = segmentBytes >= SEGMENT_ROLL_BYTES;
            pendingSeal = new Sealed(segment, new SnapshotStore.Segment(SnapshotStore.segmentName(segmentNumber),
                segmentBytes, segmentRecords), acceptedNow, unsealedRecords, roll);
            unsealedRecords = 0;
            snapshotLock.notifyAll();
            if (!roll) {
                return true;
            }
        }
        try {
            openSegment();
        } catch (IOException e) {
            failure = new IngestException("ingest consumer cannot create a segment in " + settings.directory()
                + ": " + e.getMessage(), e);
        }
        return true;
    }

    private void snapshotLoop() {
        while (true) {
            Sealed job;
            synchronized (snapshotLock) {
                while (pendingSeal == null && !closed) {
                    try {
                        snapshotLock.wait(100);
                    } catch (InterruptedException e) {
                        return;
                    }
                }
                if (pendingSeal == null) {
                    return;
                }
                job = pendingSeal;
                pendingSeal = null;
                sealing = true;
            }
            try {
                List<SnapshotStore.Segment> all;
                synchronized (snapshotLock) {
                    all = new ArrayList<>(sealedSegments);
                }
                SnapshotStore.Segment.put(all, job.segment());
                long number = snapshotNumber + 1;
                SnapshotStore.commit(settings.directory(), job.channel(), number, all, job.accepted());
                synchronized (snapshotLock) {
                    SnapshotStore.Segment.put(sealedSegments, job.segment());
                    snapshotNumber = number;
                    for (int id = 0; id < acknowledged.length; id++) {
                        if (job.accepted()[id] > acknowledged[id]) {
                            acknowledged[id] = job.accepted()[id];
                            RingLayout.publish(memory, RingLayout.slot(id) + 16, acknowledged[id]);
                        }
                    }
                    durableRecords += job.newRecords();
                    snapshots++;
                }
            } catch (IOException | RuntimeException e) {
                failure = new IngestException("ingest snapshot " + (snapshotNumber + 1) + " in "
                    + settings.directory() + " failed: " + e.getMessage() + " (the previous snapshot stands; records"
                    + " since are not acknowledged and producers keep them)", e);
                LOG.warn(-1, Log.Subsys.NET, failure.getMessage());
            } finally {
                if (job.last()) {
                    try {
                        job.channel().close(); // the poll thread writes to a new segment now
                    } catch (IOException ignored) {
                        // failing with the snapshot that failed
                    }
                }
                synchronized (snapshotLock) {
                    sealing = false;
                    snapshotLock.notifyAll();
                }
            }
        }
    }

    /**
     * Commits a last snapshot of everything accepted (unless a snapshot already failed), then closes the links, the
     * ring and the listener.
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        if (failure == null && segment != null && acceptor != null) {
            try {
                awaitDurable(Duration.ofSeconds(30));
            } catch (IngestException e) {
                LOG.warn(-1, Log.Subsys.NET, "ingest consumer: last snapshot failed: " + e.getMessage());
            }
        }
        closed = true;
        synchronized (snapshotLock) {
            snapshotLock.notifyAll();
        }
        closeAll(listener);
        joinQuietly(acceptor);
        joinQuietly(snapshotter);
        adoptAccepted();
        for (Link link : links) {
            if (link != null) {
                link.queuePair().close();
            }
        }
        if (segment != null) {
            try {
                segment.close();
            } catch (IOException ignored) {
                // an unsealed segment is deleted at the next recovery
            }
        }
        closeAll(region, queue, domain, context);
        arena.close();
    }

    private static void joinQuietly(Thread thread) {
        if (thread != null) {
            try {
                thread.join(5000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    private static void sleepQuietly(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    static void closeAll(AutoCloseable... resources) {
        for (AutoCloseable r : resources) {
            if (r != null) {
                try {
                    r.close();
                } catch (Exception ignored) {
                    // closing what is left
                }
            }
        }
    }
}
