package io.jccl.collectives;

import io.jccl.collectives.store.FileStore;
import io.jccl.collectives.store.Store;
import io.jccl.collectives.store.StoreException;
import io.jccl.collectives.store.TcpStore;
import io.jccl.collectives.store.TorchTcpStore;
import io.jccl.common.Config;
import io.jccl.common.Log;

import java.net.BindException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * Where rank, world size and the rendezvous store come from, by launcher:
 * <ul>
 * <li>JCCL: JCCL_RANK, JCCL_WORLD_SIZE, JCCL_LOCAL_RANK, JCCL_STORE_ADDR ({@code host:port} or {@code file:/path})</li>
 * <li>torchrun: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT</li>
 * <li>Open MPI: OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK; the store from JCCL_STORE_ADDR or MASTER_ADDR/PORT</li>
 * <li>Slurm: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; the store on the first host of SLURM_NODELIST (or
 * SLURM_JOB_NODELIST) at MASTER_PORT / JCCL_STORE_PORT (default 29500) unless JCCL_STORE_ADDR/MASTER_ADDR say
 * otherwise</li>
 * <li>Kubernetes Indexed Job: JOB_COMPLETION_INDEX (which Kubernetes sets in every pod of a Job with
 * {@code completionMode: Indexed}) is the rank; the world size from JCCL_WORLD_SIZE (the Job's completions) and the
 * store from JCCL_STORE_ADDR, normally pod 0's name under the Job's headless service ({@code jccl k8s} writes
 * both; docs/kubernetes.md)</li>
 * </ul>
 * Launchers are tried in this order, so a torchrun or mpirun started inside a pod keeps its own variables.
 * Rank 0 starts the TCP store server unless JCCL_STORE_SERVER=0 (a standalone {@code TcpStoreServer} runs it). The
 * server listens where the store address points when that is an address of this host ({@code 127.0.0.1}: loopback
 * only), on all interfaces for {@code 0.0.0.0} or {@code JCCL_STORE_BIND=*}; with {@code JCCL_AUTH_SECRET} every
 * store connection authenticates ({@link #openStore(long, String)}).
 *
 * <p>Under torchrun with {@code TORCHELASTIC_USE_AGENT_STORE=True} the elastic agent already serves torch's
 * {@code TCPStore} at MASTER_ADDR:MASTER_PORT: no rank starts a server, every rank is a {@link TorchTcpStore} client of
 * the agent's store (as torch's own process groups are), its keys under {@code jccl/attempt_<TORCHELASTIC_RESTART_COUNT>}
 * so that a restarted job never reads a previous attempt's records. {@code JCCL_STORE_PROTOCOL} overrides the choice:
 * {@code torch} (a torch store serves the address), {@code jccl} (JCCL's own), {@code auto} (the default: torch under
 * the agent store; without {@code TORCHELASTIC_USE_AGENT_STORE} a torchrun-style launch also uses a torch store it
 * finds already serving MASTER_PORT).
 *
 * <p>A rank outside {@code 0..worldSize-1}, a world size below 1 or a negative local rank fails here at once, naming
 * the variables, rather than waiting for peers that can never come.
 *
 * @param rank this process's rank
 * @param worldSize number of ranks
 * @param localRank rank among the processes of this host (-1 when unknown)
 * @param storeAddress {@code host:port} or {@code file:/path}
 * @param launcher which convention supplied the rank (jccl, torchrun, openmpi, slurm, kubernetes)
 * @param startServer whether this process should run the TCP store server
 * @param storeProtocol {@code jccl} (JCCL's TcpStore), {@code torch} (a client of torch's TCPStore) or {@code auto}
 *     (JCCL's, unless MASTER_PORT is found already served by a torch TCPStore)
 * @param restartCount torchrun's TORCHELASTIC_RESTART_COUNT (0 elsewhere): the torch store's keys live under
 *     {@code jccl/attempt_<restartCount>}
 */
public record LaunchEnvironment(int rank, int worldSize, int localRank, String storeAddress, String launcher,
                                boolean startServer, String storeProtocol, int restartCount) {
    /** Default store port (torchrun's). */
    public static final int DEFAULT_PORT = 29500;
    /** JCCL's own store protocol ({@link TcpStore}). */
    public static final String PROTOCOL_JCCL = "jccl";
    /** torch's TCPStore protocol ({@link TorchTcpStore}). */
    public static final String PROTOCOL_TORCH = "torch";
    /** JCCL's protocol unless a torch TCPStore already serves the address. */
    public static final String PROTOCOL_AUTO = "auto";

    /** The launch as before store protocols: JCCL's store, restart count 0. */
    public LaunchEnvironment(int rank, int worldSize, int localRank, String storeAddress, String launcher,
                             boolean startServer) {
        this(rank, worldSize, localRank, storeAddress, launcher, startServer, PROTOCOL_JCCL, 0);
    }

    /**
     * Whether {@code env} carries a launcher's rank (the variables {@link #detect} looks for: JCCL_RANK, torchrun's
     * RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID or a Kubernetes Indexed Job's JOB_COMPLETION_INDEX): tools that start
     * local ranks themselves when run by hand ask this first.
     */
    public static boolean launched(Map<String, String> env) {
        return has(env, "JCCL_RANK") || has(env, "RANK") || has(env, "OMPI_COMM_WORLD_RANK")
            || has(env, "SLURM_PROCID") || has(env, "JOB_COMPLETION_INDEX");
    }

    /** Reads {@code env} (normally {@link System#getenv()}). */
    public static LaunchEnvironment detect(Map<String, String> env) {
        String launcher;
        String rank;
        String size;
        String local;
        String[] names; // the variables of rank, world size and local rank, for error messages
        if (has(env, "JCCL_RANK")) {
            launcher = "jccl";
            names = new String[] {"JCCL_RANK", "JCCL_WORLD_SIZE", "JCCL_LOCAL_RANK"};
            rank = env.get("JCCL_RANK");
            size = env.get("JCCL_WORLD_SIZE");
            local = env.get("JCCL_LOCAL_RANK");
        } else if (has(env, "RANK") && has(env, "WORLD_SIZE")) {
            launcher = "torchrun";
            names = new String[] {"RANK", "WORLD_SIZE", "LOCAL_RANK"};
            rank = env.get("RANK");
            size = env.get("WORLD_SIZE");
            local = env.get("LOCAL_RANK");
        } else if (has(env, "OMPI_COMM_WORLD_RANK")) {
            launcher = "openmpi";
            names = new String[] {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"};
            rank = env.get("OMPI_COMM_WORLD_RANK");
            size = env.get("OMPI_COMM_WORLD_SIZE");
            local = env.get("OMPI_COMM_WORLD_LOCAL_RANK");
        } else if (has(env, "SLURM_PROCID")) {
            launcher = "slurm";
            rank = env.get("SLURM_PROCID");
            size = has(env, "SLURM_NTASKS") ? env.get("SLURM_NTASKS") : env.get("SLURM_NPROCS");
            names = new String[] {"SLURM_PROCID", has(env, "SLURM_NTASKS") ? "SLURM_NTASKS" : "SLURM_NPROCS",
                "SLURM_LOCALID"};
            local = env.get("SLURM_LOCALID");
        } else if (has(env, "JOB_COMPLETION_INDEX")) {
            launcher = "kubernetes";
            rank = env.get("JOB_COMPLETION_INDEX");
            size = env.get("JCCL_WORLD_SIZE");
            names = new String[] {"JOB_COMPLETION_INDEX", "JCCL_WORLD_SIZE (the Job's completions)",
                "JCCL_LOCAL_RANK"};
            local = env.get("JCCL_LOCAL_RANK");
        } else {
            throw new IllegalStateException("no launcher environment found: set JCCL_RANK, JCCL_WORLD_SIZE and "
                + "JCCL_STORE_ADDR, or launch with torchrun (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT), mpirun "
                + "(OMPI_COMM_WORLD_RANK/SIZE plus JCCL_STORE_ADDR), srun (SLURM_PROCID/SLURM_NTASKS) or as a "
                + "Kubernetes Indexed Job (JOB_COMPLETION_INDEX plus JCCL_WORLD_SIZE and JCCL_STORE_ADDR)");
        }
        if (size == null || size.isBlank()) {
            throw new IllegalStateException(launcher + " environment gives rank " + rank + " (" + names[0]
                + ") but no world size: set " + names[1]);
        }
        int r = parse(rank, names[0]);
        int n = parse(size, names[1]);
        int lr = local == null || local.isBlank() ? -1 : parse(local, names[2]);
        // Checked before any store is opened: a rank that can never be matched would otherwise wait out the whole
        // rendezvous timeout (rank 0's peers never come, or no rank 0 ever serves the store).
        if (n < 1) {
            throw new IllegalStateException(names[1] + "=" + size.trim() + ": the world size must be at least 1");
        }
        if (r < 0 || r >= n) {
            throw new IllegalStateException(names[0] + "=" + rank.trim() + " is outside 0.." + (n - 1) + " ("
                + names[1] + "=" + size.trim() + "): each process needs a distinct rank below the world size");
        }
        if (local != null && !local.isBlank() && lr < 0) {
            throw new IllegalStateException(names[2] + "=" + local.trim() + ": a local rank cannot be negative");
        }
        String port = firstOf(env, "JCCL_STORE_PORT", "MASTER_PORT");
        if (port == null) {
            port = Integer.toString(DEFAULT_PORT);
        }
        String address;
        if (has(env, "JCCL_STORE_ADDR")) {
            address = env.get("JCCL_STORE_ADDR").trim();
            if (!address.startsWith("file:") && !address.contains(":")) {
                address = address + ":" + port;
            }
        } else if (has(env, "MASTER_ADDR")) {
            address = env.get("MASTER_ADDR").trim() + ":" + port;
        } else if (launcher.equals("slurm") && (has(env, "SLURM_NODELIST") || has(env, "SLURM_JOB_NODELIST"))) {
            String list = has(env, "SLURM_NODELIST") ? env.get("SLURM_NODELIST") : env.get("SLURM_JOB_NODELIST");
            address = expandNodeList(list).getFirst() + ":" + port;
        } else if (launcher.equals("kubernetes")) {
            throw new IllegalStateException("kubernetes launch (JOB_COMPLETION_INDEX=" + rank.trim() + ") without a "
                + "store address: set JCCL_STORE_ADDR to pod 0's name under the Job's headless service, for example "
                + "JCCL_STORE_ADDR=<job>-0.<service>:" + port + " (jccl k8s writes it)");
        } else {
            throw new IllegalStateException(launcher + " launch without a store address: set JCCL_STORE_ADDR=host:port "
                + "(for example the first host of the job) or MASTER_ADDR/MASTER_PORT");
        }
        String protocol = protocol(env, launcher);
        boolean server = r == 0 && !"0".equals(env.get("JCCL_STORE_SERVER")) && !address.startsWith("file:")
            && !protocol.equals(PROTOCOL_TORCH);
        int restarts = has(env, "TORCHELASTIC_RESTART_COUNT")
            ? parse(env.get("TORCHELASTIC_RESTART_COUNT"), "TORCHELASTIC_RESTART_COUNT") : 0;
        return new LaunchEnvironment(r, n, lr, address, launcher, server, protocol, restarts);
    }

    /**
     * JCCL_STORE_PROTOCOL when set; else torch under torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE=True),
     * JCCL's under torchrun without it (=False: rank 0 of the workers serves MASTER_PORT, as torch's own rank 0
     * would), and auto when a torchrun-style launch does not say.
     */
    private static String protocol(Map<String, String> env, String launcher) {
        if (has(env, "JCCL_STORE_PROTOCOL")) {
            String p = env.get("JCCL_STORE_PROTOCOL").trim().toLowerCase(java.util.Locale.ROOT);
            if (!p.equals(PROTOCOL_JCCL) && !p.equals(PROTOCOL_TORCH) && !p.equals(PROTOCOL_AUTO)) {
                throw new IllegalStateException("JCCL_STORE_PROTOCOL=" + env.get("JCCL_STORE_PROTOCOL")
                    + ": expected jccl, torch or auto");
            }
            if (!p.equals(PROTOCOL_AUTO)) {
                return p;
            }
        }
        if (!launcher.equals("torchrun")) {
            return PROTOCOL_JCCL;
        }
        String agent = env.get("TORCHELASTIC_USE_AGENT_STORE");
        if (agent == null || agent.isBlank()) {
            return PROTOCOL_AUTO;
        }
        return agent.trim().equalsIgnoreCase("true") ? PROTOCOL_TORCH : PROTOCOL_JCCL;
    }

    private static boolean has(Map<String, String> env, String name) {
        String v = env.get(name);
        return v != null && !v.isBlank();
    }

    private static String firstOf(Map<String, String> env, String... names) {
        for (String n : names) {
            if (has(env, n)) {
                return env.get(n).trim();
            }
        }
        return null;
    }

    private static int parse(String v, String what) {
        try {
            return Integer.parseInt(v.trim());
        } catch (NumberFormatException e) {
            throw new IllegalStateException(what + "='" + v + "' is not a number", e);
        }
    }

    /**
     * Opens the store with the job's secret, {@code JCCL_AUTH_SECRET} (read through {@link Config}; none when
     * unset): {@link #openStore(long, String)}.
     */
    public Store openStore(long timeoutNs) {
        return openStore(timeoutNs, Config.value("JCCL_AUTH_SECRET"));
    }

    /**
     * Opens the store: a {@link FileStore} for {@code file:} addresses, else a {@link TcpStore} that authenticates
     * with {@code secret} (null or blank: none; the store server rank 0 starts then requires it of every client).
     * Rank 0's server listens on the address the store address names when it is this host's ({@code 127.0.0.1}:
     * loopback only, a specific IP: that interface), on all interfaces for {@code 0.0.0.0} or when
     * {@code JCCL_STORE_BIND} says so, and otherwise as {@link io.jccl.collectives.store.TcpStoreServer#bindAddressFor}
     * explains.
     */
    public Store openStore(long timeoutNs, String secret) {
        if (storeAddress.startsWith("file:")) {
            String path = storeAddress.substring(5);
            while (path.startsWith("//")) {
                path = path.substring(1);
            }
            return new FileStore(Path.of(path));
        }
        int colon = storeAddress.lastIndexOf(':');
        String host = storeAddress.substring(0, colon);
        if (host.startsWith("[") && host.endsWith("]")) {
            host = host.substring(1, host.length() - 1);
        }
        int port = parse(storeAddress.substring(colon + 1), "store port");
        if (PROTOCOL_TORCH.equals(storeProtocol)) {
            return torchStore(host, port, timeoutNs, secret, "");
        }
        if (PROTOCOL_AUTO.equals(storeProtocol)) {
            if (!startServer) {
                // Other ranks look first: a torch store serving the port now (started before any rank) is the one
                // rank 0 falls back to below. Nothing listening yet means rank 0's JCCL server, still starting.
                TorchTcpStore.Dialect d = TorchTcpStore.probe(host, port);
                if (d != null) {
                    return torchStore(host, port, timeoutNs, secret, " (found serving " + storeAddress + ")");
                }
            } else {
                try {
                    return new TcpStore(host, port, true, timeoutNs, secret, null);
                } catch (StoreException e) {
                    if (!(e.getCause() instanceof BindException) || TorchTcpStore.probe(host, port) == null) {
                        throw e;
                    }
                    return torchStore(host, port, timeoutNs, secret, " (it already serves " + storeAddress
                        + ", so this rank does not start JCCL's store server there)");
                }
            }
        }
        return new TcpStore(host, port, startServer, timeoutNs, secret, null);
    }

    /**
     * A client of torch's TCPStore, its keys under {@code jccl/attempt_<restartCount>}. The store authenticates
     * nobody: that is said at WARN, as JCCL's unauthenticated store is (with a secret the values stay sealed).
     */
    private Store torchStore(String host, int port, long timeoutNs, String secret, String why) {
        TorchTcpStore store = new TorchTcpStore(host, port, timeoutNs, "jccl/attempt_" + restartCount + "/");
        Log.get().warn(rank, Log.Subsys.INIT, "using " + store.describe() + why + " as the rendezvous store; "
            + "torch's TCPStore has no authentication: anyone who can reach it can read, change and delete its keys"
            + (secret == null || secret.isBlank() ? " (set JCCL_AUTH_SECRET on every rank to seal JCCL's values)"
            : " (JCCL's values stay sealed with JCCL_AUTH_SECRET, but keys can be deleted)"));
        return store;
    }

    /**
     * Expands a Slurm host list: {@code node[01-04,07],gpu5,x[1-2]} → node01 node02 node03 node04 node07 gpu5 x1 x2
     * (zero padding kept; one bracket group per name).
     */
    public static List<String> expandNodeList(String list) {
        List<String> hosts = new ArrayList<>();
        int depth = 0;
        int start = 0;
        String s = list.trim();
        for (int i = 0; i <= s.length(); i++) {
            char c = i < s.length() ? s.charAt(i) : ',';
            if (c == '[') {
                depth++;
            } else if (c == ']') {
                depth--;
            } else if (c == ',' && depth == 0) {
                String item = s.substring(start, i).trim();
                if (!item.isEmpty()) {
                    expandItem(item, hosts);
                }
                start = i + 1;
            }
        }
        if (hosts.isEmpty()) {
            throw new IllegalArgumentException("empty Slurm node list '" + list + "'");
        }
        return hosts;
    }

    private static void expandItem(String item, List<String> out) {
        int open = item.indexOf('[');
        if (open < 0) {
            out.add(item);
            return;
        }
        int close = item.indexOf(']', open);
        if (close < 0) {
            throw new IllegalArgumentException("unbalanced brackets in Slurm node list item '" + item + "'");
        }
        String prefix = item.substring(0, open);
        String suffix = item.substring(close + 1);
        for (String range : item.substring(open + 1, close).split(",")) {
            String r = range.trim();
            int dash = r.indexOf('-');
            if (dash < 0) {
                out.add(prefix + r + suffix);
                continue;
            }
            String a = r.substring(0, dash);
            String b = r.substring(dash + 1);
            int width = a.length();
            long from = Long.parseLong(a);
            long to = Long.parseLong(b);
            for (long v = from; v <= to; v++) {
                String num = Long.toString(v);
                while (num.length() < width) {
                    num = "0" + num;
                }
                out.add(prefix + num + suffix);
            }
        }
    }
}
