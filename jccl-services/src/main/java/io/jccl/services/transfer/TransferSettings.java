package io.jccl.services.transfer;

import io.jccl.common.Config;
import io.jccl.verbs.LinkLayer;

/**
 * The transfer engine's own settings, beside the job's {@link io.jccl.collectives.CommunicatorOptions} (store,
 * timeout, transports, secret). They shape what this rank posts only (the peer answers whatever it is sent), so
 * ranks may differ.
 *
 * @param queuePairsPerPeer queue pairs per peer a batch's slices are spread over (JCCL_TRANSFER_QPS, 1 to 16)
 * @param sliceBytes largest piece one work request moves (JCCL_TRANSFER_SLICE_BYTES, 4 KiB to 1 GiB), or 0: by
 *     the device's link layer ({@link #sliceBytesFor})
 * @param maxBatchTransfers most transfers one batch may hold (JCCL_TRANSFER_BATCH_MAX, 1 to 2^20)
 */
public record TransferSettings(int queuePairsPerPeer, int sliceBytes, int maxBatchTransfers) {
    /** Default queue pairs per peer. */
    public static final int QPS_DEFAULT = 2;
    /** Default slice setting: 0, by link layer ({@link #sliceBytesFor}). */
    public static final int SLICE_BYTES_DEFAULT = 0;
    /**
     * Slice over a network device: 1 MiB, so that a large transfer spreads over the queue pairs (connections) and
     * their links (Mooncake slices at 64 KiB over RDMA NICs).
     */
    public static final int NETWORK_SLICE_BYTES = 1 << 20;
    /**
     * Slice over a memory device (shm0): 16 MiB. There every slice is a copy by the posting thread, so spreading
     * buys nothing and each slice costs: 1 x 64 MiB per batch on shm0 went 0.55-0.63x raw verbs with 1 MiB slices,
     * 0.66 with 2 MiB, 0.90-1.08 with 4 MiB, 1.08 with 16 MiB (TransferBench, docs/services.md).
     */
    public static final int MEMORY_SLICE_BYTES = 16 << 20;
    /** Default batch capacity limit. */
    public static final int BATCH_MAX_DEFAULT = 1 << 16;
    /** Hard limit of a batch's transfers: the work-request id has 22 bits for the transfer index. */
    public static final int BATCH_LIMIT = 1 << 20;

    /** Checks the ranges. */
    public TransferSettings {
        if (queuePairsPerPeer < 1 || queuePairsPerPeer > 16) {
            throw new IllegalArgumentException("JCCL_TRANSFER_QPS " + queuePairsPerPeer + " outside 1..16");
        }
        if (sliceBytes != 0 && (sliceBytes < 4096 || sliceBytes > (1 << 30))) {
            throw new IllegalArgumentException("JCCL_TRANSFER_SLICE_BYTES " + sliceBytes + " outside 4096..2^30 (or 0:"
                + " by link layer)");
        }
        if (maxBatchTransfers < 1 || maxBatchTransfers > BATCH_LIMIT) {
            throw new IllegalArgumentException("JCCL_TRANSFER_BATCH_MAX " + maxBatchTransfers + " outside 1.."
                + BATCH_LIMIT);
        }
    }

    /** The defaults. */
    public static TransferSettings defaults() {
        return new TransferSettings(QPS_DEFAULT, SLICE_BYTES_DEFAULT, BATCH_MAX_DEFAULT);
    }

    /** The defaults overridden by JCCL_TRANSFER_QPS, JCCL_TRANSFER_SLICE_BYTES, JCCL_TRANSFER_BATCH_MAX. */
    public static TransferSettings fromEnvironment() {
        return new TransferSettings((int) Config.longValue("JCCL_TRANSFER_QPS", QPS_DEFAULT),
            (int) Config.longValue("JCCL_TRANSFER_SLICE_BYTES", SLICE_BYTES_DEFAULT),
            (int) Config.longValue("JCCL_TRANSFER_BATCH_MAX", BATCH_MAX_DEFAULT));
    }

    /** These settings with {@code n} queue pairs per peer. */
    public TransferSettings withQueuePairsPerPeer(int n) {
        return new TransferSettings(n, sliceBytes, maxBatchTransfers);
    }

    /** These settings with slices of {@code bytes}. */
    public TransferSettings withSliceBytes(int bytes) {
        return new TransferSettings(queuePairsPerPeer, bytes, maxBatchTransfers);
    }

    /** These settings with batches of at most {@code n} transfers. */
    public TransferSettings withMaxBatchTransfers(int n) {
        return new TransferSettings(queuePairsPerPeer, sliceBytes, n);
    }

    /** The slice for a device attached to {@code linkLayer}: the setting, or by link layer when it is 0. */
    public int sliceBytesFor(LinkLayer linkLayer) {
        return sliceBytes != 0 ? sliceBytes : linkLayer.isNetwork() ? NETWORK_SLICE_BYTES : MEMORY_SLICE_BYTES;
    }

    /** What every rank must agree on, as text (hashed into the join record): the protocol's version. */
    static String fingerprint() {
        return "transfer v1";
    }
}
