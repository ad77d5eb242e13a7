package io.jccl.services.transfer;

import io.jccl.common.Config;

/**
 * The transfer engine's own settings, beside the job's {@link io.jccl.collectives.CommunicatorOptions} (store,
 * timeout, transports, secret). Every rank must use the same values (checked when the engines join).
 *
 * @param queuePairsPerPeer queue pairs per peer a batch's slices are spread over (JCCL_TRANSFER_QPS, 1 to 16)
 * @param sliceBytes largest piece one work request moves (JCCL_TRANSFER_SLICE_BYTES, 4 KiB to 1 GiB)
 * @param maxBatchTransfers most transfers one batch may hold (JCCL_TRANSFER_BATCH_MAX, 1 to 2^20)
 */
public record TransferSettings(int queuePairsPerPeer, int sliceBytes, int maxBatchTransfers) {
    /** Default queue pairs per peer. */
    public static final int QPS_DEFAULT = 2;
    /** Default slice: 1 MiB (Mooncake's default slice size is 64 KiB over RDMA NICs; memory copies like larger). */
    public static final int SLICE_BYTES_DEFAULT = 1 << 20;
    /** Default batch capacity limit. */
    public static final int BATCH_MAX_DEFAULT = 1 << 16;
    /** Hard limit of a batch's transfers: the work-request id has 22 bits for the transfer index. */
    public static final int BATCH_LIMIT = 1 << 20;

    /** Checks the ranges. */
    public TransferSettings {
        if (queuePairsPerPeer < 1 || queuePairsPerPeer > 16) {
            throw new IllegalArgumentException("JCCL_TRANSFER_QPS " + queuePairsPerPeer + " outside 1..16");
        }
        if (sliceBytes < 4096 || sliceBytes > (1 << 30)) {
            throw new IllegalArgumentException("JCCL_TRANSFER_SLICE_BYTES " + sliceBytes + " outside 4096..2^30");
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

    /** What every rank must agree on, as text (hashed into the join record). */
    String fingerprint() {
        return "transfer qps=" + queuePairsPerPeer + " slice=" + sliceBytes;
    }
}
