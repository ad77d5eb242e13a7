package io.jccl.collectives.tuning;

import io.jccl.common.Config;
import io.jccl.verbs.LinkLayer;

/**
 * Inputs of the cost model: the message path's α-β (the slowest transport any rank uses), the direct (mapped
 * shared memory) path's α-β when every rank shares one host and maps its peers, the reduction kernel's throughput,
 * the direct staging size and the ring chunk size. Defaults come from the measurements in the design notes and
 * can be overridden: {@code JCCL_<PROVIDER|DIRECT>_LAT_US}, {@code JCCL_<PROVIDER|DIRECT>_BW_GBPS},
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

    /**
     * Default α-β of the direct path (mapped shared memory: loads and stores at memory speed), overridable with
     * {@code JCCL_DIRECT_LAT_US} and {@code JCCL_DIRECT_BW_GBPS}.
     */
    public static LinkParameters directDefaults() {
        return withOverrides("DIRECT", 0.5, 20.0);
    }

    /**
     * Default α-β of a message path over a device of provider {@code providerName} attached to {@code linkLayer}:
     * from what the device is, not its name (measured on the 2-core VM, docs/collectives.md: the shared-memory
     * message path costs ~8 us per step and streams ~4 GB/s, the provider copies and the receiver copies or reduces;
     * over a network, loopback tcp, ~15 us and ~2 GB/s). Overridable per provider with
     * {@code JCCL_<PROVIDER>_LAT_US} and {@code JCCL_<PROVIDER>_BW_GBPS} ({@code JCCL_TCP_LAT_US}).
     */
    public static LinkParameters messagePathDefaults(String providerName, LinkLayer linkLayer) {
        boolean network = linkLayer.isNetwork();
        return withOverrides(providerName.toUpperCase(java.util.Locale.ROOT), network ? 15.0 : 8.0,
            network ? 2.0 : 4.0);
    }

    private static LinkParameters withOverrides(String name, double latencyUs, double bandwidthGBps) {
        return new LinkParameters(doubleValue("JCCL_" + name + "_LAT_US", latencyUs),
            doubleValue("JCCL_" + name + "_BW_GBPS", bandwidthGBps));
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
