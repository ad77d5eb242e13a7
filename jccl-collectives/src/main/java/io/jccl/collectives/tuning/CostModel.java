package io.jccl.collectives.tuning;

import io.jccl.collectives.Collective;

import java.util.EnumSet;
import java.util.Set;

/**
 * NCCL-style analytic cost model: {@code time = latency × steps + bytes / bandwidth (+ bytes / reduce throughput)}
 * per (collective, algorithm), evaluated for the message size and the number of ranks; the cheapest allowed
 * algorithm wins. Pure functions: the same inputs give the same choice on every rank, which keeps ranks' schedules
 * identical. {@code bytes} is the nccl-tests size S (allGather/reduceScatter/allToAll/gather/scatter: the
 * total over all ranks; others: the buffer size).
 */
public final class CostModel {
    private CostModel() {
    }

    /** Algorithms implemented for a collective (DIRECT only applies when the direct path exists). */
    public static Set<Algorithm> candidates(Collective c) {
        return switch (c) {
            case ALL_REDUCE -> EnumSet.of(Algorithm.RING, Algorithm.TREE, Algorithm.RHD, Algorithm.RD, Algorithm.DIRECT,
                Algorithm.HIER);
            case BROADCAST -> EnumSet.of(Algorithm.TREE, Algorithm.RING, Algorithm.DIRECT);
            case REDUCE -> EnumSet.of(Algorithm.TREE, Algorithm.DIRECT);
            case ALL_GATHER, REDUCE_SCATTER -> EnumSet.of(Algorithm.RING, Algorithm.DIRECT);
            case ALL_TO_ALL -> EnumSet.of(Algorithm.PAIRWISE, Algorithm.DIRECT);
            case GATHER, SCATTER -> EnumSet.of(Algorithm.LINEAR);
            case BARRIER -> EnumSet.of(Algorithm.DISSEMINATION, Algorithm.DIRECT);
            case SEND_RECV, WINDOW -> EnumSet.of(Algorithm.LINEAR);
        };
    }

    private static int log2Ceil(int n) {
        return n <= 1 ? 0 : 32 - Integer.numberOfLeadingZeros(n - 1);
    }

    /**
     * Estimated microseconds, or {@link Double#POSITIVE_INFINITY} when the algorithm does not apply (direct without a
     * direct path or beyond its staging size).
     */
    public static double estimateUs(Collective c, Algorithm a, int n, long bytes, TuningParameters p) {
        if (!candidates(c).contains(a)) {
            return Double.POSITIVE_INFINITY;
        }
        if (n <= 1) {
            return 0;
        }
        double s = bytes;
        LinkParameters m = p.message();
        double alpha = m.latencyUs();
        double red = s / (p.reduceGBps() * 1e3);
        int l = log2Ceil(n);
        if (a == Algorithm.DIRECT) {
            LinkParameters d = p.direct();
            if (d == null) {
                return Double.POSITIVE_INFINITY;
            }
            double ad = d.latencyUs() * Math.max(1, Math.log(n) / Math.log(2)); // a flag barrier polls n-1 peers
            long staging = p.directStagingBytes();
            return switch (c) {
                case ALL_REDUCE -> {
                    if (bytes <= Math.min(32 * 1024, staging)) {
                        // one barrier; every rank reduces all n inputs
                        yield ad + d.transferUs(s) + n * red;
                    }
                    long rounds = Math.max(1, (bytes + staging - 1) / staging);
                    // copy-in (skipped for allocate() memory), slice reads, gather: ~2.5 S of memory traffic
                    yield rounds * 2 * ad + d.transferUs(2.5 * s) + red;
                }
                case REDUCE, REDUCE_SCATTER -> rounds(bytes, staging) * ad + d.transferUs(2 * s) + red;
                case BROADCAST -> rounds(bytes, staging) * ad + d.transferUs(2 * s);
                case ALL_GATHER, ALL_TO_ALL -> rounds(bytes, staging) * ad + d.transferUs(s + s / n);
                case BARRIER -> ad;
                default -> Double.POSITIVE_INFINITY;
            };
        }
        if (a == Algorithm.HIER) {
            LinkParameters in = p.intra();
            if (in == null || p.nodes() < 2) {
                return Double.POSITIVE_INFINITY;
            }
            int nodes = p.nodes();
            int li = log2Ceil((n + nodes - 1) / nodes);
            double local = 2 * li * (in.latencyUs() + in.transferUs(s)) + li * red;
            double leaders = (n > 1 ? 2 * (nodes - 1) * alpha + m.transferUs(2.0 * (nodes - 1) / nodes * s)
                + (nodes - 1.0) / nodes * red : 0);
            return local + leaders;
        }
        double frac = (n - 1) / (double) n;
        return switch (c) {
            case ALL_REDUCE -> switch (a) {
                case RING -> 2 * (n - 1) * alpha + m.transferUs(2 * frac * s) + frac * red
                    + 2 * (n - 1) * chunkOverheadUs(s / n, p);
                case TREE -> 2 * l * alpha + m.transferUs(2 * l * s) + l * red;
                case RHD -> {
                    boolean pow2 = Integer.bitCount(n) == 1;
                    int p2 = Integer.highestOneBit(n);
                    double core = 2 * log2Ceil(p2) * alpha + m.transferUs(2 * s * (p2 - 1) / p2) + red;
                    yield pow2 ? core : core + 2 * alpha + m.transferUs(2 * s) + red;
                }
                case RD -> {
                    if (p.intra() != null && p.nodes() > 1) {
                        // ranks span hosts and some host has several: that is hier's case (intra-host steps over
                        // the fast path); recursive doubling is for flat jobs
                        yield Double.POSITIVE_INFINITY;
                    }
                    // whole vectors every step; each step also copies the vector it sends (~ a reduction's cost)
                    int p2 = Integer.highestOneBit(n);
                    int lp = log2Ceil(p2);
                    double core = lp * (alpha + m.transferUs(s) + 2 * red);
                    yield Integer.bitCount(n) == 1 ? core : core + 2 * alpha + m.transferUs(2 * s) + red;
                }
                default -> Double.POSITIVE_INFINITY;
            };
            case BROADCAST -> switch (a) {
                case TREE -> l * (alpha + m.transferUs(s));
                case RING -> (n - 1) * alpha + m.transferUs(s) + (n - 2) * m.transferUs(Math.min(s, p.chunkBytes()));
                default -> Double.POSITIVE_INFINITY;
            };
            case REDUCE -> l * (alpha + m.transferUs(s)) + l * red;
            case ALL_GATHER -> (n - 1) * alpha + m.transferUs(frac * s);
            case REDUCE_SCATTER -> (n - 1) * alpha + m.transferUs(frac * s) + frac * red;
            case ALL_TO_ALL -> (n - 1) * alpha + m.transferUs(frac * s);
            case GATHER, SCATTER -> (n - 1) * alpha + m.transferUs(frac * s);
            case BARRIER -> l * alpha;
            case SEND_RECV, WINDOW -> alpha + m.transferUs(s);
        };
    }

    private static long rounds(long bytes, long staging) {
        return Math.max(1, (bytes + staging - 1) / staging);
    }

    private static double chunkOverheadUs(double blockBytes, TuningParameters p) {
        // every extra chunk of a step costs a credit round trip's worth of bookkeeping, ~0.2 µs
        return Math.max(0, Math.ceil(blockBytes / p.chunkBytes()) - 1) * 0.2;
    }

    /** The cheapest algorithm the filter allows; when it allows none that applies, the cheapest overall. */
    public static Algorithm select(Collective c, int n, long bytes, TuningParameters p, AlgorithmFilter filter) {
        Algorithm best = null;
        double bestUs = Double.POSITIVE_INFINITY;
        Algorithm fallback = null;
        double fallbackUs = Double.POSITIVE_INFINITY;
        for (Algorithm a : candidates(c)) {
            double us = estimateUs(c, a, n, bytes, p);
            if (us < fallbackUs) {
                fallbackUs = us;
                fallback = a;
            }
            if (filter.allows(c, a) && us < bestUs) {
                bestUs = us;
                best = a;
            }
        }
        if (best != null) {
            return best;
        }
        return fallback != null ? fallback : candidates(c).iterator().next();
    }

    /** A table of estimates (µs) per collective and algorithm for a few sizes, as NCCL prints under TUNING. */
    public static String table(int n, TuningParameters p, AlgorithmFilter filter) {
        long[] sizes = {8, 1024, 65536, 1 << 20, 16 << 20, 256L << 20};
        StringBuilder sb = new StringBuilder();
        sb.append(String.format("cost model for %d ranks (us; * = chosen; message path %.1f us %.1f GB/s; direct %s;"
                + " reduce %.1f GB/s; JCCL_ALGO=%s)%n", n, p.message().latencyUs(), p.message().bandwidthGBps(),
            p.direct() == null ? "off" : String.format("%.1f us %.1f GB/s", p.direct().latencyUs(),
                p.direct().bandwidthGBps()), p.reduceGBps(), filter));
        sb.append(String.format("%-14s %-13s", "collective", "algorithm"));
        for (long s : sizes) {
            sb.append(String.format(" %11s", human(s)));
        }
        sb.append('\n');
        for (Collective c : Collective.values()) {
            if (c == Collective.SEND_RECV || c == Collective.WINDOW) {
                continue;
            }
            for (Algorithm a : candidates(c)) {
                sb.append(String.format("%-14s %-13s", c.displayName(), a.shortName()));
                for (long s : sizes) {
                    double us = estimateUs(c, a, n, s, p);
                    boolean chosen = select(c, n, s, p, filter) == a;
                    sb.append(String.format(" %10s%s", Double.isInfinite(us) ? "-" : String.format("%.1f", us),
                        chosen ? "*" : " "));
                }
                sb.append('\n');
            }
        }
        return sb.toString();
    }

    private static String human(long bytes) {
        if (bytes >= 1 << 20) {
            return (bytes >> 20) + "MiB";
        }
        if (bytes >= 1024) {
            return (bytes >> 10) + "KiB";
        }
        return bytes + "B";
    }
}
