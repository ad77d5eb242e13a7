package io.jccl.services.kvcache;

/**
 * The paged KV-cache layout both sides agree on (vLLM's {@code block_size}, {@code num_layers},
 * {@code num_kv_heads}, {@code head_size} and dtype). A block holds K and V of {@code tokensPerBlock} tokens for every
 * layer, block-major: {@code [layer][K|V][token][head][dim]}, so one block is one contiguous range (one WRITE) and
 * consecutive blocks are one range too. vLLM keeps a tensor per layer, {@code [2, num_blocks, block_size, heads,
 * head_size]}, where a block is {@code 2 × layers} ranges; this layout is the one LMCache and Mooncake move as a
 * chunk.
 *
 * @param tokensPerBlock tokens per block (vLLM's default 16)
 * @param layers transformer layers
 * @param kvHeads key/value heads
 * @param headDim elements per head
 * @param elementBytes bytes per element (2 for fp16/bf16, 1 for fp8, 4 for fp32)
 */
public record KvCacheLayout(int tokensPerBlock, int layers, int kvHeads, int headDim, int elementBytes) {
    /** Checks every dimension and that a block fits in 2^31 - 1 bytes. */
    public KvCacheLayout {
        check("tokensPerBlock", tokensPerBlock);
        check("layers", layers);
        check("kvHeads", kvHeads);
        check("headDim", headDim);
        if (elementBytes != 1 && elementBytes != 2 && elementBytes != 4 && elementBytes != 8) {
            throw new IllegalArgumentException("elementBytes " + elementBytes + " must be 1, 2, 4 or 8");
        }
        long bytes = 2L * tokensPerBlock * layers * kvHeads * headDim * elementBytes;
        if (bytes > Integer.MAX_VALUE) {
            throw new IllegalArgumentException("a block of " + bytes + " B exceeds 2^31 - 1 B: fewer tokens per block");
        }
    }

    private static void check(String name, int value) {
        if (value < 1 || value > (1 << 20)) {
            throw new IllegalArgumentException(name + " " + value + " outside 1..2^20");
        }
    }

    /** Bytes of one block: 2 (K and V) × tokens × layers × heads × head dim × element size. */
    public int blockBytes() {
        return 2 * tokensPerBlock * layers * kvHeads * headDim * elementBytes;
    }

    /** Bytes of one token's K (or V) for one layer: heads × head dim × element size. */
    public int tokenBytes() {
        return kvHeads * headDim * elementBytes;
    }

    /**
     * Offset within a block of {@code token}'s K ({@code value} false) or V ({@code value} true) of {@code layer}:
     * {@link #tokenBytes()} bytes from there.
     */
    public long offset(int layer, boolean value, int token) {
        if (layer < 0 || layer >= layers || token < 0 || token >= tokensPerBlock) {
            throw new IndexOutOfBoundsException("layer " + layer + " / token " + token + " outside " + this);
        }
        return ((long) (layer * 2 + (value ? 1 : 0)) * tokensPerBlock + token) * tokenBytes();
    }

    @Override
    public String toString() {
        return tokensPerBlock + " tokens x " + layers + " layers x " + kvHeads + " heads x " + headDim + " x "
            + elementBytes + " B (" + blockBytes() + " B per block)";
    }
}
