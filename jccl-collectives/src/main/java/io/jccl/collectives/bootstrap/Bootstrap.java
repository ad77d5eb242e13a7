package io.jccl.collectives.bootstrap;

import io.jccl.collectives.CollectiveException;
import io.jccl.collectives.CommunicatorOptions;
import io.jccl.collectives.core.WaitPolicy;
import io.jccl.collectives.direct.DirectPath;
import io.jccl.collectives.memory.Allocations;
import io.jccl.collectives.message.DeviceResources;
import io.jccl.collectives.message.MessagePath;
import io.jccl.collectives.message.Peer;
import io.jccl.collectives.store.Store;
import io.jccl.common.Log;
import io.jccl.common.ProcessIds;
import io.jccl.common.SecureIds;
import io.jccl.verbs.Reach;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * How a rank joins a communicator, apart from the collectives (as NCCL's {@code bootstrap.cc}/{@code init.cc} and
 * Gloo's {@code rendezvous/context.cc} stand apart from theirs): publish and check join records ({@link JoinRecord}),
 * choose a device per peer ({@link DeviceChoice}), create one queue pair per peer and exchange endpoint records
 * through the store, connect, and agree on the direct path. Returns everything it built as a {@link Result}; on
 * failure it closes what it opened.
 *
 * <p>Store keys, under the communicator's prefix: {@code hello/R} (join record), {@code devices/R} (network
 * devices opened, when some pair needs one), {@code ep/R} (R's endpoint records, one line per peer P: P, endpoint,
 * inbox address and rkey, and the direct path's control block and staging when offered), {@code connected} (a
 * counter) and {@code connected/all}.
 */
public final class Bootstrap {
    private Bootstrap() {
    }

    /**
     * What joining built.
     *
     * @param messagePath the message path to every peer, connected
     * @param directPath the direct path (control block and staging allocated, peers mapped), or null when the ranks
     *     do not all share one host and one device; {@link DirectPath#enabled()} says whether every rank mapped every
     *     peer
     * @param hosts every rank's host identity
     * @param localGroup the ranks of this rank's host, in rank order (the first is the host's leader)
     * @param leaderGroup the first rank of every host, in rank order
     * @param devicesTried devices this rank tried to open, opened or not
     * @param allSameHost whether every rank runs on this host
     * @param firstSameHostDevice the first same-host device (preferred order) this rank opened, closed again when
     *     it has no same-host peer (only its name, provider and link layer are read), or null when none opened:
     *     what a same-host pair of this rank would use, so that a rank alone on its host prices the intra-host
     *     path as the ranks that share a host do
     * @param stepsNs when the join's steps ended ({@link System#nanoTime()}): join records exchanged, devices
     *     chosen per peer, this rank's queue pairs connected, every rank connected (the recovery breakdown of
     *     docs/fault-tolerance.md)
     */
    public record Result(MessagePath messagePath, DirectPath directPath, String[] hosts, int[] localGroup,
                         int[] leaderGroup, Set<String> devicesTried, boolean allSameHost,
                         DeviceResources firstSameHostDevice, long[] stepsNs) {
        /** Whether the direct algorithms can run. */
        public boolean direct() {
            return directPath != null && directPath.enabled();
        }

        /** Number of hosts the ranks span. */
        public int hostCount() {
            return new LinkedHashSet<>(Arrays.asList(hosts)).size();
        }

        /** Whether some host runs several ranks. */
        public boolean sharedHost() {
            return hostCount() < hosts.length;
        }
    }

    /**
     * The host identity of this process: JCCL_HOST_ID, else the kernel's boot id and the host name (processes that
     * share it can share memory).
     */
    public static String hostIdentity(CommunicatorOptions options) {
        if (options.hostId() != null && !options.hostId().isBlank()) {
            return options.hostId();
        }
        String boot = "";
        try {
            boot = Files.readString(Path.of("/proc/sys/kernel/random/boot_id")).trim();
        } catch (Exception ignored) {
            // not Linux
        }
        return boot + "@" + Log.host();
    }

    /**
     * Joins as {@code rank} of {@code size} through {@code store} (the communicator's prefix applied), by
     * {@code deadlineNs}; sends from {@code allocations} need no registration, and the direct path waits with
     * {@code waits}.
     *
     * @throws CollectiveException.Refused when another job's rank or a wrong secret is met, or settings differ
     */
    public static Result join(Store store, int rank, int size, CommunicatorOptions options, long deadlineNs,
                              Allocations allocations, WaitPolicy waits) {
        String hostId = hostIdentity(options);
        DeviceChoice devices = new DeviceChoice(options);
        int cqCapacity = Math.max(1024, 2 * size * (2 * options.slots() + 64) + 64);
        MessagePath messagePath = null;
        DirectPath directPath = null;
        try {
            if (size > 1) {
                devices.open(true, cqCapacity, Reach.HOST);
            }
            String settingsHash = Integer.toHexString(options.fingerprint().hashCode());
            long[] stepsNs = new long[4];
            JoinRecord[] records = exchangeJoinRecords(store, rank, size, options, hostId, settingsHash,
                String.join(",", devices.opened.keySet()), deadlineNs);
            stepsNs[0] = System.nanoTime();
            String[] hosts = new String[size];
            for (int j = 0; j < size; j++) {
                hosts[j] = records[j].hostId();
            }
            Peer[] peers = choosePeers(store, rank, size, options, hostId, records, devices, cqCapacity, deadlineNs);
            stepsNs[1] = System.nanoTime();
            DeviceResources firstSameHost = null;
            for (var e : devices.opened.entrySet()) {
                if (firstSameHost == null && devices.isSameHostDevice(e.getKey())) {
                    firstSameHost = e.getValue();
                }
            }
            Set<String> tried = new LinkedHashSet<>(devices.opened.keySet());
            tried.addAll(devices.unavailable.keySet());
            // Close devices nobody uses.
            Map<String, DeviceResources> used = new LinkedHashMap<>();
            boolean allSameHost = true;
            for (Peer p : peers) {
                if (p != null) {
                    used.put(p.device().name(), p.device());
                    allSameHost &= p.sameHost();
                }
            }
            for (var e : devices.opened.entrySet()) {
                if (!used.containsKey(e.getKey())) {
                    e.getValue().close();
                }
            }
            messagePath = new MessagePath(rank, options.slots(), peers, used.values(), allocations,
                options.peerTimeoutNs());
            boolean wantDirect = size > 1 && allSameHost && used.size() == 1 && !options.directDisabled();
            DeviceResources directDevice = wantDirect ? used.values().iterator().next() : null;
            if (wantDirect) {
                directPath = new DirectPath(rank, size, directDevice, options.directBytes(), messagePath, store,
                    options.timeoutNs(), options.peerTimeoutNs(), waits);
            }
            messagePath.createQueuePairs();
            boolean mapped = connect(store, rank, messagePath, directPath, directDevice, deadlineNs);
            stepsNs[2] = System.nanoTime();
            // Nobody sends before every rank has connected all its queue pairs (a message to a QP still in INIT
            // would be retried only a few times by a real transport).
            boolean allMapped = allConnected(store, rank, size, directPath != null && mapped, deadlineNs);
            if (directPath != null) {
                directPath.enable(allMapped);
            }
            stepsNs[3] = System.nanoTime();
            warnIfOpen(options, rank, used.values(), allSameHost);
            int[][] groups = hostGroups(hosts, rank);
            return new Result(messagePath, directPath, hosts, groups[0], groups[1], tried, allSameHost, firstSameHost,
                stepsNs);
        } catch (RuntimeException e) {
            if (directPath != null) {
                directPath.close();
            }
            if (messagePath != null) {
                messagePath.close();
            }
            devices.closeAll();
            throw e;
        }
    }

    /** Whether this JVM has warned that a job runs without a secret (once is enough). */
    private static volatile boolean warnedOpen;

    /**
     * Without {@code JCCL_AUTH_SECRET} the store's records (the queue pairs' endpoints and connection secrets, the
     * memory keys) are readable and writable by anyone who can reach the store, and a network device's connections
     * can be made by anyone who can read them: a job that uses a network device or spans hosts says so loudly (once
     * per process); a one-host shared-memory job, whose store and files only local users can reach, notes it at INFO.
     */
    private static void warnIfOpen(CommunicatorOptions options, int rank, Iterable<DeviceResources> used,
                                   boolean allSameHost) {
        if (options.authSecret() != null) {
            return;
        }
        boolean network = !allSameHost;
        for (DeviceResources d : used) {
            network |= d.linkLayer().isNetwork();
        }
        String text = "JCCL_AUTH_SECRET is not set: anyone who can reach this job's rendezvous store can read and change "
            + "its records (queue-pair endpoints and connection secrets, memory keys), join it"
            + (network ? ", and connect to its network queue pairs" : "") + ". Set the same JCCL_AUTH_SECRET on every "
            + "rank to authenticate and encrypt them";
        Log log = Log.get();
        if (network && !warnedOpen) {
            warnedOpen = true;
            log.warn(rank, Log.Subsys.INIT, text);
        } else {
            log.info(rank, Log.Subsys.INIT, text);
        }
    }

    /**
     * Publishes this rank's join record under {@code hello/RANK} and reads and checks everyone's (this rank's too):
     * job id, size, settings hash and, with {@code JCCL_AUTH_SECRET}, the proof. Public (internal package) so that
     * other services joining a job through its store check their peers the same way.
     *
     * @throws CollectiveException.Refused when the rank is taken, or a record fails a check
     */
    public static JoinRecord[] exchangeJoinRecords(Store store, int rank, int size, CommunicatorOptions options,
                                                    String hostId, String settingsHash, String devices,
                                                    long deadlineNs) {
        byte[] mine = JoinRecord.encode(options.jobId(), rank, size, hostId, ProcessIds.self(),
            ProcessIds.pidNamespace(), settingsHash, devices,
            Long.toHexString(SecureIds.nonce()), options.authSecret());
        String key = "hello/" + rank;
        if (!store.compareAndSet(key, null, mine, remaining(deadlineNs))) {
            String taker;
            try {
                String[] f = JoinRecord.split(store.get(key, remaining(deadlineNs)));
                taker = f.length > 1 && !f[1].equals(options.jobId()) ? "job '" + f[1] + "' (this is job '"
                    + options.jobId() + "')" : "another process of this job";
            } catch (SealedStore.Unsealed | SealedStore.Forged e) {
                taker = "a process without this job's JCCL_AUTH_SECRET";
            }
            throw new CollectiveException.Refused("rank " + rank + " is already taken in " + store.describe() + " by "
                + taker + "; is another job using the same store address, or was a rank started twice?");
        }
        JoinRecord[] records = new JoinRecord[size];
        for (int j = 0; j < size; j++) {
            try {
                byte[] record = store.get("hello/" + j, remaining(deadlineNs));
                if (options.authSecret() == null && JoinRecord.isSealed(record)) {
                    throw new IllegalArgumentException("rank " + j + " authenticates with JCCL_AUTH_SECRET but this "
                        + "rank has no secret set");
                }
                records[j] = JoinRecord.verify(j, record, options.jobId(), size, settingsHash, options.authSecret());
            } catch (SealedStore.Unsealed | SealedStore.Forged e) {
                throw new CollectiveException.Refused("rank " + rank + " refuses to join " + store.describe() + ": rank "
                    + j + " did not prove knowledge of JCCL_AUTH_SECRET (wrong or missing secret): " + e.getMessage());
            } catch (IllegalArgumentException e) {
                throw new CollectiveException.Refused("rank " + rank + " refuses to join " + store.describe() + ": "
                    + e.getMessage());
            }
        }
        return records;
    }

    /**
     * Chooses a device per peer: the first of the preferred order that both ends opened. A pair whose choice reaches
     * a network device first needs the network devices of both ends, which open now, and a second exchange says
     * which each end opened (pairs are symmetric: both ends of such a pair take part).
     */
    private static Peer[] choosePeers(Store store, int rank, int size, CommunicatorOptions options, String hostId,
                                      JoinRecord[] records, DeviceChoice devices, int cqCapacity, long deadlineNs) {
        Log log = Log.get();
        String[] hostIds = new String[size];
        String[] devicesOf = new String[size];
        for (int j = 0; j < size; j++) {
            hostIds[j] = records[j].hostId();
            devicesOf[j] = records[j].devices();
        }
        DeviceChoice.Choices choices = devices.choosePeers(store, rank, hostId, hostIds, devicesOf, cqCapacity,
            deadlineNs);
        boolean[] sameHost = choices.sameHost();
        String[] choice = choices.devices();
        StringBuilder[] why = choices.reasons();
        Peer[] peers = new Peer[size];
        for (int j = 0; j < size; j++) {
            if (j == rank) {
                continue;
            }
            String chosen = choice[j];
            StringBuilder reasons = why[j];
            if (chosen == null) {
                throw new CollectiveException("rank " + rank + " has no transport in common with rank " + j + ": "
                    + reasons + "(JCCL_TRANSPORT=" + options.transports() + ")");
            }
            String reason = (devices.isSameHostDevice(chosen) ? "same host, shared memory"
                : reasons.isEmpty() ? (sameHost[j] ? "same host" : "different host") + ", " + chosen + " requested"
                : reasons.toString()).trim();
            if (!reasons.isEmpty() && devices.order().indexOf(chosen) > 0 && sameHost[j]) {
                log.warn(rank, Log.Subsys.INIT, "falling back to " + chosen + " for rank " + j + ": " + reasons);
            }
            DeviceResources device = devices.opened.get(chosen);
            peers[j] = new Peer(j, device, reason.endsWith(";") ? reason.substring(0, reason.length() - 1) : reason,
                options.chunkBytesFor(device.linkLayer()), options.rendezvousBytesFor(device.linkLayer()),
                records[j].hostId(), comparablePid(records[j]), sameHost[j]);
        }
        return peers;
    }

    /**
     * The peer's pid where it names the peer's process here (same PID namespace), else 0: containers that share a
     * host but not a PID namespace would otherwise see a live peer as gone, or miss its death behind a pid that
     * some process here happens to have.
     */
    private static long comparablePid(JoinRecord record) {
        return record.pidNamespace().equals(ProcessIds.pidNamespace()) ? record.pid() : 0;
    }

    /**
     * Publishes this rank's endpoint records for all its peers as one record, {@code ep/RANK} (one line per peer:
     * its rank, then the message path's record and the direct path's regions when it offers them), then reads every
     * peer's and connects; returns whether every peer's direct regions were mapped. One write per rank instead of
     * one per peer: at 8 ranks a shrink's new join made 56 writes to one store thread, in a row (the recovery
     * breakdown of docs/fault-tolerance.md).
     */
    private static boolean connect(Store store, int rank, MessagePath messagePath, DirectPath directPath,
                                   DeviceResources directDevice, long deadlineNs) {
        StringBuilder mine = new StringBuilder();
        for (Peer p : messagePath.peers()) {
            if (p != null) {
                mine.append(p.rank()).append(' ').append(messagePath.localRecord(p))
                    .append(directPath != null && p.device() == directDevice ? directPath.localRecord() : "")
                    .append('\n');
            }
        }
        store.setString("ep/" + rank, mine.toString(), remaining(deadlineNs));
        boolean mapped = directPath != null;
        for (Peer p : messagePath.peers()) {
            if (p != null) {
                String[] record = recordFor(store.getString("ep/" + p.rank(), remaining(deadlineNs)), rank, p.rank());
                messagePath.connect(p, record);
                mapped &= directPath != null && directPath.map(p, record);
            }
        }
        return mapped;
    }

    /** The fields of {@code from}'s endpoint record for {@code rank} in {@code from}'s published {@code ep/FROM}. */
    static String[] recordFor(String published, int rank, int from) {
        String prefix = rank + " ";
        int at = published.startsWith(prefix) ? 0 : published.indexOf("\n" + prefix);
        if (at < 0) {
            throw new CollectiveException("rank " + from + " published no endpoint for rank " + rank + " (ep/" + from
                + " names ranks " + published.lines().map(l -> l.split(" ", 2)[0]).toList() + ")");
        }
        int start = at == 0 ? prefix.length() : at + 1 + prefix.length();
        int end = published.indexOf('\n', start);
        return published.substring(start, end < 0 ? published.length() : end).split(" ");
    }

    /**
     * The barrier after connecting, and whether every rank mapped the direct path: each rank adds 1 to the counter
     * {@code connected} (plus 2^32 when it could not map every peer's direct regions); the rank whose add completes
     * the count publishes the total as {@code connected/all}, which every rank reads. Two store calls and one wait
     * per rank instead of a record per rank that every rank reads ({@code 2 x (size + 1)} calls, twice for the
     * direct path's verdict). A rank without a direct path counts as unmapped, so no rank enables it alone.
     */
    static boolean allConnected(Store store, int rank, int size, boolean mapped, long deadlineNs) {
        long total = store.add("connected", mapped ? 1 : (1L << 32) + 1, remaining(deadlineNs));
        if ((int) total == size) {
            store.setString("connected/all", Long.toString(total), remaining(deadlineNs));
        } else if ((int) total > size || (int) total <= 0) {
            throw new CollectiveException.Refused("rank " + rank + ": " + store.describe() + " counts " + (int) total
                + " ranks connected of " + size + ": another process of this job name joined (a rank started twice?)");
        }
        long all = Long.parseLong(store.getString("connected/all", remaining(deadlineNs)));
        return all >>> 32 == 0;
    }

    /**
     * Host groups for the hierarchical all-reduce: the ranks of this rank's host, and the first rank of every host
     * (in rank order, as ranks are visited in order). Plain loops: streams and lambdas here were first-time code that
     * every rank ran at start-up.
     */
    private static int[][] hostGroups(String[] hosts, int rank) {
        Map<String, List<Integer>> byHost = new LinkedHashMap<>();
        for (int j = 0; j < hosts.length; j++) {
            List<Integer> group = byHost.get(hosts[j]);
            if (group == null) {
                group = new ArrayList<>();
                byHost.put(hosts[j], group);
            }
            group.add(j);
        }
        List<Integer> leaders = new ArrayList<>();
        for (List<Integer> group : byHost.values()) {
            leaders.add(group.getFirst());
        }
        return new int[][] {toArray(byHost.get(hosts[rank])), toArray(leaders)};
    }

    private static int[] toArray(List<Integer> values) {
        int[] a = new int[values.size()];
        for (int i = 0; i < a.length; i++) {
            a[i] = values.get(i);
        }
        return a;
    }

    private static long remaining(long deadlineNs) {
        return Math.max(1, deadlineNs - System.nanoTime());
    }
}
