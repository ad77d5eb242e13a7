package io.jccl.tools.perftest;

/**
 * One row of a bandwidth table.
 *
 * @param size message size in bytes
 * @param iterations messages measured (all QPs)
 * @param peak peak bandwidth in the report unit (MiB/s or Gb/s)
 * @param average average bandwidth over the whole run in the report unit
 * @param messageRateMpps average message rate in millions of messages per second
 */
public record BandwidthResult(long size, long iterations, double peak, double average, double messageRateMpps) {
    /** Bytes per second in perftest's MiB/s unit. */
    public static final double MIB = 0x100000;
    /** Bytes per second in one Gb/s (perftest's {@code format_factor} for --report_gbits). */
    public static final double GBIT = 125_000_000;

    /**
     * Computes a row the way perftest's {@code print_report_bw} does: average = bytes over the span from the first
     * post to the last completion; peak = the best rate over any window [post i, completion j].
     *
     * @param postedNs post times of the measured messages (index = message)
     * @param completedNs completion times, filled at each signaled completion for every message it covers
     * @param signaledEvery completion moderation: every n-th message was signaled (plus the last)
     * @param gbits report Gb/s instead of MiB/s
     */
    public static BandwidthResult compute(long size, long[] postedNs, long[] completedNs, int count, int signaledEvery,
                                          boolean gbits) {
        double unit = gbits ? GBIT : MIB;
        double spanNs = Math.max(1, completedNs[count - 1] - postedNs[0]);
        double average = size * (double) count / (spanNs / 1e9) / unit;
        double rate = count / (spanNs / 1e9) / 1e6;
        double bestNsPerMessage = spanNs / count;
        int step = Math.max(1, signaledEvery);
        // perftest scans every (i, j) pair; cap the work for very long runs by sampling start points.
        int iStride = (int) Math.max(1, (long) count * (count / step + 1) / 200_000_000L);
        for (int i = 0; i < count; i += iStride) {
            for (int j = roundUp(i + 1, step) - 1; j < count; j += step) {
                double t = (completedNs[j] - postedNs[i]) / (double) (j - i + 1);
                if (t > 0 && t < bestNsPerMessage) {
                    bestNsPerMessage = t;
                }
            }
            if (count % step != 0) {
                int j = count - 1;
                double t = (completedNs[j] - postedNs[i]) / (double) (j - i + 1);
                if (t > 0 && t < bestNsPerMessage) {
                    bestNsPerMessage = t;
                }
            }
        }
        double peak = size / (bestNsPerMessage / 1e9) / unit;
        return new BandwidthResult(size, count, peak, average, rate);
    }

    /** A row from a count and a span only (duration mode: perftest reports no peak there). */
    public static BandwidthResult fromTotals(long size, long count, long spanNs, boolean gbits) {
        double unit = gbits ? GBIT : MIB;
        double seconds = Math.max(1, spanNs) / 1e9;
        return new BandwidthResult(size, count, 0, size * (double) count / seconds / unit, count / seconds / 1e6);
    }

    private static int roundUp(int value, int multiple) {
        return (value + multiple - 1) / multiple * multiple;
    }
}
