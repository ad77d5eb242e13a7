package io.jccl.collectives.bootstrap;

import io.jccl.collectives.CommunicatorOptions;
import io.jccl.collectives.message.DeviceResources;
import io.jccl.collectives.store.Store;
import io.jccl.verbs.Reach;
import io.jccl.verbs.Verbs;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Which device serves each peer: the first of the preferred order that both ends opened and that reaches the peer,
 * decided from what the devices say they reach ({@link Reach}), never from their names, so a new provider plugs in
 * without an edit here (NCCL's transports answer {@code canConnect} the same way). Same-host devices open at once;
 * the others only once some pair needs one: on one host they would go unused, and opening a network device
 * (sockets, a selector, an interface scan) costs a rank 20-45 ms of start-up.
 *
 * <p>Public (internal package) so that other services joining a job through the store, such as the transfer engine
 * of jccl-services, choose devices exactly as communicators do: {@link #choosePeers}.
 */
public final class DeviceChoice {
    /** {@link #choose} result: a network device comes first in the order and has not been opened yet. */
    public static final String NETWORK_NEEDED = "(network)";

    private final List<String> order;
    private final Map<String, Reach> reaches = new LinkedHashMap<>();
    /** Devices this rank opened, in preference order; and those it could not, with the reason. */
    final Map<String, DeviceResources> opened = new LinkedHashMap<>();
    final Map<String, String> unavailable = new LinkedHashMap<>();

    /** The choice for a rank with {@code options} (JCCL_TRANSPORT, JCCL_SHM_DISABLE). */
    public DeviceChoice(CommunicatorOptions options) {
        this.order = preferredDevices(options);
    }

    /**
     * The devices to try, in order: JCCL_TRANSPORT's (a provider name stands for its first device), else the
     * devices of the providers JCCL ships; same-host (shared-memory) devices are left out with JCCL_SHM_DISABLE.
     */
    private List<String> preferredDevices(CommunicatorOptions options) {
        List<String> names = new ArrayList<>();
        if (!options.transports().isBlank()) {
            for (String s : options.transports().split(",")) {
                String d = s.trim();
                if (d.isEmpty()) {
                    continue;
                }
                if (!d.matches(".*\\d$")) {
                    d = d + "0"; // provider name → its first device
                }
                names.add(d);
            }
        } else {
            names.addAll(Verbs.defaultDeviceNames());
        }
        List<String> result = new ArrayList<>();
        for (String d : names) {
            if (options.shmDisabled() && isSameHostDevice(d)) {
                continue;
            }
            result.add(d);
        }
        return result;
    }

    /** The preferred order (for messages). */
    public List<String> order() {
        return order;
    }

    /** Which peers device {@code name} reaches, or null when there is no such device (the reason is recorded). */
    private Reach reach(String name) {
        if (reaches.containsKey(name)) {
            return reaches.get(name);
        }
        Reach reach;
        try {
            reach = Verbs.device(name).reach();
        } catch (RuntimeException e) {
            reach = null;
            unavailable.put(name, e.getMessage());
        }
        reaches.put(name, reach);
        return reach;
    }

    /**
     * Whether {@code name} reaches only ranks with this rank's host identity (shared memory). Other devices reach
     * their peers whatever host they name (a network; an in-process device reaches what is in its process, and
     * refuses anything else when it connects).
     */
    public boolean isSameHostDevice(String name) {
        return reach(name) == Reach.HOST;
    }

    /**
     * Opens the devices of the order of one kind (same-host ones, or the others) that are not open yet, for peers
     * within {@code peers} (all ranks on this host: a network device listens on loopback); failures go to
     * {@link #unavailable} with their reason.
     */
    public void open(boolean sameHostDevices, int cqCapacity, Reach peers) {
        for (String d : order) {
            if (isSameHostDevice(d) == sameHostDevices && !opened.containsKey(d) && !unavailable.containsKey(d)) {
                try {
                    opened.put(d, DeviceResources.open(d, cqCapacity, peers));
                } catch (RuntimeException e) {
                    unavailable.put(d, e.getMessage());
                }
            }
        }
    }

    /**
     * The device for the pair with rank {@code peer}: the first of the order that both ends opened (and that
     * reaches the peer); null if none, with the reasons in {@code reasons}. With {@code deferNetwork}, reaching a
     * network device this rank has not tried to open yet returns {@link #NETWORK_NEEDED}: the choice then waits
     * for both ends' network devices. Both ends compute the same answer from the same facts.
     */
    public String choose(int peer, boolean sameHost, String peerHost, List<String> theirs, boolean deferNetwork,
                  StringBuilder reasons) {
        for (String d : order) {
            boolean local = isSameHostDevice(d);
            if (local && !sameHost) {
                reasons.append("no shared memory with rank ").append(peer).append(": different host (")
                    .append(peerHost).append("); ");
                continue;
            }
            if (deferNetwork && !local && !opened.containsKey(d) && !unavailable.containsKey(d)) {
                return NETWORK_NEEDED;
            }
            if (!opened.containsKey(d)) {
                reasons.append(d).append(" unavailable here (").append(unavailable.get(d)).append("); ");
                continue;
            }
            if (!theirs.contains(d)) {
                reasons.append("rank ").append(peer).append(" cannot open ").append(d).append("; ");
                continue;
            }
            return d;
        }
        return null;
    }

    /** The devices this rank opened, by name, in preference order. */
    public Map<String, DeviceResources> opened() {
        return opened;
    }

    /** The devices this rank could not open, with the reason. */
    public Map<String, String> unavailable() {
        return unavailable;
    }

    /**
     * What {@link #choosePeers} decided, indexed by rank (this rank's entries are null/false).
     *
     * @param devices the device per peer, null when none both ends opened reaches it
     * @param reasons why each peer's device was (or was not) chosen
     * @param sameHost whether each peer shares this rank's host identity
     */
    public record Choices(String[] devices, StringBuilder[] reasons, boolean[] sameHost) {
    }

    /**
     * Chooses a device per peer: the first of the preferred order that both ends opened. A pair whose choice reaches
     * a network device first needs the network devices of both ends, which open now, and a second exchange through
     * {@code store} (key {@code devices/RANK}) says which each end opened (pairs are symmetric: both ends of such a
     * pair take part). {@code hostIds[j]} and {@code devicesOf[j]} (comma list) are what rank j published.
     */
    public Choices choosePeers(Store store, int rank, String hostId, String[] hostIds, String[] devicesOf,
                               int cqCapacity, long deadlineNs) {
        int size = hostIds.length;
        boolean[] sameHost = new boolean[size];
        String[] choice = new String[size];
        StringBuilder[] why = new StringBuilder[size];
        List<List<String>> theirDevices = new ArrayList<>();
        boolean needNetwork = false;
        for (int j = 0; j < size; j++) {
            theirDevices.add(j == rank ? List.of() : new ArrayList<>(Arrays.asList(devicesOf[j].split(","))));
            if (j != rank) {
                sameHost[j] = hostIds[j].equals(hostId);
                why[j] = new StringBuilder();
                choice[j] = choose(j, sameHost[j], hostIds[j], theirDevices.get(j), true, why[j]);
                needNetwork |= NETWORK_NEEDED.equals(choice[j]);
            }
        }
        if (needNetwork) {
            // Every rank on this host (one host identity): a network device need not be reachable from elsewhere.
            boolean oneHost = true;
            for (String h : hostIds) {
                oneHost &= h.equals(hostId);
            }
            open(false, cqCapacity, oneHost ? Reach.HOST : Reach.NETWORK);
            List<String> network = openedNetworkDevices();
            store.setString("devices/" + rank, network.isEmpty() ? "-" : String.join(",", network),
                remaining(deadlineNs));
            for (int j = 0; j < size; j++) {
                if (j != rank && NETWORK_NEEDED.equals(choice[j])) {
                    String theirs = store.getString("devices/" + j, remaining(deadlineNs));
                    if (!theirs.equals("-")) {
                        theirDevices.get(j).addAll(Arrays.asList(theirs.split(",")));
                    }
                    why[j] = new StringBuilder();
                    choice[j] = choose(j, sameHost[j], hostIds[j], theirDevices.get(j), false, why[j]);
                }
            }
        }
        return new Choices(choice, why, sameHost);
    }

    private static long remaining(long deadlineNs) {
        return Math.max(1, deadlineNs - System.nanoTime());
    }

    /** The opened devices that are not same-host ones (what the second exchange publishes). */
    public List<String> openedNetworkDevices() {
        List<String> network = new ArrayList<>();
        for (String d : opened.keySet()) {
            if (!isSameHostDevice(d)) {
                network.add(d);
            }
        }
        return network;
    }

    /** Closes every opened device (setup failed). */
    public void closeAll() {
        for (DeviceResources d : opened.values()) {
            d.close();
        }
    }
}
