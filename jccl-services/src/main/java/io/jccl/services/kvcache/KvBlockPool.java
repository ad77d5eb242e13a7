package io.jccl.services.kvcache;

import io.jccl.services.transfer.LocalSegment;
import io.jccl.services.transfer.TransferEngine;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.BitSet;

/**
 * A pool of KV blocks in one segment registered with the transfer engine (vLLM's block pool over its KV tensors):
 * blocks are allocated and freed by index, a request's blocks are listed in its block table ({@code int[]}).
 * Segment layout: a 64-byte header (the layout and block count, which the sender READs to check it matches), a table
 * area of one {@code int} per block (the decode side's block tables, written by the sender), then the blocks from a
 * 4096-byte boundary. Thread-safe.
 *
 * <p>On the prefill side the application allocates blocks, fills them and hands their table to
 * {@link KvCacheSender#submit}. A {@link KvCacheReceiver}'s pool is allocated by its sender, one-sided: there
 * {@link #allocate} is refused, and blocks come back through {@link KvCacheReceiver#release}.
 */
public final class KvBlockPool implements AutoCloseable {
    /** Magic number at offset 0 of the header ("JKVP"). */
    static final int MAGIC = 0x4A4B5650;
    static final int HEADER_BYTES = 64;
    static final long TABLE_OFFSET = HEADER_BYTES;
    /** Header field a receiver's sender WRITEs its rank into when it opens the receiver (-1 before). */
    static final long SENDER_RANK_OFFSET = 28;

    private final LocalSegment segment;
    private final KvCacheLayout layout;
    private final int blockCount;
    private final long blocksOffset;
    private final boolean remotelyAllocated;
    private final BitSet used;
    private int usedCount;

    private KvBlockPool(LocalSegment segment, KvCacheLayout layout, int blockCount, boolean remotelyAllocated) {
        this.segment = segment;
        this.layout = layout;
        this.blockCount = blockCount;
        this.blocksOffset = blocksOffset(blockCount);
        this.remotelyAllocated = remotelyAllocated;
        this.used = new BitSet(blockCount);
        MemorySegment m = segment.memory();
        m.set(ValueLayout.JAVA_INT, 0, MAGIC);
        m.set(ValueLayout.JAVA_INT, 4, layout.tokensPerBlock());
        m.set(ValueLayout.JAVA_INT, 8, layout.layers());
        m.set(ValueLayout.JAVA_INT, 12, layout.kvHeads());
        m.set(ValueLayout.JAVA_INT, 16, layout.headDim());
        m.set(ValueLayout.JAVA_INT, 20, layout.elementBytes());
        m.set(ValueLayout.JAVA_INT, 24, blockCount);
        m.set(ValueLayout.JAVA_INT, SENDER_RANK_OFFSET, -1);
    }

    /**
     * Allocates and registers a pool of {@code blockCount} blocks of {@code layout} as segment {@code name} of
     * {@code engine}.
     *
     * @throws IllegalArgumentException when {@code blockCount} is below 1 or the pool exceeds 2^40 bytes
     * @throws io.jccl.services.transfer.TransferException when the name is taken
     */
    public static KvBlockPool register(TransferEngine engine, String name, KvCacheLayout layout, int blockCount) {
        return register(engine, name, layout, blockCount, false);
    }

    static KvBlockPool register(TransferEngine engine, String name, KvCacheLayout layout, int blockCount,
                                boolean remotelyAllocated) {
        if (blockCount < 1 || blockCount > (1 << 24)) {
            throw new IllegalArgumentException("pool '" + name + "': " + blockCount + " blocks outside 1..2^24");
        }
        long bytes = blocksOffset(blockCount) + (long) blockCount * layout.blockBytes();
        if (bytes > (1L << 40)) {
            throw new IllegalArgumentException("pool '" + name + "' of " + bytes + " B exceeds 2^40 B");
        }
        return new KvBlockPool(engine.registerSegment(name, bytes), layout, blockCount, remotelyAllocated);
    }

    static long blocksOffset(int blockCount) {
        return (TABLE_OFFSET + 4L * blockCount + 4095) & ~4095L;
    }

    /** The layout of its blocks. */
    public KvCacheLayout layout() {
        return layout;
    }

    /** Number of blocks. */
    public int blockCount() {
        return blockCount;
    }

    /** Blocks not allocated now. */
    public synchronized int freeCount() {
        return blockCount - usedCount;
    }

    /** The registered segment (its name is what peers open). */
    public LocalSegment segment() {
        return segment;
    }

    /** Offset of block {@code block} in the segment. */
    public long blockOffset(int block) {
        checkIndex(block);
        return blocksOffset + (long) block * layout.blockBytes();
    }

    /** Block {@code block}'s memory ({@link KvCacheLayout#blockBytes()} bytes). */
    public MemorySegment block(int block) {
        return segment.memory().asSlice(blockOffset(block), layout.blockBytes());
    }

    private void checkIndex(int block) {
        if (block < 0 || block >= blockCount) {
            throw new KvCacheException("block index " + block + " outside 0.." + (blockCount - 1) + " of pool '"
                + segment.name() + "'");
        }
    }

    /**
     * Allocates {@code count} blocks (lowest free indices first, so a fresh pool gives consecutive blocks that move in
     * one transfer) into {@code table[0..count)}; all or none.
     *
     * @throws KvCacheException when fewer than {@code count} blocks are free
     * @throws IllegalStateException on a receiver's pool (its sender allocates it)
     */
    public synchronized void allocate(int count, int[] table) {
        if (remotelyAllocated) {
            throw new IllegalStateException("pool '" + segment.name() + "' is a receiver's: its sender allocates its "
                + "blocks; release requests with KvCacheReceiver.release");
        }
        if (count < 1 || count > table.length) {
            throw new IllegalArgumentException("count " + count + " outside 1.." + table.length
                + " (the table's length)");
        }
        if (blockCount - usedCount < count) {
            throw new KvCacheException("pool '" + segment.name() + "' has " + (blockCount - usedCount) + " free blocks"
                + " of " + blockCount + ", " + count + " asked for");
        }
        int b = -1;
        for (int i = 0; i < count; i++) {
            b = used.nextClearBit(b + 1);
            used.set(b);
            table[i] = b;
        }
        usedCount += count;
    }

    /**
     * Frees {@code table[0..count)}: all or none.
     *
     * @throws KvCacheException when an index is out of range, named twice, or not allocated (a double free)
     */
    public synchronized void free(int[] table, int count) {
        claimOrFree(table, count, false, "free");
    }

    /** Marks {@code table[0..count)} used (a receiver's arriving request): all or none. */
    synchronized void claim(int[] table, int count) {
        claimOrFree(table, count, true, "claim");
    }

    /** Frees {@code table[0..count)} of a receiver's pool (its request was released). */
    synchronized void release(int[] table, int count) {
        claimOrFree(table, count, false, "free");
    }

    private void claimOrFree(int[] table, int count, boolean claim, String what) {
        if (count < 0 || count > table.length) {
            throw new IllegalArgumentException("count " + count + " outside 0.." + table.length);
        }
        for (int i = 0; i < count; i++) {
            int b = table[i];
            if (b < 0 || b >= blockCount) {
                throw new KvCacheException("cannot " + what + " block table entry " + i + " = " + b + ": outside 0.."
                    + (blockCount - 1) + " of pool '" + segment.name() + "'");
            }
        }
        // Flip bit by bit; a bit already flipped is a block in use / not allocated, or one named twice: undo, fail.
        for (int i = 0; i < count; i++) {
            int b = table[i];
            if (used.get(b) == claim) {
                int twice = -1;
                for (int j = 0; j < i; j++) {
                    twice = table[j] == b ? j : twice;
                }
                for (int j = 0; j < i; j++) {
                    used.set(table[j], !claim);
                }
                throw new KvCacheException("cannot " + what + " block " + b + " of pool '" + segment.name() + "': "
                    + (twice >= 0 ? "named twice in the table (entries " + twice + " and " + i + ")"
                    : claim ? "it is in use" : "it is not allocated (a double free)"));
            }
            used.set(b, claim);
        }
        usedCount += claim ? count : -count;
    }

    /** Unregisters the segment (peers' transfers to it fail from then on) and frees its memory. */
    @Override
    public void close() {
        segment.close();
    }

    @Override
    public String toString() {
        return "KV pool '" + segment.name() + "' of " + blockCount + " blocks of " + layout;
    }
}
