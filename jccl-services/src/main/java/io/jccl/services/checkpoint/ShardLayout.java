package io.jccl.services.checkpoint;

/**
 * How a checkpoint's state is cut into shards: the state is one flat array of {@code totalBytes / elementBytes}
 * elements (a model's parameters as floats, say), split evenly over {@code shards} ranks in order, the first
 * {@code elements % shards} shards holding one element more. Shard {@code r} is the byte range
 * [{@link #offset(int) offset(r)}, offset(r) + {@link #length(int) length(r)}) of that array. Because a layout is a
 * pure function of (total, element size, shards), a checkpoint written by 4 ranks can be read back by 2 (or 3):
 * each new shard is a byte range of the same flat array.
 *
 * @param totalBytes bytes of the whole state (at least 1, a multiple of {@code elementBytes})
 * @param elementBytes bytes of one element (1 to 64): shard boundaries never split an element
 * @param shards number of shards (ranks), 1 to 65536
 */
public record ShardLayout(long totalBytes, int elementBytes, int shards) {
    /** Most shards a layout may have. */
    public static final int MAX_SHARDS = 1 << 16;

    /** Checks the ranges. */
    public ShardLayout {
        if (elementBytes < 1 || elementBytes > 64) {
            throw new IllegalArgumentException("element size " + elementBytes + " B outside 1..64");
        }
        if (totalBytes < 1 || totalBytes % elementBytes != 0) {
            throw new IllegalArgumentException("state of " + totalBytes + " B is not a positive multiple of the "
                + "element size " + elementBytes + " B");
        }
        if (shards < 1 || shards > MAX_SHARDS) {
            throw new IllegalArgumentException("shard count " + shards + " outside 1.." + MAX_SHARDS);
        }
    }

    /** Number of elements of the whole state. */
    public long elements() {
        return totalBytes / elementBytes;
    }

    /** First byte of shard {@code shard} in the flat state. */
    public long offset(int shard) {
        checkShard(shard);
        long n = elements();
        long base = n / shards;
        long extra = n % shards;
        return (shard * base + Math.min(shard, extra)) * elementBytes;
    }

    /** Bytes of shard {@code shard} (0 when there are more shards than elements). */
    public long length(int shard) {
        checkShard(shard);
        long n = elements();
        return (n / shards + (shard < n % shards ? 1 : 0)) * elementBytes;
    }

    /** This layout over {@code n} shards: the same state, re-sharded. */
    public ShardLayout withShards(int n) {
        return new ShardLayout(totalBytes, elementBytes, n);
    }

    private void checkShard(int shard) {
        if (shard < 0 || shard >= shards) {
            throw new IndexOutOfBoundsException("shard " + shard + " outside 0.." + (shards - 1));
        }
    }
}
