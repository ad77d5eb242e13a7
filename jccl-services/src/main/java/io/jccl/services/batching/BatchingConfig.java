package io.jccl.services.batching;

import io.jccl.common.Config;

import java.util.Arrays;

/**
 * How an {@link InferenceServer} batches, with Triton's dynamic batcher's names and meaning
 * ({@code max_batch_size}, {@code preferred_batch_size}, {@code max_queue_delay_microseconds},
 * {@code default_timeout_microseconds} with {@code timeout_action: REJECT}), plus the ring's shape. Immutable; the
 * {@code with…} methods return checked copies.
 */
public final class BatchingConfig {
    /** Largest request or result row (bytes): a ring slot is fixed-size registered memory. */
    public static final int MAX_ROW_BYTES = 1 << 20;
    /** Most producers (lanes) one server accepts. */
    public static final int MAX_PRODUCERS = 4096;
    /** Most slots per producer (the immediate carries the slot in 16 bits). */
    public static final int MAX_SLOTS = 1 << 15;

    private final int inputBytes;
    private final int outputBytes;
    private final int maxBatchSize;
    private final int[] preferredBatchSizes;
    private final long maxQueueDelayNs;
    private final long defaultTimeoutNs;
    private final int slotsPerProducer;
    private final int maxProducers;
    private final String device;

    private BatchingConfig(int inputBytes, int outputBytes, int maxBatchSize, int[] preferredBatchSizes,
                           long maxQueueDelayNs, long defaultTimeoutNs, int slotsPerProducer, int maxProducers,
                           String device) {
        check(inputBytes >= 1 && inputBytes <= MAX_ROW_BYTES, "inputBytes " + inputBytes + " outside 1.."
            + MAX_ROW_BYTES);
        check(outputBytes >= 1 && outputBytes <= MAX_ROW_BYTES, "outputBytes " + outputBytes + " outside 1.."
            + MAX_ROW_BYTES);
        check(maxBatchSize >= 1 && maxBatchSize <= 65536, "maxBatchSize " + maxBatchSize + " outside 1..65536");
        int[] preferred = preferredBatchSizes.clone();
        Arrays.sort(preferred);
        for (int i = 0; i < preferred.length; i++) {
            check(preferred[i] >= 1 && preferred[i] <= maxBatchSize, "preferred batch size " + preferred[i]
                + " outside 1..maxBatchSize (" + maxBatchSize + ")");
            check(i == 0 || preferred[i] != preferred[i - 1], "preferred batch size " + preferred[i] + " twice");
        }
        check(maxQueueDelayNs >= 0, "maxQueueDelayNs " + maxQueueDelayNs + " < 0");
        check(defaultTimeoutNs >= 0, "defaultTimeoutNs " + defaultTimeoutNs + " < 0");
        check(slotsPerProducer >= 1 && slotsPerProducer <= MAX_SLOTS, "slotsPerProducer " + slotsPerProducer
            + " outside 1.." + MAX_SLOTS);
        check(maxProducers >= 1 && maxProducers <= MAX_PRODUCERS, "maxProducers " + maxProducers + " outside 1.."
            + MAX_PRODUCERS);
        this.inputBytes = inputBytes;
        this.outputBytes = outputBytes;
        this.maxBatchSize = maxBatchSize;
        this.preferredBatchSizes = preferred;
        this.maxQueueDelayNs = maxQueueDelayNs;
        this.defaultTimeoutNs = defaultTimeoutNs;
        this.slotsPerProducer = slotsPerProducer;
        this.maxProducers = maxProducers;
        this.device = device;
    }

    private static void check(boolean ok, String message) {
        if (!ok) {
            throw new IllegalArgumentException(message);
        }
    }

    /**
     * A configuration for rows of {@code inputBytes} in and {@code outputBytes} out: max batch size 8, no preferred
     * sizes, no queue delay (Triton's defaults: a batch goes as soon as the batcher looks), no default timeout, 16
     * slots per producer, up to 64 producers, the device {@code JCCL_BATCHING_DEVICE} names, else the first of
     * {@code JCCL_TRANSPORT}, else the first default device.
     */
    public static BatchingConfig of(int inputBytes, int outputBytes) {
        String device = Config.value("JCCL_BATCHING_DEVICE", null);
        return new BatchingConfig(inputBytes, outputBytes, 8, new int[0], 0, 0, 16, 64, device);
    }

    /** A copy with Triton's {@code max_batch_size}. */
    public BatchingConfig withMaxBatchSize(int size) {
        return new BatchingConfig(inputBytes, outputBytes, size, preferredBatchSizes, maxQueueDelayNs,
            defaultTimeoutNs, slotsPerProducer, maxProducers, device);
    }

    /** A copy with Triton's {@code preferred_batch_size} list (each in 1..max batch size). */
    public BatchingConfig withPreferredBatchSizes(int... sizes) {
        return new BatchingConfig(inputBytes, outputBytes, maxBatchSize, sizes, maxQueueDelayNs, defaultTimeoutNs,
            slotsPerProducer, maxProducers, device);
    }

    /** A copy with Triton's {@code max_queue_delay_microseconds}, in nanoseconds (0: no waiting for more). */
    public BatchingConfig withMaxQueueDelayNs(long ns) {
        return new BatchingConfig(inputBytes, outputBytes, maxBatchSize, preferredBatchSizes, ns, defaultTimeoutNs,
            slotsPerProducer, maxProducers, device);
    }

    /** A copy whose requests without their own timeout are rejected after waiting {@code ns} (0: never). */
    public BatchingConfig withDefaultTimeoutNs(long ns) {
        return new BatchingConfig(inputBytes, outputBytes, maxBatchSize, preferredBatchSizes, maxQueueDelayNs, ns,
            slotsPerProducer, maxProducers, device);
    }

    /** A copy with {@code slots} ring slots per producer: requests one producer may have in flight. */
    public BatchingConfig withSlotsPerProducer(int slots) {
        return new BatchingConfig(inputBytes, outputBytes, maxBatchSize, preferredBatchSizes, maxQueueDelayNs,
            defaultTimeoutNs, slots, maxProducers, device);
    }

    /** A copy accepting at most {@code producers} producers. */
    public BatchingConfig withMaxProducers(int producers) {
        return new BatchingConfig(inputBytes, outputBytes, maxBatchSize, preferredBatchSizes, maxQueueDelayNs,
            defaultTimeoutNs, slotsPerProducer, producers, device);
    }

    /** A copy serving on {@code name} (a verbs device; producers on other hosts need one that reaches them). */
    public BatchingConfig withDevice(String name) {
        return new BatchingConfig(inputBytes, outputBytes, maxBatchSize, preferredBatchSizes, maxQueueDelayNs,
            defaultTimeoutNs, slotsPerProducer, maxProducers, name);
    }

    /** Bytes of one request row. */
    public int inputBytes() {
        return inputBytes;
    }

    /** Bytes of one result row. */
    public int outputBytes() {
        return outputBytes;
    }

    /** Largest batch the model is given. */
    public int maxBatchSize() {
        return maxBatchSize;
    }

    /** Preferred batch sizes, ascending (a copy). */
    public int[] preferredBatchSizes() {
        return preferredBatchSizes.clone();
    }

    /** Longest the oldest request waits for a batch to fill, in nanoseconds. */
    public long maxQueueDelayNs() {
        return maxQueueDelayNs;
    }

    /** Queue timeout of requests that carry none (0: none). */
    public long defaultTimeoutNs() {
        return defaultTimeoutNs;
    }

    /** Ring slots per producer. */
    public int slotsPerProducer() {
        return slotsPerProducer;
    }

    /** Most producers. */
    public int maxProducers() {
        return maxProducers;
    }

    /** The device name set, or {@code null} for the default. */
    public String device() {
        return device;
    }

    @Override
    public String toString() {
        return "max batch " + maxBatchSize + ", preferred " + Arrays.toString(preferredBatchSizes) + ", max queue delay "
            + maxQueueDelayNs / 1000 + " us, default timeout " + (defaultTimeoutNs == 0 ? "none"
            : defaultTimeoutNs / 1000 + " us") + ", rows " + inputBytes + " B -> " + outputBytes + " B, "
            + slotsPerProducer + " slots x " + maxProducers + " producers";
    }
}
