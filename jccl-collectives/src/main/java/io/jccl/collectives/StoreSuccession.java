package io.jccl.collectives;

import io.jccl.collectives.store.Store;
import io.jccl.collectives.store.StoreException;
import io.jccl.collectives.store.StoreGoneException;
import io.jccl.collectives.store.TcpStore;
import io.jccl.collectives.store.TcpStoreServer;
import io.jccl.common.Config;
import io.jccl.common.Log;

import java.net.InetAddress;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.function.UnaryOperator;

/**
 * The stores that {@link Communicator#shrink} and {@link Communicator#agree} may decide through, in a fixed order
 * every rank knows from the join: first the job's store (rank 0's TCP store with {@code fromEnvironment}), then a
 * <b>standby store</b> served by each of ranks 1..K ({@code JCCL_STANDBY_STORES}, default 4). A standby is a
 * {@link TcpStoreServer} the rank starts at creation and that holds nothing until the job's store is lost; its
 * address (the interface that reaches the job's store) and port go through the job's store at creation, so every
 * rank has the whole list in memory before anything fails.
 *
 * <p>Choosing the store, deterministically: a rank runs the agreement ({@link Shrink}) on the first store of the
 * list that answers. A store whose process died refuses connections at once (a dead host's peers see the refusal
 * or, on another host, no answer within {@code JCCL_PEER_TIMEOUT}), so every survivor skips the same dead stores
 * and meets the others on the same live one; survivors' failure detectors need not agree, because a store is never
 * skipped on suspicion, only when it does not answer. A store that dies during the agreement fails its requests;
 * the rank moves on to the next store under the same keys. Where ranks could still end on different stores (a
 * stopped store host that wakes just as the others gave up on it), the later store wins: before it proposes, a
 * rank looks at the stores after its own for survivors gathering there (a marker key) and joins them instead;
 * so a stopped rank that wakes and finds its own standby answering still meets the others' decision and is refused.
 *
 * <p>After a shrink the new communicator inherits the list from the store that decided onwards, the ranks
 * renumbered and the members' standbys only: a second failure, including that of the new store's host, fails over
 * again. Not on any hot path: the standby costs one idle selector thread and one listening socket on K ranks.
 */
final class StoreSuccession implements AutoCloseable {
    /** The marker key under an agreement's prefix that says survivors gather on this store. */
    static final String ACTIVE_KEY = "active";
    /** Default number of standby stores (ranks 1..K). */
    static final int DEFAULT_STANDBY_STORES = 4;
    /** How long a look at a later store for gathering survivors may take: stores that are slower count as absent. */
    private static final long LOOK_ABOVE_NS = TimeUnit.MILLISECONDS.toNanos(500);

    /** One store of the list: who serves it (a rank of the current communicator, -1: no member), where. */
    private static final class Candidate {
        final int hostRank;
        final String host;
        final int port;
        /** The client, opened on first use (the job's store: the communicator's own). */
        TcpStore client;
        /** Whether this object opened the client (and so closes it). */
        boolean ownsClient;
        boolean dead;

        Candidate(int hostRank, String host, int port, TcpStore client, boolean ownsClient) {
            this.hostRank = hostRank;
            this.host = host;
            this.port = port;
            this.client = client;
            this.ownsClient = ownsClient;
        }

        @Override
        public String toString() {
            return (hostRank < 0 ? "store" : "rank " + hostRank + "'s store") + " at " + host + ":" + port;
        }
    }

    /** Where an agreement was decided: the decision, the list index of the store and that store (unwrapped). */
    record Located(Shrink.Decision decision, int index, Store base) {
    }

    /** The agreement protocol on one store ({@link Shrink#decideOrMove}); null: move to a later store. */
    interface Protocol {
        Shrink.Decision on(Store namespaced, java.util.function.BooleanSupplier movedAbove);
    }

    private final List<Candidate> candidates;
    private final String secret;
    private final int rank;
    /** This rank's standby server, or null. */
    private TcpStoreServer server;
    /**
     * Where the ranks published their liveness ports ({@code live/RANK} = "address port", {@link Liveness}): the job's
     * store in the world communicator's namespace, read only when an agreement waits for a rank (not at creation: N
     * reads per rank would be N squared at the job's start); null: none (a joiner's list). During an agreement a
     * silent rank on another host is probed there, so that one killed after the revocation broke the links is left
     * out in a round trip, not after JCCL_PEER_TIMEOUT. Without the job's store (rank 0 dead) nothing is probed.
     */
    private final Store liveStore;
    /** This communicator's ranks as the world communicator numbered them (the keys of {@link #liveStore}). */
    private final int[] worldRanks;
    /** Per rank: its address once read; found dead by a probe; when last probed; whether a probe runs (this). */
    private final String[] addresses;
    private final boolean[] refused;
    private final long[] probedNs;
    private final boolean[] probing;
    /** This rank's liveness address ("address port"), carried in its agreement records; null: none. */
    private String ownAddress;
    /** Closed, or its clients handed on: a background open ({@link #preopenAbove}) that ends now opens nothing. */
    private volatile boolean closedOrHandedOn;

    private StoreSuccession(List<Candidate> candidates, TcpStoreServer server, String secret, int rank,
                             Store liveStore, int[] worldRanks) {
        this.candidates = candidates;
        this.server = server;
        this.secret = secret;
        this.rank = rank;
        this.liveStore = liveStore;
        this.worldRanks = worldRanks;
        int n = worldRanks == null ? 0 : worldRanks.length;
        this.addresses = new String[n];
        this.refused = new boolean[n];
        this.probedNs = new long[n];
        this.probing = new boolean[n];
    }

    /** How often one rank's liveness port is probed at most while an agreement waits for it. */
    private static final long PROBE_INTERVAL_NS = TimeUnit.MILLISECONDS.toNanos(100);

    /**
     * Whether rank {@code j}'s liveness port refused a connection (its process is gone). Never blocks: starts a probe
     * in the background (at most one per rank at a time, one per {@link #PROBE_INTERVAL_NS}) and answers with what
     * the probes found so far.
     */
    boolean refused(int j) {
        if (j < 0 || j >= addresses.length || j == rank) {
            return false;
        }
        synchronized (this) {
            if (refused[j]) {
                return true;
            }
            if (liveStore == null && addresses[j] == null) {
                return false; // no address known: nothing to probe
            }
            long now = System.nanoTime();
            if (refused[j] || probing[j] || (probedNs[j] != 0 && now - probedNs[j] < PROBE_INTERVAL_NS)) {
                return refused[j];
            }
            probing[j] = true;
            probedNs[j] = now;
        }
        Thread.ofVirtual().name("jccl-liveness-probe").start(() -> {
            Liveness.Verdict v = Liveness.Verdict.UNKNOWN;
            try {
                String address = address(j);
                if (address != null) {
                    v = Liveness.probe(address, PROBE_INTERVAL_NS);
                }
            } finally {
                synchronized (this) {
                    probing[j] = false;
                    refused[j] |= v == Liveness.Verdict.DEAD;
                }
            }
        });
        return false;
    }

    /** Rank {@code j}'s liveness port, read from the job's store on first use; null when unknown. */
    private String address(int j) {
        synchronized (this) {
            if (addresses[j] != null) {
                return addresses[j];
            }
        }
        if (liveStore == null) {
            return null;
        }
        try {
            String key = "live/" + worldRanks[j];
            long timeoutNs = PROBE_INTERVAL_NS;
            String v = liveStore.check(key, timeoutNs) ? liveStore.getString(key, timeoutNs) : "-";
            if (v.equals("-")) {
                return null;
            }
            synchronized (this) {
                addresses[j] = v;
            }
            return v;
        } catch (RuntimeException e) {
            return null; // the job's store is gone (its host died): no probe, the peer timeout decides
        }
    }

    /**
     * The store of rank {@code host} (its standby store, or the job's store for rank 0) refused this rank's
     * connection after serving it: that process is gone, which the agreement then knows without a liveness probe.
     * Why: when the job's store died with rank 0, rank 0's liveness address (published there) could not be read, and
     * an agreement that began before rank 0 died waited for its record until JCCL_PEER_TIMEOUT (fault injection over
     * tcp0 between namespaces, seed 66004: 30 s).
     */
    void hostGone(int host) {
        if (host >= 0 && host < refused.length && host != rank) {
            synchronized (this) {
                refused[host] = true;
            }
        }
    }

    /** This rank's liveness address for its agreement records, or null. */
    String ownAddress() {
        return ownAddress;
    }

    /**
     * Rank {@code j}'s liveness address as its agreement record carried it: kept unless one is known, so that it is
     * probed even when the job's store, where the addresses were published, died with rank 0.
     */
    void learnAddress(int j, String address) {
        if (j >= 0 && j < addresses.length && j != rank && address != null && !address.equals("-")) {
            synchronized (this) {
                if (addresses[j] == null) {
                    addresses[j] = address;
                }
            }
        }
    }

    /** {@code JCCL_STANDBY_STORES}: how many ranks (1..K) serve a standby store; 0 turns the succession off. */
    static int standbyStores() {
        String v = Config.value("JCCL_STANDBY_STORES");
        if (v == null || v.isBlank()) {
            return DEFAULT_STANDBY_STORES;
        }
        try {
            int n = Integer.parseInt(v.trim());
            if (n >= 0) {
                return n;
            }
        } catch (NumberFormatException e) {
            // reported below
        }
        throw new IllegalArgumentException("JCCL_STANDBY_STORES=" + v + ": expected a count >= 0 (0: no standby "
            + "stores; shrink and agree then need the job's store host alive)");
    }

    /**
     * Sets up the list at a communicator's creation (every rank calls it, after the join): ranks 1..K start their
     * standby servers and publish where they listen under {@code standby/RANK} in {@code store} (the communicator's
     * namespace); every rank reads the K addresses. {@code primary} is the job's store client.
     */
    static StoreSuccession start(TcpStore primary, Store store, int rank, int size, int standbyCount, String secret,
                                 long deadlineNs) {
        int hosts = Math.min(standbyCount, size - 1);
        TcpStoreServer server = null;
        try {
            InetAddress local = primary.localAddress();
            String live = null;
            if (local != null) {
                try {
                    live = Liveness.listen(local);
                } catch (java.io.IOException e) {
                    Log.get().info(rank, Log.Subsys.INIT, () -> "no liveness port on " + local + ": " + e);
                }
            }
            store.setString("live/" + rank, live == null ? "-" : live, remaining(deadlineNs));
            if (rank >= 1 && rank <= hosts) {
                String address = local == null ? primary.host() : local.getHostAddress();
                server = TcpStoreServer.forStore(address, 0, Config.value("JCCL_STORE_BIND"),
                    TcpStoreServer.Settings.fromConfig().withSecret(secret));
                store.setString("standby/" + rank, address + " " + server.port(), remaining(deadlineNs));
            }
            List<Candidate> list = new ArrayList<>();
            list.add(new Candidate(0, primary.host(), primary.port(), primary, false));
            for (int h = 1; h <= hosts; h++) {
                String[] f = store.getString("standby/" + h, remaining(deadlineNs)).split(" ");
                list.add(new Candidate(h, f[0], Integer.parseInt(f[1]), null, false));
            }
            int[] world = new int[size];
            java.util.Arrays.setAll(world, j -> j);
            StoreSuccession s = new StoreSuccession(list, server, secret, rank, store, world);
            s.ownAddress = live;
            return s;
        } catch (RuntimeException e) {
            if (server != null) {
                server.close();
            }
            throw e;
        }
    }

    /**
     * Runs {@code protocol} on the first store of the list that answers and returns where it decided. A store that
     * refuses connections, does not answer within {@code peerTimeoutNs}, or fails a request is marked dead and the
     * next one is tried; {@code namespace} wraps a store into the communicator's namespace (sealing included).
     *
     * @throws CollectiveException when no store of the list answers
     */
    Located decide(String what, Protocol protocol, UnaryOperator<Store> namespace, String prefix, long peerTimeoutNs,
                   long deadlineNs) {
        Log log = Log.get();
        int i = 0;
        while (i < candidates.size()) {
            Candidate c = candidates.get(i);
            if (c.dead || System.nanoTime() - deadlineNs > 0) {
                i++;
                continue;
            }
            TcpStore base = open(c, Math.min(peerTimeoutNs, remaining(deadlineNs)));
            if (base == null) {
                c.dead = true;
                int at = i;
                log.warn(rank, Log.Subsys.INIT, what + ": " + c + " does not answer; trying the next store of the "
                    + "succession (" + (at + 1 < candidates.size() ? candidates.get(at + 1) : "none left") + ")");
                i++;
                continue;
            }
            int index = i;
            int[] above = {-1};
            preopenAbove(index);
            try {
                Shrink.Decision d = protocol.on(namespace.apply(base), () -> {
                    above[0] = gatheringAbove(index, namespace, prefix);
                    return above[0] >= 0;
                });
                if (d != null) {
                    if (index > 0) {
                        log.info(rank, Log.Subsys.INIT, () -> what + " decided through " + c + " (standby store)");
                    }
                    return new Located(carryOn(d, index, namespace, prefix), index, base);
                }
                int to = above[0];
                log.info(rank, Log.Subsys.INIT, () -> what + ": survivors gather on " + candidates.get(to)
                    + ", after " + c + " in the succession: joining them there");
                i = to;
            } catch (StoreException e) {
                c.dead = true;
                if (e instanceof StoreGoneException) {
                    hostGone(c.hostRank);
                }
                log.warn(rank, Log.Subsys.INIT, what + ": " + c + " failed during the agreement (" + e.getMessage()
                    + "); trying the next store of the succession");
                i++;
            }
        }
        throw new CollectiveException("rank " + rank + ": " + what + " found no live store to agree through: the "
            + "job's store and every standby store (" + candidates + ") refused or did not answer within "
            + TimeUnit.NANOSECONDS.toMillis(peerTimeoutNs) + " ms (JCCL_PEER_TIMEOUT); JCCL_STANDBY_STORES sets "
            + "how many ranks serve one");
    }

    /**
     * Makes the decision taken on store {@code index} durable before this rank returns it: a copy, by compare-and-set
     * against absence, on the first live store after it. Why: a rank still polling the deciding store when that
     * store's host exits or dies (it decided and left) fails over to the next store; without the copy it decided
     * again there without the ranks that had left, and two ranks returned different member lists (fault injection
     * over tcp0, seeds 64030 and 64038: the store's host exited after the final agreement). With the copy it reads
     * the same decision there. If a decision is already there (others failed over first and decided), that one is
     * returned instead: it is the one every later rank reads, and a rank it leaves out is refused, as a late one.
     */
    private Shrink.Decision carryOn(Shrink.Decision d, int index, UnaryOperator<Store> namespace, String prefix) {
        byte[] encoded = (Shrink.format(d.members()) + ";" + d.value()).getBytes(java.nio.charset.StandardCharsets.UTF_8);
        for (int j = index + 1; j < candidates.size(); j++) {
            Candidate c = candidates.get(j);
            if (c.dead) {
                continue;
            }
            TcpStore base = open(c, LOOK_ABOVE_NS);
            if (base == null) {
                continue; // gone (or slow): a rank failing over skips it too, or finds the copy on a later one
            }
            try {
                Store ns = namespace.apply(base);
                String key = prefix + "members";
                if (ns.compareAndSet(key, null, encoded, LOOK_ABOVE_NS)) {
                    return d;
                }
                return Shrink.parse(ns.getString(key, LOOK_ABOVE_NS), Integer.MAX_VALUE); // written by the protocol
            } catch (StoreException e) {
                // slow or gone: try the next one
            }
        }
        return d; // no live store after it: nowhere to fail over to, nothing to copy
    }

    /**
     * Connects to the stores after {@code index} in the background (a virtual thread each), while this rank waits
     * for the others' join records: the look at them before proposing ({@link #gatheringAbove}) then finds the
     * connections made. Measured before: that look took 27-100 ms of the agreement (4 ranks, shm0, loaded host).
     */
    private void preopenAbove(int index) {
        for (int j = index + 1; j < candidates.size(); j++) {
            Candidate c = candidates.get(j);
            if (!c.dead && c.client == null) {
                Thread.ofVirtual().name("jccl-store-preopen").start(() -> open(c, LOOK_ABOVE_NS));
            }
        }
    }

    /**
     * The latest store after {@code index} where survivors gather under {@code prefix}, or -1. The stores are looked
     * at in parallel (a virtual thread each): one look costs a connection and a handshake to each (tens of
     * milliseconds on a loaded host), and every proposal makes it, so in a row they added up on the recovery path.
     */
    private int gatheringAbove(int index, UnaryOperator<Store> namespace, String prefix) {
        List<Thread> looks = new ArrayList<>();
        boolean[] gathering = new boolean[candidates.size()];
        for (int j = index + 1; j < candidates.size(); j++) {
            Candidate c = candidates.get(j);
            if (c.dead) {
                continue;
            }
            int at = j;
            looks.add(Thread.ofVirtual().start(() -> gathering[at] = lookAt(c, namespace, prefix)));
        }
        for (Thread t : looks) {
            try {
                t.join(); // each look is bounded (LOOK_ABOVE_NS per step)
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                break;
            }
        }
        int found = -1;
        for (int j = index + 1; j < candidates.size(); j++) {
            if (gathering[j]) {
                found = j;
            }
        }
        return found;
    }

    /** Whether survivors gather on {@code c} under {@code prefix} (a short look: slow or gone counts as no). */
    private boolean lookAt(Candidate c, UnaryOperator<Store> namespace, String prefix) {
        TcpStore base = open(c, LOOK_ABOVE_NS);
        if (base == null) {
            return false; // not marked dead: it was only a short look
        }
        try {
            return namespace.apply(base).check(prefix + ACTIVE_KEY, LOOK_ABOVE_NS);
        } catch (StoreException e) {
            return false; // slow or gone: not where the others gather
        }
    }

    /**
     * The candidate's client if something accepts connections there, else null (opening it when needed). No probe
     * connection first: a client that is connected already is returned as it is (a dead server fails its first call
     * at once, refused, {@link TcpStore}, and a stopped one does not answer either way), and a new one is refused at
     * once by a dead server, which tells that its host rank is gone ({@link #hostGone}). The probe, a connection of
     * its own, cost every agreement one per store it looked at (the job's store, the later standby stores, the copy
     * of the decision), cold, on the recovery path, and hid a refusal behind "unreachable".
     */
    private TcpStore open(Candidate c, long timeoutNs) {
        synchronized (c) { // looks at later stores run in parallel (never two on one candidate)
            return openLocked(c, timeoutNs);
        }
    }

    private TcpStore openLocked(Candidate c, long timeoutNs) {
        if (c.client == null && !closedOrHandedOn) {
            try {
                // its host published it: refused now means gone (a kill during the agreement), not "still starting"
                c.client = TcpStore.toRunningServer(c.host, c.port, timeoutNs, secret);
                c.ownsClient = true;
            } catch (StoreGoneException e) {
                // refused: the host rank's process is gone, which the agreement then knows without a liveness probe
                // (seed 66044: rank 0 and then rank 2, the host of a standby store, killed 88 ms apart; rank 2's
                // liveness address was in the dead job's store, and the survivors waited 30 s for its record)
                hostGone(c.hostRank);
                return null;
            } catch (StoreException e) {
                return null; // accepted the connection but no handshake within the time: a stopped process
            }
        }
        return c.client;
    }

    /**
     * The list for the communicator a shrink decided at {@code index} with {@code members} (old ranks, ascending):
     * that store first, then the later ones whose hosts are members, renumbered. This rank's server and the clients
     * go with it; this object is left empty.
     */
    StoreSuccession handOn(int index, int[] members) {
        closedOrHandedOn = true;
        List<Candidate> next = new ArrayList<>();
        for (int j = index; j < candidates.size(); j++) {
            Candidate c = candidates.get(j);
            int newHost = c.hostRank < 0 ? -1 : Arrays.binarySearch(members, c.hostRank);
            if (j > index && newHost < 0) { // not c.dead: that is this rank's view, and the lists must agree
                continue;
            }
            synchronized (c) { // a background open may still run (preopenAbove)
                next.add(new Candidate(Math.max(-1, newHost), c.host, c.port, c.client, c.ownsClient));
                c.ownsClient = false;
            }
        }
        int[] world = null;
        if (worldRanks != null) {
            world = new int[members.length];
            for (int j = 0; j < members.length; j++) {
                world[j] = worldRanks[members[j]];
            }
        }
        StoreSuccession s = new StoreSuccession(next, server, secret, Arrays.binarySearch(members, rank),
            liveStore, world);
        s.ownAddress = ownAddress;
        synchronized (this) {
            for (int j = 0; j < s.addresses.length && members[j] < addresses.length; j++) {
                s.addresses[j] = addresses[members[j]]; // learned from records: the job's store may be gone
            }
        }
        server = null;
        return s;
    }

    /**
     * The list for a communicator split off this one ({@link Communicator#split}) with {@code members} (this
     * communicator's ranks, in the new communicator's rank order): the same stores in the same order, the hosts
     * renumbered (-1: not a member; a standby whose host is not a member still serves, its process is alive), so
     * that a split communicator's {@code shrink} and {@code agree} survive the store host's death too. Deterministic
     * in the parent's list and {@code members}, hence the same on every member. Shares the job's store's client
     * (never closes it) and opens its own clients to standbys when it needs them; the servers stay the parent's.
     */
    StoreSuccession forSplit(int[] members) {
        List<Candidate> next = new ArrayList<>();
        for (int j = 0; j < candidates.size(); j++) {
            Candidate c = candidates.get(j);
            int newHost = -1;
            for (int i = 0; i < members.length; i++) {
                if (members[i] == c.hostRank) {
                    newHost = i;
                }
            }
            next.add(new Candidate(newHost, c.host, c.port, j == 0 ? c.client : null, false));
        }
        int newRank = -1;
        int[] world = worldRanks == null ? null : new int[members.length];
        for (int i = 0; i < members.length; i++) {
            if (members[i] == rank) {
                newRank = i;
            }
            if (world != null) {
                world[i] = worldRanks[members[i]];
            }
        }
        StoreSuccession s = new StoreSuccession(next, null, secret, newRank, liveStore, world);
        s.ownAddress = ownAddress;
        return s;
    }

    /** The list as {@code hostRank@host:port,...}, for a joining process ({@link #fromDescription}). */
    String describe() {
        StringBuilder sb = new StringBuilder();
        for (Candidate c : candidates) {
            if (!sb.isEmpty()) {
                sb.append(',');
            }
            sb.append(c.hostRank).append('@').append(c.host).append(':').append(c.port);
        }
        return sb.toString();
    }

    /**
     * The list a joining process received from the survivors ({@link #describe}); {@code joinedThrough} is the
     * client it joined with, used for the store at the same address.
     */
    static StoreSuccession fromDescription(String description, TcpStore joinedThrough, int rank, String secret) {
        List<Candidate> list = new ArrayList<>();
        for (String item : description.split(",")) {
            int at = item.indexOf('@');
            int colon = item.lastIndexOf(':');
            String host = item.substring(at + 1, colon);
            int port = Integer.parseInt(item.substring(colon + 1));
            boolean same = port == joinedThrough.port() && host.equals(joinedThrough.host());
            list.add(new Candidate(Integer.parseInt(item.substring(0, at)), host, port, same ? joinedThrough : null,
                false));
        }
        return new StoreSuccession(list, null, secret, rank, null, null);
    }

    /** The store the list starts with, unwrapped (the one a communicator created by a shrink joined through). */
    Store first() {
        return candidates.get(0).client;
    }

    /** Closes this rank's standby server and the clients this object opened. */
    @Override
    public void close() {
        closedOrHandedOn = true;
        for (Candidate c : candidates) {
            synchronized (c) { // a background open may still run (preopenAbove)
                if (c.ownsClient && c.client != null) {
                    c.client.close();
                    c.ownsClient = false;
                }
            }
        }
        if (server != null) {
            server.close();
            server = null;
        }
    }

    @Override
    public String toString() {
        return candidates.toString();
    }

    private static long remaining(long deadlineNs) {
        return Math.max(1, deadlineNs - System.nanoTime());
    }
}
