package io.jccl.collectives;

import io.jccl.collectives.bootstrap.Bootstrap;
import io.jccl.collectives.bootstrap.DeviceChoice;
import io.jccl.collectives.direct.DirectAllReduce;
import io.jccl.collectives.kernel.ReduceKernels;
import io.jccl.collectives.message.DeviceResources;
import io.jccl.collectives.message.MessagePath;
import io.jccl.collectives.message.Peer;
import io.jccl.collectives.tuning.AlgorithmFilter;
import io.jccl.collectives.tuning.CostModel;
import io.jccl.collectives.tuning.LinkParameters;
import io.jccl.collectives.tuning.TuningParameters;
import io.jccl.common.CpuAffinity;
import io.jccl.common.Log;
import io.jccl.verbs.Device;
import io.jccl.verbs.LinkLayer;
import io.jccl.verbs.Verbs;

import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.WeakHashMap;
import java.util.concurrent.TimeUnit;

/**
 * What a rank sets up once it has joined, before its first collective: CPU binding on request, the cost model's
 * parameters from the paths in use, and the setup lines of {@code JCCL_DEBUG=INFO}.
 */
final class RankSetup {
    /** Threads already bound by {@link #bindCpu} (a thread that creates several communicators binds once). */
    private static final Set<Thread> BOUND_THREADS = Collections.synchronizedSet(Collections.newSetFromMap(
        new WeakHashMap<>()));

    private RankSetup() {
    }

    /**
     * JCCL_CPU_BIND=core: binds the creating thread to one CPU of the process's mask, chosen by the launcher's local
     * rank (else this rank's index among the ranks of its host, {@code localGroup}), when the local ranks fit the
     * allowed CPUs. Returns whether it bound the thread now.
     */
    static boolean bindCpu(int rank, int[] localGroup) {
        if (!BOUND_THREADS.add(Thread.currentThread())) {
            return false;
        }
        Log log = Log.get();
        List<Integer> cpus = CpuAffinity.allowedCpus();
        int local = -1;
        try {
            local = LaunchEnvironment.detect(System.getenv()).localRank();
        } catch (RuntimeException e) {
            // not started by a launcher: use the position among this host's ranks
        }
        if (local < 0) {
            for (int i = 0; i < localGroup.length; i++) {
                if (localGroup[i] == rank) {
                    local = i;
                }
            }
        }
        String why;
        if (cpus.isEmpty()) {
            why = CpuAffinity.available() ? "the process's CPU mask is unknown" : "sched_setaffinity is unavailable";
        } else if (localGroup.length > cpus.size() || local >= cpus.size()) {
            why = localGroup.length + " local ranks do not fit the " + cpus.size() + " CPUs allowed " + cpus;
        } else {
            why = CpuAffinity.bindCurrentThread(cpus.get(local));
            if (why == null) {
                int cpu = cpus.get(local);
                int localRank = local;
                log.info(rank, Log.Subsys.INIT, () -> "JCCL_CPU_BIND=core: thread '" + Thread.currentThread().getName()
                    + "' bound to CPU " + cpu + " (local rank " + localRank + " of " + localGroup.length + ")");
                return true;
            }
        }
        String notBinding = why;
        log.info(rank, Log.Subsys.INIT, () -> "JCCL_CPU_BIND=core: not binding: " + notBinding);
        return false;
    }

    /** The cost model's inputs: the slowest message path in use, the direct path, the hierarchy. */
    static TuningParameters tuningParameters(CommunicatorOptions options, Bootstrap.Result joined, boolean direct) {
        MessagePath messagePath = joined.messagePath();
        Collection<DeviceResources> used = messagePath.devices().values();
        LinkParameters intra = null;
        if (joined.hostCount() > 1 && joined.sharedHost()) {
            List<DeviceResources> intraDevices = new ArrayList<>();
            for (Peer p : messagePath.peers()) {
                if (p != null && p.sameHost()) {
                    intraDevices.add(p.device());
                }
            }
            if (intraDevices.isEmpty()) {
                // Alone on its host: price the path a same-host pair would take (the first same-host device every
                // rank opens under the job's common settings, else the network path), not "no path": every rank
                // must price HIER alike, or they pick different all-reduce algorithms and fail with a mismatch
                // (seen after a shrink left one rank alone on a namespace host, scripts/fault-injection-netns.sh).
                intraDevices.addAll(joined.firstSameHostDevice() != null ? List.of(joined.firstSameHostDevice())
                    : used);
            }
            intra = slowestMessagePath(intraDevices);
        }
        boolean network = false;
        for (DeviceResources d : used) {
            network |= d.linkLayer().isNetwork();
        }
        return new TuningParameters(slowestMessagePath(used), direct ? TuningParameters.directDefaults() : null,
            TuningParameters.defaultReduceGBps(), options.directBytes(),
            options.chunkBytesFor(network ? LinkLayer.ETHERNET : LinkLayer.MEMORY), joined.hostCount(), intra);
    }

    private static LinkParameters slowestMessagePath(Collection<DeviceResources> devices) {
        LinkParameters worst = null;
        for (DeviceResources d : devices) {
            LinkParameters p = TuningParameters.messagePathDefaults(d.providerName(), d.linkLayer());
            if (worst == null || p.latencyUs() > worst.latencyUs()) {
                worst = p;
            }
        }
        // No device (one rank): nothing is sent; price a memory path so the cost table still reads sensibly.
        return worst == null ? TuningParameters.messagePathDefaults("local", LinkLayer.MEMORY) : worst;
    }

    /** {@code JCCL_DEBUG=INFO}: the device per peer and why, the paths and settings, and (TUNING) the cost table. */
    static void log(int rank, int size, CommunicatorOptions options, Bootstrap.Result joined, TuningParameters tuning,
                    AlgorithmFilter filter, ReduceKernels kernels) {
        Log log = Log.get();
        for (Peer p : joined.messagePath().peers()) {
            if (p != null) {
                log.info(rank, Log.Subsys.INIT, () -> "rank " + rank + " -> rank " + p.rank() + " via " + p.device().name()
                    + ": " + p.reason() + (p.directlyMapped() ? "; direct load/store of its buffers" : ""));
            }
        }
        if (size > 1 && log.enabled(Log.Level.INFO, Log.Subsys.INIT)) {
            for (String unused : devicesNotConsidered(options)) {
                log.info(rank, Log.Subsys.INIT, () -> unused);
            }
        }
        if (size > 1) {
            boolean wantDirect = joined.directPath() != null;
            log.info(rank, Log.Subsys.INIT, () -> "communicator '" + options.name() + "' rank " + rank + "/" + size
                + ": direct algorithms " + (joined.direct() ? "on (all-reduce up to " + DirectAllReduce.INLINE_BYTES
                + " B inline in the arrival records)" : "off" + (wantDirect ? " (mapping failed)"
                : joined.allSameHost() ? (options.directDisabled() ? " (JCCL_DIRECT_DISABLE=1)" : "")
                : " (ranks span hosts)")) + ", kernels " + kernels.name() + ", timeout "
                + TimeUnit.NANOSECONDS.toSeconds(options.timeoutNs()) + " s");
            if (rank == 0 && log.enabled(Log.Level.INFO, Log.Subsys.TUNING)) {
                log.info(rank, Log.Subsys.TUNING, CostModel.table(size, tuning, filter));
            }
        }
    }

    /**
     * Why each device on the class path that is not in the preferred order was not considered ({@code roce0 not
     * considered: not a default device ...}): without it, INFO says nothing of a provider the job could have used.
     * Scans the providers (tens of ms): called only when INFO is on.
     */
    static List<String> devicesNotConsidered(CommunicatorOptions options) {
        List<String> order = new DeviceChoice(options).order();
        List<String> lines = new ArrayList<>();
        for (Device d : Verbs.devices()) {
            if (!order.contains(d.name())) {
                lines.add(d.name() + " not considered: " + (options.transports().isBlank()
                    ? "not a default device (default order " + String.join(",", order) + ")"
                    : "not in JCCL_TRANSPORT=" + options.transports()) + "; JCCL_TRANSPORT=" + d.name()
                    + " selects it");
            }
        }
        return lines;
    }

    /**
     * The one line users look for (NCCL's "Using network ..." and "comm ... Init COMPLETE"): the communicator, this
     * rank, the ranks, the local ranks and hosts, which device serves which peers and why, and the paths in use.
     * {@code comm 'world' rank 0 nranks 4 localRanks 4 hosts 1 - Using network shm0 (same host, shared memory)
     * for ranks 1-3 - paths direct+message - Init COMPLETE}.
     */
    static String summary(int rank, int size, CommunicatorOptions options, Bootstrap.Result joined) {
        Map<String, List<Integer>> byDevice = new LinkedHashMap<>();
        for (Peer p : joined.messagePath().peers()) {
            if (p != null && p.rank() != rank) {
                byDevice.computeIfAbsent(p.device().name() + " (" + p.reason() + ")", k -> new ArrayList<>())
                    .add(p.rank());
            }
        }
        StringBuilder sb = new StringBuilder("comm '").append(options.name()).append("' rank ").append(rank)
            .append(" nranks ").append(size).append(" localRanks ").append(joined.localGroup().length)
            .append(" hosts ").append(joined.hostCount()).append(" - Using network ");
        if (byDevice.isEmpty()) {
            sb.append("none (one rank)");
        }
        String separator = "";
        for (Map.Entry<String, List<Integer>> e : byDevice.entrySet()) {
            sb.append(separator).append(e.getKey()).append(" for ").append(e.getValue().size() == 1 ? "rank " : "ranks ")
                .append(ranges(e.getValue()));
            separator = ", ";
        }
        sb.append(" - paths ").append(joined.direct() ? "direct+message" : "message").append(" - Init COMPLETE");
        return sb.toString();
    }

    /** Sorted ranks as ranges: [1, 2, 3, 5] → "1-3,5". */
    static String ranges(List<Integer> ranks) {
        StringBuilder sb = new StringBuilder();
        int i = 0;
        while (i < ranks.size()) {
            int j = i;
            while (j + 1 < ranks.size() && ranks.get(j + 1) == ranks.get(j) + 1) {
                j++;
            }
            sb.append(sb.isEmpty() ? "" : ",").append(ranks.get(i));
            if (j > i) {
                sb.append('-').append(ranks.get(j));
            }
            i = j + 1;
        }
        return sb.toString();
    }
}
