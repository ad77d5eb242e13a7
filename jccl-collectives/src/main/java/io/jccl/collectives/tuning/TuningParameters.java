package io.jccl.collectives.tuning;

import io.jccl.common.Config;

/**
 * Inputs of the cost model: the message path's α-β (the slowest transport any rank uses), the direct (mapped
 * shared memory) path's α-β when every rank shares one host and maps its peers, the reduction kernel's throughput,
 * the direct staging size and the ring chunk size. Defaults come from the measurements in the design notes and
 * can be overridden: {@code JCCL_<SHM|TCP|DIRECT>_LAT_US}, {@code JCCL_<SHM|TCP|DIRECT>_BW_GBPS},
 * {@code JCCL_REDUCE_GBPS}.
 *
 * @param message path used by ring/tree/RHD/pairwise/linear algorithms
 * @param direct mapped shared-memory path, or null when direct algorithms are unavailable
 * @param reduceGBps reduction throughput (bytes of one operand per ns)
 * @param directStagingBytes bytes each rank can expose per direct round
 * @param chunkBytes ring/pipeline chunk size
 * @param nodes number of hosts the ranks span
 * @param intra the intra-host message path when ranks span several hosts and some host has several ranks (enables
 *     the hierarchical all-reduce), else null
 */
public record TuningParameters(LinkParameters message, LinkParameters direct, double reduceGBps,
                               long directStagingBytes, long chunkBytes, int nodes, LinkParameters intra) {

    /** Parameters for ranks on one host (no hierarchy). */
    public TuningParameters(LinkParameters message, LinkParameters direct, double reduceGBps, long directStagingBytes,
                            long chunkBytes) {
        this(message, direct, reduceGBps, directStagingBytes, chunkBytes, 1, null);
    }

    /** Default α-β for a transport name ({@code shm}, {@code tcp}, {@code loop}, {@code direct}). */
    public static LinkParameters defaults(String transport) {
        String t = transport.toUpperCase(java.util.Locale.ROOT);
        // Measured on the 2-core VM (docs/collectives.md): the shm message path costs ~8 us per step and streams
        // ~4 GB/s (the provider copies, the receiver copies or reduces); mapped loads/stores run at memory speed.
        double lat = switch (t) {
            case "SHM", "LOOP" -> 8.0;
            case "DIRECT" -> 0.5;
            default -> 15.0;
        };
        double bw = switch (t) {
            case "SHM", "LOOP" -> 4.0;
            case "DIRECT" -> 20.0;
            default -> 2.0;
        };
        return new LinkParameters(doubleValue("JCCL_" + t + "_LAT_US", lat), doubleValue("JCCL_" + t + "_BW_GBPS", bw));
    }

    /** Default reduction throughput (JCCL_REDUCE_GBPS, default 10). */
    public static double defaultReduceGBps() {
        return doubleValue("JCCL_REDUCE_GBPS", 10.0);
    }

    private static double doubleValue(String name, double fallback) {
        String v = Config.value(name);
        if (v == null || v.isBlank()) {
            return fallback;
        }
        try {
            return Double.parseDouble(v.trim());
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(name + "=" + v + " is not a number", e);
        }
    }
}
