package io.jccl.services.batching;

/**
 * What an {@link InferenceServer} has done so far (R5.2: batch sizes, close reasons and queue delays are observable).
 *
 * @param requests requests answered with {@link InferenceStatus#OK}
 * @param batches batches run
 * @param timeouts requests rejected with {@link InferenceStatus#TIMEOUT}
 * @param malformed requests rejected as {@link InferenceStatus#MALFORMED} or {@link InferenceStatus#TOO_LARGE}, and
 *                  signals naming no slot
 * @param modelErrors requests failed with {@link InferenceStatus#MODEL_ERROR}
 * @param batchesBySize index {@code s}: batches of size {@code s}
 * @param batchesByReason index {@link CloseReason#ordinal()}: batches closed for that reason
 * @param queueDelayLog2Us index {@code k}: requests that waited {@code [2^(k-1), 2^k)} microseconds in the queue
 *                         (index 0: under 1 µs)
 * @param producers producers connected so far
 * @param queued requests waiting for a batch when the snapshot was taken (the queue's depth)
 */
public record BatchingStats(long requests, long batches, long timeouts, long malformed, long modelErrors,
                            long[] batchesBySize, long[] batchesByReason, long[] queueDelayLog2Us, int producers,
                            int queued) {
    /** Mean batch size (0 before the first batch). */
    public double meanBatchSize() {
        long n = 0;
        long sum = 0;
        for (int s = 0; s < batchesBySize.length; s++) {
            n += batchesBySize[s];
            sum += (long) s * batchesBySize[s];
        }
        return n == 0 ? 0 : (double) sum / n;
    }

    @Override
    public String toString() {
        StringBuilder sb = new StringBuilder();
        sb.append(requests).append(" requests in ").append(batches).append(" batches (mean size ")
            .append(String.format("%.2f", meanBatchSize())).append("), rejected: ").append(timeouts)
            .append(" timed out, ").append(malformed).append(" malformed, ").append(modelErrors)
            .append(" model errors, ").append(queued).append(" queued; closed by");
        for (CloseReason r : CloseReason.values()) {
            if (batchesByReason[r.ordinal()] > 0) {
                sb.append(' ').append(r).append('=').append(batchesByReason[r.ordinal()]);
            }
        }
        return sb.toString();
    }
}
