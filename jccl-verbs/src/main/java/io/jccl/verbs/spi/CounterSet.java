package io.jccl.verbs.spi;

import io.jccl.verbs.Counter;
import io.jccl.verbs.CounterShare;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;
import java.util.ArrayDeque;
import java.util.EnumMap;
import java.util.Map;

/**
 * The {@link Counter}s of one context: lock-free adds from any thread, snapshots for tools.
 *
 * <p>The values live in one block of memory, not on the Java heap, so that another process can read them while this
 * one runs ({@code jccl devinfo -v --pid PID}), the way {@code AeronStat} reads a media driver's counters: a context
 * normally gets its counters from {@link CounterFile#create}, a file in {@code /dev/shm} mapped into this process.
 * Block 0 takes atomic adds from any thread; every {@link Local} owns a block of its own (one cache-line-aligned
 * block per queue pair, so no two writers share a line) that a reader adds up with the others. Freed blocks are
 * folded into block 0 and zeroed.
 */
public final class CounterSet implements AutoCloseable {
    static final int COUNTERS = Counter.values().length;
    /** One block: every counter once, rounded up to whole cache lines. */
    static final long BLOCK_BYTES = (COUNTERS * 8L + 63) & ~63L;
    private static final VarHandle LONG = ValueLayout.JAVA_LONG.varHandle();

    private final MemorySegment blocks;
    private final int capacity;
    private final ArrayDeque<Integer> freeBlocks = new ArrayDeque<>();
    private final CounterFile file;
    private int nextBlock = 1;

    /** Counters visible to this process only (tests, and contexts whose counter file could not be created). */
    public CounterSet() {
        this(Arena.ofAuto().allocate(BLOCK_BYTES * 64, 64), null);
    }

    /**
     * Counters kept in {@code blocks} (block 0 shared, the rest for {@link Local}s); {@code file}, when not null, is
     * deleted by {@link #close()}.
     */
    CounterSet(MemorySegment blocks, CounterFile file) {
        this.blocks = blocks;
        this.capacity = (int) (blocks.byteSize() / BLOCK_BYTES);
        this.file = file;
    }

    /** The counters of a context of {@code deviceName}: in a counter file when possible, else in this process only. */
    public static CounterSet forContext(String deviceName) {
        CounterSet published = CounterFile.create(deviceName);
        return published != null ? published : new CounterSet();
    }

    /** Where other processes can read these counters, or null when only this process can. */
    public String fileName() {
        return file == null ? null : file.path().toString();
    }

    /** Adds {@code delta} to a counter. */
    public void add(Counter counter, long delta) {
        LONG.getAndAdd(blocks, (long) counter.ordinal() * 8, delta);
    }

    /** Adds one to a counter. */
    public void increment(Counter counter) {
        add(counter, 1);
    }

    /** The current value of a counter. */
    public synchronized long get(Counter counter) {
        return sum(blocks, nextBlock, counter.ordinal());
    }

    /** A snapshot of every counter. */
    public synchronized Map<Counter, Long> snapshot() {
        Map<Counter, Long> snapshot = new EnumMap<>(Counter.class);
        for (Counter counter : Counter.values()) {
            snapshot.put(counter, get(counter));
        }
        return snapshot;
    }

    /** Counter {@code index} summed over the first {@code blockCount} blocks (opaque reads: writers never lock). */
    static long sum(MemorySegment blocks, int blockCount, int index) {
        long sum = 0;
        for (int b = 0; b < blockCount; b++) {
            sum += (long) LONG.getOpaque(blocks, b * BLOCK_BYTES + index * 8L);
        }
        return sum;
    }

    /**
     * A share of these counters for one writer at a time (for example a queue pair whose counting all happens
     * under its lock): plain adds, no atomic instruction, so no store-buffer drain on a hot path. Reads of the set
     * include it; {@link Local#close()} folds it into the set. When every block is taken, the share adds atomically
     * to block 0 instead (correct, a little slower).
     */
    public synchronized Local newLocal() {
        int block;
        if (!freeBlocks.isEmpty()) {
            block = freeBlocks.pop();
        } else if (nextBlock < capacity) {
            block = nextBlock++;
            if (file != null) {
                file.publishBlockCount(nextBlock);
            }
        } else {
            block = 0;
        }
        return new Local(this, block);
    }

    private synchronized void fold(Local local) {
        if (local.block == 0) {
            return;
        }
        long base = local.block * BLOCK_BYTES;
        for (int c = 0; c < COUNTERS; c++) {
            long value = (long) LONG.getOpaque(blocks, base + c * 8L);
            LONG.getAndAdd(blocks, (long) c * 8, value);
            LONG.setOpaque(blocks, base + c * 8L, 0L);
        }
        freeBlocks.push(local.block);
    }

    /** Deletes the counter file (the mapping stays valid for late writers until it is garbage). */
    @Override
    public void close() {
        if (file != null) {
            file.delete();
        }
    }

    /**
     * See {@link #newLocal()}. Its writers must be ordered (one lock, one thread): updates are plain read, opaque
     * write; readers of the set see them with opaque reads.
     */
    public static final class Local implements CounterShare {
        private final CounterSet owner;
        private final MemorySegment blocks;
        private final long base;
        private final int block;
        private boolean closed;

        private Local(CounterSet owner, int block) {
            this.owner = owner;
            this.blocks = owner.blocks;
            this.block = block;
            this.base = block * BLOCK_BYTES;
        }

        /** Adds {@code delta} to a counter. */
        @Override
        public void add(Counter counter, long delta) {
            if (closed) {
                return;
            }
            long offset = base + counter.ordinal() * 8L;
            if (block == 0) {
                LONG.getAndAdd(blocks, offset, delta);
            } else {
                LONG.setOpaque(blocks, offset, (long) LONG.get(blocks, offset) + delta);
            }
        }

        /** Adds one to a counter. */
        public void increment(Counter counter) {
            add(counter, 1);
        }

        /** Folds this share into the set and detaches it (once; later adds are not counted). */
        @Override
        public void close() {
            if (!closed) {
                closed = true;
                owner.fold(this);
            }
        }
    }
}
