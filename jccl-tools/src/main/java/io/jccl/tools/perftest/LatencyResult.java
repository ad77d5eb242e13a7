package io.jccl.tools.perftest;

import org.HdrHistogram.Histogram;

/**
 * One row of a latency table, in microseconds.
 *
 * @param size message size in bytes
 * @param iterations samples
 * @param min t_min
 * @param max t_max
 * @param typical t_typical (median)
 * @param average t_avg
 * @param stdev t_stdev
 * @param p99 99% percentile
 * @param p999 99.9% percentile
 * @param tps transactions (round trips) per second, reported in duration mode
 */
public record LatencyResult(long size, long iterations, double min, double max, double typical, double average,
                            double stdev, double p99, double p999, double tps) {
    /**
     * Summarizes a histogram of round-trip times in nanoseconds; each value is divided by {@code rttFactor}
     * (2 for ping-pong tests, where latency is half the round trip; 1 for READ and atomics).
     */
    public static LatencyResult fromRoundTrips(long size, Histogram roundTripNs, int rttFactor, long spanNs) {
        double k = 1000.0 * rttFactor;
        long n = roundTripNs.getTotalCount();
        double tps = spanNs > 0 ? n / (spanNs / 1e9) : 0;
        if (n == 0) {
            return new LatencyResult(size, 0, 0, 0, 0, 0, 0, 0, 0, tps);
        }
        return new LatencyResult(size, n, roundTripNs.getMinValue() / k, roundTripNs.getMaxValue() / k,
            roundTripNs.getValueAtPercentile(50) / k, roundTripNs.getMean() / k, roundTripNs.getStdDeviation() / k,
            roundTripNs.getValueAtPercentile(99) / k, roundTripNs.getValueAtPercentile(99.9) / k, tps);
    }
}
