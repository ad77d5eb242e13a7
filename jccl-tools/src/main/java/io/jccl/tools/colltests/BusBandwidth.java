package io.jccl.tools.colltests;

import java.util.Locale;

/**
 * nccl-tests' bandwidth definitions (doc/PERFORMANCE.md): {@code algbw = S / t} with S the bytes one rank sees
 * (per-collective, see {@link #algorithmBandwidth}) and GB = 1e9 bytes; {@code busbw = algbw × factor}, with the
 * factor that makes the number comparable to a link's peak whatever the rank count.
 */
public enum BusBandwidth {
    /** all_reduce_perf: factor 2(n−1)/n. */
    ALL_REDUCE("all_reduce_perf"),
    /** reduce_scatter_perf: S = recvcount·size·n, factor (n−1)/n. */
    REDUCE_SCATTER("reduce_scatter_perf"),
    /** all_gather_perf: S = sendcount·size·n, factor (n−1)/n. */
    ALL_GATHER("all_gather_perf"),
    /** alltoall_perf: factor (n−1)/n. */
    ALL_TO_ALL("alltoall_perf"),
    /** gather_perf: factor (n−1)/n. */
    GATHER("gather_perf"),
    /** scatter_perf: factor (n−1)/n. */
    SCATTER("scatter_perf"),
    /** broadcast_perf: factor 1. */
    BROADCAST("broadcast_perf"),
    /** reduce_perf: factor 1. */
    REDUCE("reduce_perf"),
    /** sendrecv_perf: factor 1. */
    SEND_RECV("sendrecv_perf");

    private final String program;

    BusBandwidth(String program) {
        this.program = program;
    }

    /** The nccl-tests program name, for example {@code all_reduce_perf}. */
    public String program() {
        return program;
    }

    /** The collective by its program name ({@code all_reduce_perf} or {@code all_reduce}). */
    public static BusBandwidth of(String name) {
        String n = name.toLowerCase(Locale.ROOT);
        for (BusBandwidth b : values()) {
            if (b.program.equals(n) || b.program.equals(n + "_perf")) {
                return b;
            }
        }
        throw new IllegalArgumentException("unknown collective test '" + name + "'");
    }

    /** busbw / algbw for {@code ranks} ranks. */
    public double factor(int ranks) {
        double n = ranks;
        return switch (this) {
            case ALL_REDUCE -> 2 * (n - 1) / n;
            case REDUCE_SCATTER, ALL_GATHER, ALL_TO_ALL, GATHER, SCATTER -> (n - 1) / n;
            case BROADCAST, REDUCE, SEND_RECV -> 1;
        };
    }

    /** algbw in GB/s (1e9 bytes) for {@code bytes} moved in {@code seconds}. */
    public static double algorithmBandwidth(double bytes, double seconds) {
        return seconds <= 0 ? 0 : bytes / seconds / 1e9;
    }

    /** busbw in GB/s. */
    public double busBandwidth(double bytes, double seconds, int ranks) {
        return algorithmBandwidth(bytes, seconds) * factor(ranks);
    }
}
