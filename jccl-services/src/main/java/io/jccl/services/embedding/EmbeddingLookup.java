package io.jccl.services.embedding;

import io.jccl.services.transfer.LocalSegment;
import io.jccl.services.transfer.TransferBatch;
import io.jccl.services.transfer.TransferStatus;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.util.concurrent.locks.LockSupport;
import java.util.zip.CRC32C;

/**
 * A batch of row lookups: {@link #add(long)} rows, {@link #execute()}, then read each row's values
 * ({@link #get(int, int)}, {@link #copyTo(int, float[], int)}) or its error. Rows the client's cache holds are copied
 * from it; the others are read one-sided from the table, all READs of the batch in flight at once (one transfer
 * batch), each into its own slot of this lookup's registered buffer. A row read while a writer was in it (odd or
 * mismatched versions, wrong checksum) is read again, up to the client's limit of attempts; it never comes back
 * torn. Each row has its own status: a row out of range, a table that refused the READ (closed, re-created) or a
 * server gone fails that row with the reason, and {@code execute} returns within the engine's deadline
 * (JCCL_TIMEOUT). Reusable ({@link #clear()}); a reused lookup allocates nothing per row. Not thread-safe: one
 * lookup per thread.
 */
public final class EmbeddingLookup implements AutoCloseable {
    private static final byte PENDING = 0;
    private static final byte OK = 1;
    private static final byte FAILED = 2;
    /** How long a lookup polls its READs' completions before it blocks (a loopback round trip is tens of µs). */
    static final long SPIN_NS = 200_000L;
    /**
     * How long of that it polls without yielding: shorter than any TCP round trip (the kernel's loopback floor is
     * 13–14 µs blocking, ~8 µs with both ends polling, bench/c/tcp_pingpong.c), so a wait that will not end while
     * spinning yields the core between polls: on a host with fewer free cores than runnable threads the server
     * thread the answer waits on gets it (measured in docs/services.md, "Embedding cache"), and with a core to
     * spare a yield returns at once.
     */
    static final long SPIN_BEFORE_YIELD_NS = 10_000L;
    /** What {@link #waitPhase(long)} says to do between two polls. */
    static final int SPIN = 0;
    static final int YIELD = 1;
    static final int BLOCK = 2;
    /** Re-copies of a torn row after which a direct reader asks the liveness probe before each wait. */
    static final int PROBE_AFTER_ATTEMPTS = 64;

    private final EmbeddingClient client;
    private final int capacity;
    private final long retryLimitNs;
    private final int slotBytes;
    private final LocalSegment buffer;
    private final MemorySegment memory;
    private final ByteBuffer view;
    private final CRC32C crc = new CRC32C();
    private TransferBatch batch;
    private final long[] rows;
    private final long[] versions;
    private final byte[] status;
    private final String[] errors;
    private final int[] pending;
    private final int[] pendingNext;
    private final int[] transferOf;
    private int count;
    private int failed;
    private boolean executed;
    private boolean closed;
    /** Thread.yield() calls while waiting for READs (package-private counter for tests). */
    private long waitYields;

    EmbeddingLookup(EmbeddingClient client, int capacity, long retryLimitNs, String bufferName) {
        this.client = client;
        this.capacity = capacity;
        this.retryLimitNs = retryLimitNs;
        slotBytes = client.slotBytes;
        buffer = client.engine.registerSegment(bufferName, (long) capacity * slotBytes);
        memory = buffer.memory();
        view = memory.asByteBuffer();
        batch = client.engine.newBatch(capacity);
        rows = new long[capacity];
        versions = new long[capacity];
        status = new byte[capacity];
        errors = new String[capacity];
        pending = new int[capacity];
        pendingNext = new int[capacity];
        transferOf = new int[capacity];
    }

    /** Adds row {@code row}; returns its index in this lookup. */
    public int add(long row) {
        if (closed) {
            throw new IllegalStateException("lookup is closed");
        }
        if (executed) {
            throw new IllegalStateException("lookup was executed: clear() it to reuse it");
        }
        if (count == capacity) {
            throw new IllegalStateException("lookup is full: it holds at most " + capacity + " rows");
        }
        rows[count] = row;
        status[count] = PENDING;
        errors[count] = null;
        return count++;
    }

    /** Rows added. */
    public int size() {
        return count;
    }

    /** Most rows it holds. */
    public int capacity() {
        return capacity;
    }

    /**
     * Looks every added row up; returns whether all succeeded. Waits at most about the engine's deadline
     * (JCCL_TIMEOUT) per round of re-reads.
     */
    public boolean execute() {
        if (executed) {
            throw new IllegalStateException("lookup was executed: clear() it to reuse it");
        }
        client.checkOpen();
        executed = true;
        failed = 0;
        RowCache cache = client.cache;
        if (cache != null) {
            client.processInvalidations();
        }
        int misses = 0;
        for (int i = 0; i < count; i++) {
            long row = rows[i];
            if (row < 0 || row >= client.rows) {
                fail(i, "row " + row + " is outside table '" + client.table() + "' (0.." + (client.rows - 1) + ")");
                continue;
            }
            if (cache != null) {
                long v = cache.get(row, memory, (long) i * slotBytes + TableLayout.SLOT_DATA);
                if (v >= 0) {
                    versions[i] = v;
                    status[i] = OK;
                    continue;
                }
            }
            pending[misses++] = i;
        }
        int[] todo = pending;
        int[] next = pendingNext;
        MemorySegment mapped = client.mapped;
        if (mapped != null && misses > 0) {
            int failedBefore = failed;
            try {
                readMapped(mapped, misses);
                return failed == 0;
            } catch (IllegalStateException unmapped) {
                // The view was unmapped (table revoked, link rebuilt): READs say why from now on, for every row
                // that was pending (the rows out of range stay failed).
                client.mapped = null;
                failed = failedBefore;
            }
        }
        long firstNs = 0;
        for (int attempt = 1; misses > 0; attempt++) {
            resetBatch();
            for (int k = 0; k < misses; k++) {
                int i = todo[k];
                transferOf[k] = batch.read(buffer, (long) i * slotBytes, client.remote,
                    client.dataOffset + rows[i] * slotBytes, slotBytes);
            }
            batch.submit();
            awaitBatch();
            int again = 0;
            for (int k = 0; k < misses; k++) {
                int i = todo[k];
                int t = transferOf[k];
                if (batch.status(t) != TransferStatus.SUCCEEDED) {
                    fail(i, "row " + rows[i] + ": " + batch.error(t));
                    continue;
                }
                long v = TableLayout.validate(memory, crc, view, i * slotBytes, slotBytes, rows[i]);
                if (v < 0) {
                    if (firstNs == 0) {
                        firstNs = System.nanoTime();
                    }
                    if (System.nanoTime() - firstNs > retryLimitNs) {
                        fail(i, changing(i, attempt));
                    } else {
                        next[again++] = i;
                    }
                    continue;
                }
                versions[i] = v;
                status[i] = OK;
                if (cache != null) {
                    cache.put(rows[i], v, memory, (long) i * slotBytes + TableLayout.SLOT_DATA);
                }
            }
            if (again > 0) {
                client.countTorn(again);
                backOff(attempt); // a writer is mid-row: its next WRITE lands within a round trip, or later
            }
            int[] swap = todo;
            todo = next;
            next = swap;
            misses = again;
        }
        return failed == 0;
    }

    /**
     * Direct access: copies each pending row's slot from the mapped table and checks it as a READ's copy is checked
     * (re-copying while a writer is in it), then confirms the server is alive (at most one header READ per
     * millisecond).
     */
    private void readMapped(MemorySegment mapped, int misses) {
        if (mapped.get(ValueLayout.JAVA_LONG_UNALIGNED, TableLayout.OFF_MAGIC) != TableLayout.MAGIC) {
            for (int k = 0; k < misses; k++) {
                fail(pending[k], client.closedMessage());
            }
            return;
        }
        RowCache cache = client.cache;
        int torn = 0;
        for (int k = 0; k < misses; k++) {
            int i = pending[k];
            long at = (long) i * slotBytes;
            long from = client.dataOffset + rows[i] * slotBytes;
            long v = -1;
            long firstNs = 0;
            for (int attempt = 1; ; attempt++) {
                MemorySegment.copy(mapped, from, memory, at, slotBytes);
                v = TableLayout.validate(memory, crc, view, (int) at, slotBytes, rows[i]);
                if (v >= 0) {
                    break;
                }
                torn++;
                if (firstNs == 0) {
                    firstNs = System.nanoTime();
                } else if (System.nanoTime() - firstNs > retryLimitNs) {
                    fail(i, changing(i, attempt));
                    break;
                }
                // Past the spinning: the writer may be dead mid-row (its pages stay mapped, the row stays odd),
                // so ask the probe before waiting on: a dead server is named at once, not after the retry limit.
                String dead = attempt >= PROBE_AFTER_ATTEMPTS ? client.confirm() : null;
                if (dead != null) {
                    fail(i, "row " + rows[i] + ": " + dead);
                    break;
                }
                backOff(attempt);
            }
            if (v < 0) {
                continue;
            }
            versions[i] = v;
            status[i] = OK;
        }
        if (torn > 0) {
            client.countTorn(torn);
        }
        String dead = client.confirm();
        for (int k = 0; k < misses; k++) {
            int i = pending[k];
            if (status[i] != OK) {
                if (dead != null) {
                    errors[i] = "row " + rows[i] + ": " + dead; // the cause of a row left mid-write
                }
                continue;
            }
            if (dead != null) {
                status[i] = PENDING;
                fail(i, "row " + rows[i] + ": " + dead);
            } else if (cache != null) {
                cache.put(rows[i], versions[i], memory, (long) i * slotBytes + TableLayout.SLOT_DATA);
            }
        }
    }

    /**
     * Drives the batch from this thread for up to {@link #SPIN_NS} (polling completions, which on tcp0 also moves
     * the socket I/O along, as perftest's latency loops do): spinning for the first {@link #SPIN_BEFORE_YIELD_NS},
     * yielding between polls after that, then waits in the engine's blocking await.
     */
    private void awaitBatch() {
        long startNs = System.nanoTime();
        while (!batch.poll()) {
            switch (waitPhase(System.nanoTime() - startNs)) {
                case SPIN -> Thread.onSpinWait();
                case YIELD -> {
                    waitYields++;
                    Thread.yield();
                }
                default -> {
                    batch.await();
                    return;
                }
            }
        }
    }

    /**
     * The house's idle order for a wait of {@code waitedNs} so far: spin for {@link #SPIN_BEFORE_YIELD_NS}, then
     * yield between polls up to {@link #SPIN_NS}, then block.
     */
    static int waitPhase(long waitedNs) {
        return waitedNs < SPIN_BEFORE_YIELD_NS ? SPIN : waitedNs < SPIN_NS ? YIELD : BLOCK;
    }

    /** Yields between polls of this lookup's READs so far (tests, diagnostics). */
    long waitYields() {
        return waitYields;
    }

    private String changing(int i, int attempts) {
        return "row " + rows[i] + " of table '" + client.table() + "' kept changing: " + attempts + " reads over "
            + retryLimitNs / 1_000_000 + " ms found a writer in it or a torn copy (a writer that died mid-row? the "
            + "next update repairs it)";
    }

    /**
     * Waits before re-reading a row a writer is in: spins first (a live writer's next WRITE is a round trip away),
     * then yields and parks, since on a loaded host the writer may have lost its CPU mid-row.
     */
    private static void backOff(int attempt) {
        if (attempt < 16) {
            Thread.onSpinWait();
        } else if (attempt < 64) {
            Thread.yield();
        } else {
            LockSupport.parkNanos(50_000);
        }
    }

    /** Empties the transfer batch; one whose slices outlived their deadline (server gone) is replaced. */
    private void resetBatch() {
        try {
            batch.clear();
        } catch (IllegalStateException stillOut) {
            batch.close();
            batch = client.engine.newBatch(capacity);
        }
    }

    private void fail(int i, String why) {
        status[i] = FAILED;
        errors[i] = why;
        failed++;
    }

    /** Whether row {@code i} was looked up (false: see {@link #error(int)}). */
    public boolean succeeded(int i) {
        checkIndex(i);
        return status[i] == OK;
    }

    /** Whether every row was looked up. */
    public boolean succeeded() {
        return executed && failed == 0;
    }

    /** Rows that failed. */
    public int failedCount() {
        return failed;
    }

    /** Why row {@code i} failed, or null. */
    public String error(int i) {
        checkIndex(i);
        return errors[i];
    }

    /** The row number at index {@code i}. */
    public long row(int i) {
        checkIndex(i);
        return rows[i];
    }

    /** The version of row {@code i} that was returned. */
    public long version(int i) {
        checkOk(i);
        return versions[i];
    }

    /** Value {@code j} of row {@code i}. */
    public float get(int i, int j) {
        checkOk(i);
        if (j < 0 || j >= client.dim) {
            throw new IndexOutOfBoundsException("value " + j + " outside 0.." + (client.dim - 1));
        }
        return memory.get(ValueLayout.JAVA_FLOAT_UNALIGNED, (long) i * slotBytes + TableLayout.SLOT_DATA
            + (long) j * Float.BYTES);
    }

    /** Copies row {@code i}'s values into {@code dst} from {@code offset}. */
    public void copyTo(int i, float[] dst, int offset) {
        checkOk(i);
        MemorySegment.copy(memory, ValueLayout.JAVA_FLOAT_UNALIGNED, (long) i * slotBytes + TableLayout.SLOT_DATA,
            dst, offset, client.dim);
    }

    /**
     * The lookup's buffer: row {@code i}'s floats start at {@link #dataOffset(int)} (read-only use; valid until the
     * next execute).
     */
    public MemorySegment memory() {
        return memory;
    }

    /** Offset of row {@code i}'s first float in {@link #memory()}. */
    public long dataOffset(int i) {
        checkIndex(i);
        return (long) i * slotBytes + TableLayout.SLOT_DATA;
    }

    private void checkIndex(int i) {
        if (i < 0 || i >= count) {
            throw new IndexOutOfBoundsException("index " + i + " outside 0.." + (count - 1));
        }
    }

    private void checkOk(int i) {
        checkIndex(i);
        if (status[i] != OK) {
            throw new IllegalStateException(status[i] == PENDING ? "row " + i + " was not looked up"
                : "row " + i + " failed: " + errors[i]);
        }
    }

    /** Empties the lookup for reuse. */
    public void clear() {
        count = 0;
        failed = 0;
        executed = false;
    }

    /** Frees its buffer and batch. */
    @Override
    public void close() {
        if (!closed) {
            closed = true;
            batch.close();
            buffer.close();
        }
    }
}
