package io.jccl.services.embedding;

import io.jccl.common.Log;
import io.jccl.services.transfer.LocalSegment;
import io.jccl.services.transfer.Notification;
import io.jccl.services.transfer.RemoteSegment;
import io.jccl.services.transfer.TransferBatch;
import io.jccl.services.transfer.TransferEngine;
import io.jccl.services.transfer.TransferException;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import java.util.zip.CRC32C;

/**
 * A client of an embedding table ({@link EmbeddingServer}): opens the table's segment through the transfer engine,
 * reads its header one-sided, and hands out {@link EmbeddingLookup}s (batches of rows read one-sided, with many
 * READs in flight). With a cache ({@code cacheRows > 0}) hot rows are kept locally (CLOCK) and the client subscribes
 * to the table's invalidations: a row another rank updates is dropped from the cache when its notification arrives
 * (drained at the start of every lookup and by {@link #processInvalidations()}).
 *
 * <p>Invalidations come as the engine's notifications: an engine's notifications are consumed by its embedding
 * clients, so an application that uses notifications of its own gives the embedding clients an engine of their own
 * ({@code CommunicatorOptions.withName}). One client per table per engine. Thread-safe: lookups of several threads
 * (one {@link EmbeddingLookup} each) share the cache.
 */
public final class EmbeddingClient implements AutoCloseable {
    private static final Log LOG = Log.get();
    /** The clients of each engine, for routing its notifications by table id. */
    private static final Map<TransferEngine, List<EmbeddingClient>> CLIENTS = new ConcurrentHashMap<>();
    private static final AtomicInteger LOOKUP_IDS = new AtomicInteger();

    final TransferEngine engine;
    private final String table;
    final RemoteSegment remote;
    private final LocalSegment inbox;
    private final long subscriberWord;
    final long rows;
    final int dim;
    final int slotBytes;
    final long dataOffset;
    final int tableId;
    final RowCache cache;
    private final long rowRetryLimitNs;
    private final AtomicLong tornReads = new AtomicLong();
    private final AtomicLong invalidationsReceived = new AtomicLong();
    private LocalSegment updateScratch;
    private MemorySegment updateImage;
    private Invalidations updateInvalidations;
    private final Arena arena = Arena.ofShared();
    /** The server's table mapped for loads (direct access), or null: READ work requests. */
    volatile MemorySegment mapped;
    /** When the last liveness probe of a direct reader completed. */
    private long lastProbeNs;
    private TransferBatch probe;
    /** Why the last probe failed, or null. */
    private volatile String probeFailure;
    private final CRC32C crc = new CRC32C();
    private volatile boolean closed;

    private EmbeddingClient(TransferEngine engine, String table, Duration wait, int cacheRows, long rowRetryLimitNs,
                            boolean directAccess) {
        this.engine = engine;
        this.table = table;
        this.rowRetryLimitNs = rowRetryLimitNs;
        long deadline = System.nanoTime() + wait.toNanos();
        try {
            remote = engine.openSegment(EmbeddingServer.segmentName(table), wait);
        } catch (TransferException e) {
            throw new EmbeddingException("no embedding table '" + table + "' in this job (no segment '"
                + EmbeddingServer.segmentName(table) + "'): " + e.getMessage(), e);
        }
        long headerBytes = TableLayout.dataOffset(engine.size());
        // The inbox's name carries this client's subscriber word: a writer finds it from the word alone, and a
        // client reopened while the old one is still open gets a name of its own.
        subscriberWord = io.jccl.common.SecureIds.nonce() | 1;
        inbox = engine.registerSegment(Invalidations.inboxName(table, engine.rank(), subscriberWord),
            headerBytes + 64);
        try (TransferBatch b = engine.newBatch(1)) {
            MemorySegment h = inbox.memory();
            while (true) {
                b.clear();
                b.read(inbox, 0, remote, 0, Math.min(headerBytes, remote.length()));
                if (!b.submit().await()) {
                    throw new EmbeddingException("embedding table '" + table + "': its header could not be read: " + b);
                }
                long magic = h.get(ValueLayout.JAVA_LONG_UNALIGNED, TableLayout.OFF_MAGIC);
                if (magic == TableLayout.MAGIC) {
                    break;
                }
                if (magic != 0 || System.nanoTime() - deadline > 0) {
                    throw new EmbeddingException("segment '" + remote.name() + "' of rank " + remote.rank()
                        + " is not an embedding table" + (magic == 0 ? " (never initialised)" : " (magic "
                        + Long.toHexString(magic) + ")"));
                }
                LockSupport.parkNanos(1_000_000); // the server is still filling the table
            }
            int layout = h.get(ValueLayout.JAVA_INT_UNALIGNED, TableLayout.OFF_LAYOUT);
            if (layout != TableLayout.LAYOUT_VERSION) {
                throw new EmbeddingException("embedding table '" + table + "' has layout " + layout + ", this client "
                    + "reads layout " + TableLayout.LAYOUT_VERSION);
            }
            tableId = h.get(ValueLayout.JAVA_INT_UNALIGNED, TableLayout.OFF_TABLE_ID);
            rows = h.get(ValueLayout.JAVA_LONG_UNALIGNED, TableLayout.OFF_ROWS);
            dim = h.get(ValueLayout.JAVA_INT_UNALIGNED, TableLayout.OFF_DIM);
            slotBytes = h.get(ValueLayout.JAVA_INT_UNALIGNED, TableLayout.OFF_SLOT_BYTES);
            dataOffset = h.get(ValueLayout.JAVA_LONG_UNALIGNED, TableLayout.OFF_DATA_OFFSET);
            if (slotBytes != TableLayout.slotBytes(dim) || dataOffset != headerBytes
                || dataOffset + rows * slotBytes != remote.length()) {
                throw new EmbeddingException("embedding table '" + table + "': inconsistent header (rows " + rows
                    + ", dim " + dim + ", slot " + slotBytes + " B, data at " + dataOffset + ", segment "
                    + remote.length() + " B)");
            }
            cache = cacheRows > 0 ? new RowCache(cacheRows, dim) : null;
            mapped = directAccess ? engine.mapSegment(remote) : null;
            lastProbeNs = System.nanoTime();
            CLIENTS.computeIfAbsent(engine, e -> new CopyOnWriteArrayList<>()).add(this);
            if (cache != null) {
                subscribe(b, subscriberWord);
            }
        } catch (RuntimeException e) {
            inbox.close();
            arena.close();
            throw e;
        }
    }

    /**
     * Opens table {@code table}, waiting up to {@code wait} for a server to create it, with a cache of
     * {@code cacheRows} rows (0: no cache, no subscription).
     *
     * @throws EmbeddingException when no table of that name appears in time, or the segment is not a table
     */
    public static EmbeddingClient open(TransferEngine engine, String table, Duration wait, int cacheRows) {
        return open(engine, table, wait, cacheRows, ROW_RETRY_LIMIT_DEFAULT, true);
    }

    /**
     * As {@link #open(TransferEngine, String, Duration, int)}; a row that a writer is still in (or that reads torn)
     * after {@code rowRetryLimit} of re-reads fails its lookup ("kept changing") instead of being retried for ever
     * (a writer that died mid-row leaves it odd). With
     * {@code directAccess}, where the device that reaches the server maps its memory (shm0:
     * {@link TransferEngine#mapSegment}), rows are copied with loads instead of READ work requests, under the same
     * seqlock checks, and a READ of the table's header at most every millisecond confirms that the server is alive
     * and the table open (a lookup after a failed probe fails with the probe's reason); elsewhere READs.
     */
    public static EmbeddingClient open(TransferEngine engine, String table, Duration wait, int cacheRows,
                                       Duration rowRetryLimit, boolean directAccess) {
        Objects.requireNonNull(engine, "engine");
        Objects.requireNonNull(table, "table");
        if (cacheRows < 0) {
            throw new IllegalArgumentException("cacheRows " + cacheRows + " must not be negative");
        }
        if (rowRetryLimit.isNegative()) {
            throw new IllegalArgumentException("rowRetryLimit " + rowRetryLimit + " must not be negative");
        }
        return new EmbeddingClient(engine, table, wait, cacheRows, rowRetryLimit.toNanos(), directAccess);
    }

    /** Sets this rank's subscriber word in the table's header (one-sided WRITE). */
    private void subscribe(TransferBatch b, long word) {
        long at = TableLayout.dataOffset(engine.size());
        inbox.memory().set(ValueLayout.JAVA_LONG_UNALIGNED, at + 8, word);
        b.clear();
        b.write(inbox, at + 8, remote, TableLayout.subscriberOffset(engine.rank()), Long.BYTES);
        if (!b.submit().await()) {
            throw new EmbeddingException("embedding table '" + table + "': could not subscribe: " + b);
        }
    }

    /** How long a row may keep changing before its lookup fails: far beyond a live writer's few WRITEs. */
    public static final Duration ROW_RETRY_LIMIT_DEFAULT = Duration.ofSeconds(1);

    /** How long a direct reader's confirmation by a header READ stays valid. */
    static final long PROBE_INTERVAL_NS = 1_000_000L;

    /**
     * For direct readers: null when the server answered a header READ within the last millisecond with the table
     * still open (probing now if the last answer is older), else why not. Called after the rows were copied, so
     * every row a direct lookup returns was read before a successful probe or within a millisecond after one.
     */
    synchronized String confirm() {
        if (probeFailure != null) {
            return probeFailure;
        }
        long now = System.nanoTime();
        if (now - lastProbeNs < PROBE_INTERVAL_NS) {
            return null;
        }
        if (probe == null) {
            probe = engine.newBatch(1);
        } else {
            try {
                probe.clear();
            } catch (IllegalStateException stillOut) {
                probe.close();
                probe = engine.newBatch(1);
            }
        }
        long at = TableLayout.dataOffset(engine.size()) + 16;
        probe.read(inbox, at, remote, TableLayout.OFF_MAGIC, Long.BYTES);
        if (!probe.submit().await()) {
            probeFailure = "table '" + table + "' of rank " + remote.rank() + " cannot be confirmed: "
                + probe.error(0);
        } else if (inbox.memory().get(ValueLayout.JAVA_LONG_UNALIGNED, at) != TableLayout.MAGIC) {
            probeFailure = closedMessage();
        } else {
            lastProbeNs = System.nanoTime();
        }
        return probeFailure;
    }

    String closedMessage() {
        return "table '" + table + "' was closed by its server (rank " + remote.rank() + "); reopen it";
    }

    /** Whether lookups copy rows through a mapping of the server's memory (direct access) instead of READs. */
    public boolean isDirect() {
        return mapped != null;
    }

    /** The table's name. */
    public String table() {
        return table;
    }

    /** The rank that serves the table. */
    public int serverRank() {
        return remote.rank();
    }

    /** The table's number of rows. */
    public long rows() {
        return rows;
    }

    /** Floats per row. */
    public int dim() {
        return dim;
    }

    /** Bytes one row takes in the table and in a lookup's buffer. */
    public int slotBytes() {
        return slotBytes;
    }

    /** A new lookup of up to {@code capacity} rows (reusable: {@link EmbeddingLookup#clear()}). */
    public EmbeddingLookup newLookup(int capacity) {
        checkOpen();
        if (capacity < 1 || (long) capacity * slotBytes > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("lookup capacity " + capacity + " outside 1.."
                + Integer.MAX_VALUE / slotBytes + " for rows of " + slotBytes + " B");
        }
        return new EmbeddingLookup(this, capacity, rowRetryLimitNs,
            EmbeddingServer.segmentName(table) + "/l/" + engine.rank() + "." + LOOKUP_IDS.incrementAndGet());
    }

    /**
     * Rewrites row {@code row} of the remote table with {@code values} under its seqlock (three WRITEs, each landed
     * before the next is posted: head odd; row, data, checksum and tail; head even), then sends its invalidation to
     * the table's subscribers. Returns the new version. One writer per row at a time.
     *
     * @throws EmbeddingException when a WRITE fails (the row may be left odd: the next update repairs it)
     */
    public synchronized long update(long row, float[] values) {
        checkOpen();
        if (row < 0 || row >= rows) {
            throw new IndexOutOfBoundsException("table '" + table + "': row " + row + " outside 0.." + (rows - 1));
        }
        if (values.length != dim) {
            throw new IllegalArgumentException("table '" + table + "': " + values.length + " values for rows of "
                + dim);
        }
        if (updateScratch == null) {
            long words = TableLayout.dataOffset(engine.size());
            updateScratch = engine.registerSegment(EmbeddingServer.segmentName(table) + "/u/" + engine.rank() + "/"
                + Long.toHexString(subscriberWord), words + slotBytes + 64);
            updateImage = updateScratch.memory();
            updateInvalidations = new Invalidations(engine, table, tableId, updateScratch, words + slotBytes);
        }
        long slot = dataOffset + row * slotBytes;
        long imageAt = TableLayout.dataOffset(engine.size());
        try (TransferBatch b = engine.newBatch(1)) {
            // The current version (the head alone: a one-word READ)
            b.read(updateScratch, imageAt, remote, slot, Long.BYTES);
            await(b, "read the version of row " + row);
            long old = updateImage.get(ValueLayout.JAVA_LONG_UNALIGNED, imageAt);
            long next = (old | 1) + 1;
            ByteBuffer view = updateImage.asSlice(imageAt, slotBytes).asByteBuffer();
            TableLayout.fill(updateImage.asSlice(imageAt, slotBytes), view, crc, 0, slotBytes, row, next, values, 0,
                dim);
            updateImage.set(ValueLayout.JAVA_LONG_UNALIGNED, imageAt + slotBytes, next - 1);
            b.clear();
            b.write(updateScratch, imageAt + slotBytes, remote, slot, Long.BYTES);
            await(b, "mark row " + row + " as being written");
            b.clear();
            b.write(updateScratch, imageAt + TableLayout.SLOT_CRC, remote, slot + TableLayout.SLOT_CRC,
                slotBytes - TableLayout.SLOT_CRC);
            await(b, "write row " + row);
            b.clear();
            b.write(updateScratch, imageAt, remote, slot, Long.BYTES);
            await(b, "publish row " + row);
            // Subscribers: their words, read one-sided from the header.
            b.clear();
            b.read(updateScratch, 0, remote, 0, imageAt);
            await(b, "read the subscribers");
            updateInvalidations.send(updateImage, TableLayout.subscriberOffset(0), row, next);
            return next;
        }
    }

    private void await(TransferBatch b, String what) {
        if (!b.submit().await()) {
            throw new EmbeddingException("embedding table '" + table + "': could not " + what + ": " + b);
        }
    }

    /**
     * Applies the invalidations that arrived (drops the rows from the cache); returns how many arrived. Lookups call
     * it first; call it when idle to keep the cache fresh between lookups.
     */
    public int processInvalidations() {
        return drain(engine);
    }

    /** Routes the engine's pending notifications to its embedding clients. */
    private static int drain(TransferEngine engine) {
        List<EmbeddingClient> clients = CLIENTS.get(engine);
        int n = 0;
        Notification note;
        while ((note = engine.pollNotification()) != null) {
            byte[] m = note.message();
            if (m.length != Invalidations.MESSAGE_BYTES) {
                continue;
            }
            ByteBuffer v = ByteBuffer.wrap(m).order(ByteOrder.LITTLE_ENDIAN);
            if (v.getInt(0) != Invalidations.MAGIC) {
                continue;
            }
            int id = v.getInt(4);
            for (int i = 0; clients != null && i < clients.size(); i++) {
                EmbeddingClient c = clients.get(i);
                if (c.tableId == id) {
                    c.invalidationsReceived.incrementAndGet();
                    if (c.cache != null) {
                        c.cache.invalidate(v.getLong(8), v.getLong(16));
                    }
                    n++;
                }
            }
        }
        return n;
    }

    /** An invalidation from this rank's own writer (no notification to oneself): applied at once. */
    static void invalidateLocal(TransferEngine engine, int tableId, long row, long version) {
        List<EmbeddingClient> clients = CLIENTS.get(engine);
        for (int i = 0; clients != null && i < clients.size(); i++) {
            EmbeddingClient c = clients.get(i);
            if (c.tableId == tableId && c.cache != null) {
                c.cache.invalidate(row, version);
            }
        }
    }

    /** Whether {@code row} is in the cache now. */
    public boolean isCached(long row) {
        return cache != null && cache.contains(row);
    }

    /** Rows in the cache now (0 without a cache). */
    public int cachedRows() {
        return cache == null ? 0 : cache.size();
    }

    /** Lookups of rows the cache answered. */
    public long cacheHits() {
        return cache == null ? 0 : cache.hits();
    }

    /** Lookups of rows the cache did not hold (read from the table). */
    public long cacheMisses() {
        return cache == null ? 0 : cache.misses();
    }

    /** Invalidation notifications received for this table. */
    public long invalidationsReceived() {
        return invalidationsReceived.get();
    }

    /** Rows read while a writer was in them (or torn) and read again. */
    public long tornReads() {
        return tornReads.get();
    }

    void countTorn(int n) {
        tornReads.addAndGet(n);
    }

    void checkOpen() {
        if (closed) {
            throw new IllegalStateException("embedding client of table '" + table + "' is closed");
        }
    }

    /** Unsubscribes (best effort: the server may be gone) and unregisters this client's segments. */
    @Override
    public synchronized void close() {
        if (closed) {
            return;
        }
        closed = true;
        List<EmbeddingClient> clients = CLIENTS.get(engine);
        if (clients != null) {
            clients.remove(this);
            if (clients.isEmpty()) {
                CLIENTS.remove(engine, clients);
            }
        }
        if (probe != null) {
            probe.close();
        }
        if (cache != null) {
            try (TransferBatch b = engine.newBatch(1)) {
                subscribe(b, 0);
            } catch (RuntimeException e) {
                LOG.info(engine.rank(), Log.Subsys.NET, () -> "embedding table '" + table + "': unsubscribe: "
                    + e.getMessage());
            }
        }
        if (updateInvalidations != null) {
            updateInvalidations.close();
            updateScratch.close();
        }
        inbox.close();
        arena.close();
    }

    @Override
    public String toString() {
        return "embedding table '" + table + "' of rank " + remote.rank() + " (" + rows + " x " + dim + " floats)";
    }
}
