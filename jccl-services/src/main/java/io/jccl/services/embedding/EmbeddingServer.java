package io.jccl.services.embedding;

import io.jccl.common.SecureIds;
import io.jccl.services.transfer.LocalSegment;
import io.jccl.services.transfer.TransferEngine;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import java.util.Objects;
import java.util.zip.CRC32C;

/**
 * The owner of an embedding table: {@code rows} rows of {@code dim} floats in memory registered with the transfer
 * engine as segment {@code jccl-emb/NAME}, which clients ({@link EmbeddingClient}) read one-sided: after
 * {@link #create} this process's CPU takes no part in lookups. {@link #update} rewrites a row under its seqlock
 * (see {@code TableLayout}) and then tells subscribed clients to drop it from their caches; clients may update rows
 * too ({@link EmbeddingClient#update}). One writer per row at a time: the seqlock makes readers safe against a
 * writer, not two writers against each other.
 */
public final class EmbeddingServer implements AutoCloseable {
    /** Fills a row's initial values. */
    @FunctionalInterface
    public interface RowInitializer {
        /** Writes row {@code row}'s {@code out.length} initial values into {@code out}. */
        void fill(long row, float[] out);
    }

    private final TransferEngine engine;
    private final String name;
    private final long rows;
    private final int dim;
    private final int slotBytes;
    private final long dataOffset;
    private final int tableId;
    private final LocalSegment table;
    private final LocalSegment scratch;
    private final Arena arena = Arena.ofShared();
    private final MemorySegment image;
    private final ByteBuffer imageView;
    private final CRC32C crc = new CRC32C();
    private final Invalidations invalidations;
    private final float[] initRow;

    private EmbeddingServer(TransferEngine engine, String name, long rows, int dim, RowInitializer init) {
        this.engine = engine;
        this.name = name;
        this.rows = rows;
        this.dim = dim;
        slotBytes = TableLayout.slotBytes(dim);
        dataOffset = TableLayout.dataOffset(engine.size());
        tableId = (int) SecureIds.nonce() | 1;
        image = arena.allocate(slotBytes, 64);
        imageView = image.asByteBuffer();
        initRow = new float[dim];
        table = engine.registerSegment(segmentName(name), dataOffset + rows * slotBytes);
        try {
            scratch = engine.registerSegment(segmentName(name) + "/s/" + engine.rank(), 64);
            invalidations = new Invalidations(engine, name, tableId, scratch, 0);
            MemorySegment m = table.memory();
            for (long r = 0; r < rows; r++) {
                if (init != null) {
                    init.fill(r, initRow);
                }
                TableLayout.fill(image, imageView, crc, 0, slotBytes, r, TableLayout.INITIAL_VERSION, initRow, 0,
                    dim);
                MemorySegment.copy(image, 0, m, slotOffset(r), slotBytes);
            }
            m.set(ValueLayout.JAVA_INT_UNALIGNED, TableLayout.OFF_LAYOUT, TableLayout.LAYOUT_VERSION);
            m.set(ValueLayout.JAVA_INT_UNALIGNED, TableLayout.OFF_TABLE_ID, tableId);
            m.set(ValueLayout.JAVA_LONG_UNALIGNED, TableLayout.OFF_ROWS, rows);
            m.set(ValueLayout.JAVA_INT_UNALIGNED, TableLayout.OFF_DIM, dim);
            m.set(ValueLayout.JAVA_INT_UNALIGNED, TableLayout.OFF_SLOT_BYTES, slotBytes);
            m.set(ValueLayout.JAVA_LONG_UNALIGNED, TableLayout.OFF_DATA_OFFSET, dataOffset);
            m.set(ValueLayout.JAVA_INT_UNALIGNED, TableLayout.OFF_RANKS, engine.size());
            // The magic last: a client that read the header before it retries until it sees the magic.
            VarHandle.releaseFence();
            m.set(ValueLayout.JAVA_LONG_UNALIGNED, TableLayout.OFF_MAGIC, TableLayout.MAGIC);
        } catch (RuntimeException e) {
            table.close();
            arena.close();
            throw e;
        }
    }

    /**
     * Creates table {@code name} of {@code rows} rows of {@code dim} floats, every value 0, and publishes it.
     *
     * @throws IllegalArgumentException when rows or dim are out of range
     * @throws io.jccl.services.transfer.TransferException when a table of that name exists in the job
     */
    public static EmbeddingServer create(TransferEngine engine, String name, long rows, int dim) {
        return create(engine, name, rows, dim, null);
    }

    /** As {@link #create(TransferEngine, String, long, int)}, each row's values from {@code init}. */
    public static EmbeddingServer create(TransferEngine engine, String name, long rows, int dim,
                                         RowInitializer init) {
        Objects.requireNonNull(engine, "engine");
        Objects.requireNonNull(name, "name");
        if (dim < 1 || dim > TableLayout.MAX_DIM) {
            throw new IllegalArgumentException("table '" + name + "': dim " + dim + " outside 1.."
                + TableLayout.MAX_DIM);
        }
        if (rows < 1 || rows > (Long.MAX_VALUE >> 20) / TableLayout.slotBytes(dim)) {
            throw new IllegalArgumentException("table '" + name + "': rows " + rows + " must be at least 1 and the "
                + "table under 2^43 B");
        }
        return new EmbeddingServer(engine, name, rows, dim, init);
    }

    static String segmentName(String table) {
        return "jccl-emb/" + table;
    }

    private long slotOffset(long row) {
        return dataOffset + row * slotBytes;
    }

    /** The table's name. */
    public String name() {
        return name;
    }

    /** Its number of rows. */
    public long rows() {
        return rows;
    }

    /** Floats per row. */
    public int dim() {
        return dim;
    }

    /** Bytes one row takes in the table (versions, checksum and row number around the floats). */
    public int slotBytes() {
        return slotBytes;
    }

    /** The row's current version (even; odd while a writer is in it). */
    public long version(long row) {
        checkRow(row);
        return table.memory().get(ValueLayout.JAVA_LONG_UNALIGNED, slotOffset(row) + TableLayout.SLOT_HEAD);
    }

    /** Copies row {@code row}'s current values into {@code out} (a local read; no concurrent writer assumed). */
    public void read(long row, float[] out) {
        checkRow(row);
        MemorySegment.copy(table.memory(), ValueLayout.JAVA_FLOAT_UNALIGNED,
            slotOffset(row) + TableLayout.SLOT_DATA, out, 0, dim);
    }

    /** Ranks whose clients subscribed to this table's invalidations. */
    public int subscribers() {
        int n = 0;
        for (int r = 0; r < engine.size(); r++) {
            if (table.memory().get(ValueLayout.JAVA_LONG_UNALIGNED, TableLayout.subscriberOffset(r)) != 0) {
                n++;
            }
        }
        return n;
    }

    /**
     * Rewrites row {@code row} with {@code values} (length {@code dim}) under its seqlock, then sends its
     * invalidation to every subscribed client (waiting until they have it, or failed). Returns the row's new
     * version. One writer per row at a time.
     */
    public synchronized long update(long row, float[] values) {
        checkRow(row);
        if (values.length != dim) {
            throw new IllegalArgumentException("table '" + name + "': " + values.length + " values for rows of " + dim);
        }
        MemorySegment m = table.memory();
        long at = slotOffset(row);
        long old = m.get(ValueLayout.JAVA_LONG_UNALIGNED, at + TableLayout.SLOT_HEAD);
        long next = (old | 1) + 1;
        TableLayout.fill(image, imageView, crc, 0, slotBytes, row, next, values, 0, dim);
        // Seqlock: head odd, fence, body and tail, fence, head even. Readers copy with any order; they check
        // head == tail and the checksum.
        m.set(ValueLayout.JAVA_LONG_UNALIGNED, at + TableLayout.SLOT_HEAD, next - 1);
        VarHandle.fullFence();
        MemorySegment.copy(image, TableLayout.SLOT_CRC, m, at + TableLayout.SLOT_CRC,
            slotBytes - TableLayout.SLOT_CRC);
        VarHandle.fullFence();
        m.set(ValueLayout.JAVA_LONG_UNALIGNED, at + TableLayout.SLOT_HEAD, next);
        VarHandle.fullFence();
        invalidations.send(m, TableLayout.subscriberOffset(0), row, next);
        return next;
    }

    /** The table's registered memory (tests leave a row mid-write in it, as a writer killed inside the seqlock). */
    MemorySegment tableMemory() {
        return table.memory();
    }

    /** Where row {@code row}'s slot starts in {@link #tableMemory()}. */
    long slotOffsetOf(long row) {
        checkRow(row);
        return slotOffset(row);
    }

    private void checkRow(long row) {
        if (row < 0 || row >= rows) {
            throw new IndexOutOfBoundsException("table '" + name + "': row " + row + " outside 0.." + (rows - 1));
        }
    }

    /** Invalidations delivered to subscribers so far. */
    public long invalidationsSent() {
        return invalidations.sent();
    }

    /** Unregisters the table: clients' lookups fail from then on (their READs are refused). */
    @Override
    public synchronized void close() {
        // Direct readers (mapped memory, no work requests) see the table closed at their next lookup.
        table.memory().set(ValueLayout.JAVA_LONG_UNALIGNED, TableLayout.OFF_MAGIC, TableLayout.CLOSED_MAGIC);
        VarHandle.fullFence();
        invalidations.close();
        scratch.close();
        table.close();
        arena.close();
    }

    @Override
    public String toString() {
        return "embedding table '" + name + "' (" + rows + " x " + dim + " floats, rank " + engine.rank() + ")";
    }
}
