package io.jccl.collectives.core;

import io.jccl.collectives.store.Store;
import io.jccl.common.CpuAffinity;

import java.util.BitSet;

/**
 * Whether the ranks of one host are oversubscribed (more ranks than CPUs to run them), decided from where the ranks
 * may actually run, not from one rank's own mask.
 *
 * <p>Why: under mpirun's default {@code --bind-to core} (and Slurm's {@code --cpu-bind=cores}) every rank's mask is
 * one CPU. Counting its own mask ({@link Runtime#availableProcessors()}), a rank saw "2 ranks on 1 core" and waited
 * the oversubscribed way (yield at once, never spin): an 8 B all-reduce took 1.33–1.70 µs against 0.42–0.46 µs with
 * {@code --bind-to none}. Each local rank now publishes the CPUs it may run on (store key {@code cpus/R}, the
 * kernel's list format, {@code ?} when unknown), and every local rank decides the same thing from all of them
 * ({@link #decide}): the host is oversubscribed exactly when the ranks cannot each get a CPU of their own within
 * their masks (a bipartite matching of ranks to CPUs, so overlapping masks such as {@code --bind-to socket} count
 * right too), or when there are more ranks than the CPUs the container's quota grants.
 */
public final class CpuPlacement {
    /** What {@link #exchange} publishes for a rank whose mask is unknown (not Linux, no {@code /proc}). */
    static final String UNKNOWN = "?";

    private CpuPlacement() {
    }

    /**
     * The decision.
     *
     * @param oversubscribed whether some rank has no CPU of its own: waits then never spin
     * @param boundApart whether every local rank is bound to a single CPU and no two share one (a launcher's
     *     {@code --bind-to core}): waits then need not guess whether a peer shares this rank's core
     * @param reason one line for the log, with every rank's CPUs
     */
    public record Verdict(boolean oversubscribed, boolean boundApart, String reason) {
    }

    /**
     * Decides from every local rank's CPUs ({@code masks}, in local-rank order; an empty set means unknown and
     * counts as every CPU of the host), the host's CPU count and the CPU quota of this process ({@code cpuLimit},
     * {@link Integer#MAX_VALUE} when none).
     */
    public static Verdict decide(BitSet[] masks, int hostCpus, int cpuLimit) {
        int ranks = masks.length;
        BitSet[] usable = new BitSet[ranks];
        boolean allKnown = true;
        boolean singles = true;
        StringBuilder cpus = new StringBuilder();
        for (int i = 0; i < ranks; i++) {
            BitSet m = masks[i];
            allKnown &= !m.isEmpty();
            singles &= m.cardinality() == 1;
            usable[i] = m.isEmpty() ? allCpus(hostCpus) : m;
            cpus.append(i == 0 ? "" : " ").append('[').append(m.isEmpty() ? UNKNOWN : CpuAffinity.formatCpuList(m))
                .append(']');
        }
        String where = ranks + " local rank" + (ranks == 1 ? "" : "s") + " on CPUs " + cpus + " of " + hostCpus;
        if (ranks > cpuLimit) {
            return new Verdict(true, false, where + ": oversubscribed (the CPU quota allows " + cpuLimit + ")");
        }
        int matched = matchRanksToCpus(usable);
        if (matched < ranks) {
            return new Verdict(true, false, where + ": oversubscribed (only " + matched + " of them can have a CPU"
                + " of their own)");
        }
        boolean apart = allKnown && singles && ranks > 1;
        return new Verdict(false, apart, where + ": every rank has a CPU of its own"
            + (apart ? " (bound apart)" : ""));
    }

    /**
     * Publishes this rank's CPUs ({@link CpuAffinity#threadCpus()} of the calling thread, the one that runs the
     * collectives) and decides with those of the other ranks of {@code localGroup}, waiting for them until
     * {@code deadlineNs}. A host with one rank needs no store.
     */
    public static Verdict exchange(Store store, int rank, int[] localGroup, long deadlineNs) {
        return exchange(store, rank, localGroup, CpuAffinity.threadCpus(), deadlineNs);
    }

    /** {@link #exchange(Store, int, int[], long)} with this rank's CPUs given ({@code mine}; empty: unknown). */
    public static Verdict exchange(Store store, int rank, int[] localGroup, BitSet mine, long deadlineNs) {
        BitSet[] masks = new BitSet[localGroup.length];
        if (localGroup.length > 1) {
            store.setString("cpus/" + rank, mine.isEmpty() ? UNKNOWN : CpuAffinity.formatCpuList(mine),
                remaining(deadlineNs));
        }
        for (int i = 0; i < localGroup.length; i++) {
            int peer = localGroup[i];
            masks[i] = peer == rank ? mine : parse(store.getString("cpus/" + peer, remaining(deadlineNs)));
        }
        // A quota below the mask (cgroup cpu.max) is what the JVM reports below the mask's size; 0 CPUs never.
        int available = Runtime.getRuntime().availableProcessors();
        int cpuLimit = !mine.isEmpty() && available < mine.cardinality() ? available : Integer.MAX_VALUE;
        if (mine.isEmpty()) {
            // Own mask unknown: the JVM's count is all there is (the old rule: local ranks > its CPUs).
            cpuLimit = available;
        }
        return decide(masks, CpuAffinity.onlineCpus(), cpuLimit);
    }

    /** A peer's published CPUs; anything unreadable counts as unknown (every CPU), never as an error. */
    private static BitSet parse(String published) {
        if (published.equals(UNKNOWN)) {
            return new BitSet();
        }
        try {
            return CpuAffinity.parseCpuList(published);
        } catch (IllegalArgumentException e) {
            return new BitSet();
        }
    }

    private static BitSet allCpus(int hostCpus) {
        BitSet all = new BitSet();
        all.set(0, Math.max(1, hostCpus));
        return all;
    }

    /**
     * The largest number of ranks that can each get a distinct CPU of their mask (Kuhn's augmenting paths: ranks
     * times mask bits per rank, microseconds for any host).
     */
    static int matchRanksToCpus(BitSet[] masks) {
        int width = 0;
        for (BitSet m : masks) {
            width = Math.max(width, m.length());
        }
        int[] owner = new int[width];
        int matched = 0;
        for (int r = 0; r < masks.length; r++) {
            boolean[] seen = new boolean[width];
            if (augment(r, masks, owner, seen)) {
                matched++;
            }
        }
        return matched;
    }

    /** Finds a CPU for rank {@code r}, moving earlier ranks to other CPUs of theirs where needed. */
    private static boolean augment(int r, BitSet[] masks, int[] owner, boolean[] seen) {
        for (int cpu = masks[r].nextSetBit(0); cpu >= 0; cpu = masks[r].nextSetBit(cpu + 1)) {
            if (seen[cpu]) {
                continue;
            }
            seen[cpu] = true;
            // owner holds rank + 1, so 0 means free
            if (owner[cpu] == 0 || augment(owner[cpu] - 1, masks, owner, seen)) {
                owner[cpu] = r + 1;
                return true;
            }
        }
        return false;
    }

    private static long remaining(long deadlineNs) {
        return Math.max(1, deadlineNs - System.nanoTime());
    }
}
