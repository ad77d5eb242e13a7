package io.jccl.collectives.tuning;

/** Collective algorithms. Which ones a collective offers: {@link CostModel#candidates}. */
public enum Algorithm {
    /** Ring: n-1 (or 2(n-1)) neighbour steps, each streaming chunks through pre-registered peer scratch slots. */
    RING,
    /** Binomial tree: log2(n) steps; best for small messages. */
    TREE,
    /** Recursive halving (reduce-scatter) then recursive doubling (all-gather): Rabenseifner's allreduce. */
    RHD,
    /**
     * Recursive doubling with whole vectors: log2(n) exchange steps (+2 to fold a non-power of two), the fewest
     * message latencies of any all-reduce; for small messages on the message path (one exchange for 2 ranks).
     */
    RD,
    /** Shared memory: every rank maps its peers' staging buffers and loads/stores them directly. */
    DIRECT,
    /** All-to-all in n-1 pairwise exchange steps. */
    PAIRWISE,
    /** Root exchanges with every rank concurrently (gather, scatter). */
    LINEAR,
    /** Dissemination barrier: log2(n) rounds of zero-byte messages. */
    DISSEMINATION,
    /**
     * Hierarchical all-reduce for ranks on several hosts: binomial reduce to each host's leader over the intra-host
     * path, all-reduce among the leaders over the inter-host path, binomial broadcast inside each host.
     */
    HIER;

    /** Lower-case name as in JCCL_ALGO and logs. */
    public String shortName() {
        return name().toLowerCase(java.util.Locale.ROOT);
    }
}
