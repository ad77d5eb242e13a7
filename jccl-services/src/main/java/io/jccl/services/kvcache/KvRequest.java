package io.jccl.services.kvcache;

import java.lang.foreign.MemorySegment;
import java.util.Arrays;

/**
 * A request whose KV blocks arrived whole in a {@link KvCacheReceiver}'s pool: its id, the rank that sent it, its
 * token count and its block table in the receiver's pool. Valid until {@link KvCacheReceiver#release} returns its
 * blocks.
 */
public final class KvRequest {
    private final long requestId;
    private final int senderRank;
    private final int tokens;
    private final int[] blocks;
    private final KvBlockPool pool;

    KvRequest(long requestId, int senderRank, int tokens, int[] blocks, KvBlockPool pool) {
        this.requestId = requestId;
        this.senderRank = senderRank;
        this.tokens = tokens;
        this.blocks = blocks;
        this.pool = pool;
    }

    /** The request's id, as the sender gave it. */
    public long requestId() {
        return requestId;
    }

    /** The rank whose {@link KvCacheSender} sent it. */
    public int senderRank() {
        return senderRank;
    }

    /** Tokens whose K and V it holds (the last block may be partly filled). */
    public int tokens() {
        return tokens;
    }

    /** Number of blocks. */
    public int blockCount() {
        return blocks.length;
    }

    /** The block table: index {@code i} of the request → block index in the receiver's pool (a copy). */
    public int[] blockTable() {
        return blocks.clone();
    }

    /** Block index in the receiver's pool of the request's block {@code i}. */
    public int blockIndex(int i) {
        return blocks[i];
    }

    /** Memory of the request's block {@code i}. */
    public MemorySegment block(int i) {
        return pool.block(blocks[i]);
    }

    int[] blocks() {
        return blocks;
    }

    @Override
    public String toString() {
        return "request " + requestId + " from rank " + senderRank + ": " + tokens + " tokens in blocks "
            + Arrays.toString(blocks);
    }
}
