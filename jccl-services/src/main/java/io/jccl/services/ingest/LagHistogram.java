package io.jccl.services.ingest;

/**
 * Ingest-to-visible lag in log-linear buckets (8 per power of two: at most 12.5% error), without allocating.
 * Written by the polling thread; read by anyone (a read during a write may be off by one record).
 */
final class LagHistogram {
    private static final int SUB = 8;
    private final long[] counts = new long[64 * SUB];
    private long count;
    private long max;
    private long last;

    void record(long valueNs) {
        long v = Math.max(1, valueNs);
        int exponent = 63 - Long.numberOfLeadingZeros(v);
        int sub = exponent < 3 ? (int) (v & (SUB - 1)) : (int) ((v >>> (exponent - 3)) & (SUB - 1));
        counts[exponent * SUB + sub]++;
        count++;
        last = valueNs;
        if (valueNs > max) {
            max = valueNs;
        }
    }

    long count() {
        return count;
    }

    long max() {
        return max;
    }

    long last() {
        return last;
    }

    /** The value at quantile q (0..1): the upper edge of its bucket. */
    long quantile(double q) {
        long total = count;
        if (total == 0) {
            return 0;
        }
        long rank = (long) Math.ceil(q * total);
        long seen = 0;
        for (int i = 0; i < counts.length; i++) {
            seen += counts[i];
            if (seen >= rank && counts[i] > 0) {
                int exponent = i / SUB;
                int sub = i % SUB;
                if (exponent < 3) {
                    return sub;
                }
                long base = (1L << exponent) | ((long) sub << (exponent - 3));
                return Math.min(max, base + (1L << (exponent - 3)) - 1);
            }
        }
        return max;
    }
}
