package io.jccl.collectives;

import io.jccl.common.Config;
import io.jccl.verbs.LinkLayer;
import io.jccl.verbs.Verbs;

import java.time.Duration;
import java.util.Locale;

/**
 * Settings of a communicator. {@link #fromEnvironment()} reads the JCCL_* variables (or {@code jccl.*} system
 * properties); the {@code with*} methods return modified copies.
 *
 * <table>
 * <caption>Environment</caption>
 * <tr><td>JCCL_TIMEOUT</td><td>deadline of every blocking wait: seconds, or with a unit (500ms, 30s, 10m, 1h);
 * default 10m</td></tr>
 * <tr><td>JCCL_TRANSPORT</td><td>comma list of devices or providers to use, in preference order (shm0,tcp0)</td></tr>
 * <tr><td>JCCL_SHM_DISABLE</td><td>1: never use shared memory</td></tr>
 * <tr><td>JCCL_DIRECT_DISABLE</td><td>1: no direct (mapped) algorithms</td></tr>
 * <tr><td>JCCL_CHUNK_BYTES / JCCL_SLOTS</td><td>ring chunk size (default 128 KiB over shared memory, 1 MiB over
 * tcp; a set value applies to every device) and slots per peer (4)</td></tr>
 * <tr><td>JCCL_RDV_BYTES</td><td>smallest copied (not reduced) transfer that goes by rendezvous, written straight
 * into the receiver's buffer (default 256 KiB over tcp, off elsewhere; 0 off)</td></tr>
 * <tr><td>JCCL_DIRECT_BYTES</td><td>direct staging size per round (default 1 MiB, twice that allocated)</td></tr>
 * <tr><td>JCCL_ALGO</td><td>algorithm filter, NCCL syntax (allreduce:ring;broadcast:^tree)</td></tr>
 * <tr><td>JCCL_JOB_ID</td><td>job identity every rank must present (default from the launcher, else "default")</td></tr>
 * <tr><td>JCCL_PEER_TIMEOUT</td><td>how long a link to a peer may stay silent (nothing acknowledged, no answer
 * to the transport's probes) before the peer is failed (default 30 s, never more than JCCL_TIMEOUT); a peer that is
 * alive but slow to join a call is waited for until JCCL_TIMEOUT</td></tr>
 * <tr><td>JCCL_AUTH_SECRET</td><td>shared secret: ranks prove knowledge with an HMAC when joining</td></tr>
 * <tr><td>JCCL_FLIGHT_RECORDER</td><td>operations kept by the flight recorder (default 256)</td></tr>
 * <tr><td>JCCL_HOST_ID</td><td>overrides the host identity (boot id + host name); tests use it to fake hosts</td></tr>
 * <tr><td>JCCL_CPU_BIND</td><td>{@code core}: bind the thread that creates the communicator to one CPU of the
 * process's mask, chosen by local rank (mpirun's {@code --bind-to core}, for that thread only); {@code none}
 * (default; {@code jccl run} sets {@code core} when the ranks fit the cores)</td></tr>
 * <tr><td>JCCL_WARMUP</td><td>warm-up at creation: the ranks run small all-reduces together for up to this long
 * per JVM, so that an application's first collectives do not run cold; {@code 0} off, {@code 1} the default
 * ({@value #DEFAULT_WARMUP_MS} ms), or a duration ({@code 200ms}); on or off must match on every rank</td></tr>
 * </table>
 */
public final class CommunicatorOptions {
    private long timeoutNs = Duration.ofMinutes(10).toNanos();
    /** Link silence that fails a peer; -1: {@link #DEFAULT_PEER_TIMEOUT_NS} capped by the timeout. */
    private long peerTimeoutNs = -1;
    /**
     * Default link silence that fails a peer: above the longest stop-the-world pauses a tuned JVM sees (and above
     * NCCL's default over InfiniBand, 4.3 s × 8 retries ≈ 34 s, which it is close to), far below the operation
     * deadline, so a lost host or partition is named in about half a minute rather than ten.
     */
    static final long DEFAULT_PEER_TIMEOUT_NS = 30_000_000_000L;
    private String transports = "";
    private boolean shmDisabled;
    private boolean directDisabled;
    private int chunkBytes = 128 * 1024;
    /** Whether chunkBytes was set (JCCL_CHUNK_BYTES, withChunking): then it applies to every device. */
    private boolean chunkSet;
    /** Default chunk over a network: per-chunk costs (completion, credit, header) dominate smaller chunks there. */
    static final int TCP_CHUNK_BYTES = 1 << 20;
    private int slots = 4;
    /** Rendezvous threshold (JCCL_RDV_BYTES): -1 automatic (tcp only, {@link #TCP_RENDEZVOUS_BYTES}), 0 off. */
    private long rendezvousBytes = -1;
    /** Default rendezvous threshold over tcp. */
    static final int TCP_RENDEZVOUS_BYTES = 256 * 1024;
    private long directBytes = 1 << 20;
    private String algorithms = "";
    private String jobId = "default";
    private String authSecret;
    private int flightRecorderCapacity = 256;
    private String hostId;
    private String name = "world";
    private boolean cpuBind;
    /** Default warm-up window per JVM (JCCL_WARMUP=1), ms. */
    public static final int DEFAULT_WARMUP_MS = 50;
    private long warmupNs = Duration.ofMillis(DEFAULT_WARMUP_MS).toNanos();

    /** Defaults, ignoring the environment. */
    public static CommunicatorOptions defaults() {
        return new CommunicatorOptions();
    }

    /** Defaults overridden by JCCL_* environment variables and jccl.* system properties. */
    public static CommunicatorOptions fromEnvironment() {
        CommunicatorOptions o = new CommunicatorOptions();
        String timeout = Config.value("JCCL_TIMEOUT");
        if (timeout != null && !timeout.isBlank()) {
            o.timeoutNs = parseDurationNs(timeout, "JCCL_TIMEOUT");
        }
        String peerTimeout = Config.value("JCCL_PEER_TIMEOUT");
        if (peerTimeout != null && !peerTimeout.isBlank()) {
            o.peerTimeoutNs = parseDurationNs(peerTimeout, "JCCL_PEER_TIMEOUT");
        }
        o.transports = Config.value("JCCL_TRANSPORT", "");
        o.shmDisabled = Config.value("JCCL_SHM_DISABLE", "0").equals("1");
        o.directDisabled = Config.value("JCCL_DIRECT_DISABLE", "0").equals("1");
        o.chunkSet = Config.value("JCCL_CHUNK_BYTES") != null && !Config.value("JCCL_CHUNK_BYTES").isBlank();
        o.chunkBytes = (int) Config.longValue("JCCL_CHUNK_BYTES", o.chunkBytes);
        o.slots = (int) Config.longValue("JCCL_SLOTS", o.slots);
        o.rendezvousBytes = Config.longValue("JCCL_RDV_BYTES", o.rendezvousBytes);
        o.directBytes = Config.longValue("JCCL_DIRECT_BYTES", o.directBytes);
        o.algorithms = Config.value("JCCL_ALGO", "");
        String job = Config.value("JCCL_JOB_ID");
        if (job == null || job.isBlank()) {
            for (String v : new String[] {"TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "OMPI_MCA_ess_base_jobid"}) {
                String s = System.getenv(v);
                if (s != null && !s.isBlank()) {
                    job = s;
                    break;
                }
            }
        }
        o.jobId = job == null || job.isBlank() ? "default" : job.trim();
        o.authSecret = Config.value("JCCL_AUTH_SECRET");
        o.flightRecorderCapacity = (int) Config.longValue("JCCL_FLIGHT_RECORDER", 256);
        o.hostId = Config.value("JCCL_HOST_ID");
        String bind = Config.value("JCCL_CPU_BIND", "none").trim().toLowerCase(Locale.ROOT);
        if (!bind.equals("core") && !bind.equals("none") && !bind.isEmpty()) {
            throw new IllegalArgumentException("JCCL_CPU_BIND=" + bind + ": expected core or none");
        }
        o.cpuBind = bind.equals("core");
        String warmup = Config.value("JCCL_WARMUP");
        if (warmup != null && !warmup.isBlank()) {
            o.warmupNs = parseWarmupNs(warmup);
        }
        o.validate();
        return o;
    }

    /** JCCL_WARMUP: {@code 0}/{@code off}, {@code 1}/{@code on} (the default window) or a duration with a unit. */
    static long parseWarmupNs(String text) {
        String t = text.trim().toLowerCase(Locale.ROOT);
        switch (t) {
            case "0", "off", "false", "no" -> {
                return 0;
            }
            case "1", "on", "true", "yes" -> {
                return Duration.ofMillis(DEFAULT_WARMUP_MS).toNanos();
            }
            default -> {
                if (!t.endsWith("ms") && !t.endsWith("s")) {
                    // a bare number other than 0/1 is ambiguous (seconds elsewhere, but surely not meant here)
                    throw new IllegalArgumentException("JCCL_WARMUP=" + text + ": expected 0 (off), 1 (on, "
                        + DEFAULT_WARMUP_MS + " ms) or a duration with a unit such as 200ms");
                }
                return parseDurationNs(t, "JCCL_WARMUP");
            }
        }
    }

    /** Parses {@code 30}, {@code 30s}, {@code 500ms}, {@code 10m}, {@code 1h} into nanoseconds. */
    public static long parseDurationNs(String text, String what) {
        String t = text.trim().toLowerCase(Locale.ROOT);
        try {
            if (t.endsWith("ms")) {
                return Duration.ofMillis(Long.parseLong(t.substring(0, t.length() - 2).trim())).toNanos();
            }
            if (t.endsWith("s")) {
                return Duration.ofSeconds(Long.parseLong(t.substring(0, t.length() - 1).trim())).toNanos();
            }
            if (t.endsWith("m")) {
                return Duration.ofMinutes(Long.parseLong(t.substring(0, t.length() - 1).trim())).toNanos();
            }
            if (t.endsWith("h")) {
                return Duration.ofHours(Long.parseLong(t.substring(0, t.length() - 1).trim())).toNanos();
            }
            return Duration.ofSeconds(Long.parseLong(t)).toNanos();
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(what + "=" + text + " is not a duration (examples: 30, 30s, 500ms, "
                + "10m)", e);
        }
    }

    private CommunicatorOptions copy() {
        CommunicatorOptions o = new CommunicatorOptions();
        o.timeoutNs = timeoutNs;
        o.peerTimeoutNs = peerTimeoutNs;
        o.transports = transports;
        o.shmDisabled = shmDisabled;
        o.directDisabled = directDisabled;
        o.chunkBytes = chunkBytes;
        o.chunkSet = chunkSet;
        o.slots = slots;
        o.rendezvousBytes = rendezvousBytes;
        o.directBytes = directBytes;
        o.algorithms = algorithms;
        o.jobId = jobId;
        o.cpuBind = cpuBind;
        o.warmupNs = warmupNs;
        o.authSecret = authSecret;
        o.flightRecorderCapacity = flightRecorderCapacity;
        o.hostId = hostId;
        o.name = name;
        return o;
    }

    private CommunicatorOptions validate() {
        if (chunkBytes < 64 || chunkBytes % 64 != 0) {
            throw new IllegalArgumentException("chunk size " + chunkBytes + " must be a positive multiple of 64");
        }
        if (slots < 1 || slots > 64) {
            throw new IllegalArgumentException("slots per peer " + slots + " outside 1..64");
        }
        if (rendezvousBytes < -1) {
            throw new IllegalArgumentException("rendezvous threshold " + rendezvousBytes
                + " must be -1 (automatic), 0 (off) or a byte count");
        }
        if (directBytes < 4096 || directBytes % 64 != 0) {
            throw new IllegalArgumentException("direct staging " + directBytes + " must be >= 4096, multiple of 64");
        }
        if (warmupNs < 0) {
            throw new IllegalArgumentException("warm-up window must not be negative");
        }
        if (timeoutNs <= 0) {
            throw new IllegalArgumentException("timeout must be positive");
        }
        if (peerTimeoutNs == 0 || peerTimeoutNs < -1) {
            throw new IllegalArgumentException("peer timeout must be positive");
        }
        return this;
    }

    /** Deadline of every blocking wait, ns. */
    public long timeoutNs() {
        return timeoutNs;
    }

    /**
     * How long a link to a peer may stay silent before the peer is failed, ns: the transports' acknowledgement
     * timeout (queue pair timeout and retry count) and, where the transport probes idle links, their liveness
     * limit. JCCL_PEER_TIMEOUT; default 30 s, never more than {@link #timeoutNs()}.
     */
    public long peerTimeoutNs() {
        return Math.min(peerTimeoutNs < 0 ? DEFAULT_PEER_TIMEOUT_NS : peerTimeoutNs, timeoutNs);
    }

    /** A copy with another peer timeout (see {@link #peerTimeoutNs()}). */
    public CommunicatorOptions withPeerTimeout(Duration timeout) {
        CommunicatorOptions o = copy();
        o.peerTimeoutNs = timeout.toNanos();
        return o.validate();
    }

    /** A copy with another timeout. */
    public CommunicatorOptions withTimeout(Duration timeout) {
        CommunicatorOptions o = copy();
        o.timeoutNs = timeout.toNanos();
        return o.validate();
    }

    /** Preferred devices/providers (comma list; empty: shm0 for same-host peers, tcp0 otherwise). */
    public String transports() {
        return transports;
    }

    /** A copy restricted to {@code list} (for example {@code tcp0}). */
    public CommunicatorOptions withTransports(String list) {
        CommunicatorOptions o = copy();
        o.transports = list == null ? "" : list;
        return o;
    }

    /** Whether shared memory is disabled. */
    public boolean shmDisabled() {
        return shmDisabled;
    }

    /** A copy with shared memory disabled or not. */
    public CommunicatorOptions withShmDisabled(boolean disabled) {
        CommunicatorOptions o = copy();
        o.shmDisabled = disabled;
        return o;
    }

    /** Whether direct algorithms are disabled. */
    public boolean directDisabled() {
        return directDisabled;
    }

    /** A copy with direct algorithms disabled or not. */
    public CommunicatorOptions withDirectDisabled(boolean disabled) {
        CommunicatorOptions o = copy();
        o.directDisabled = disabled;
        return o;
    }

    /** Ring chunk bytes (over shared memory; see {@link #chunkBytesFor}). */
    public int chunkBytes() {
        return chunkBytes;
    }

    /**
     * Chunk bytes towards a peer served by a device attached to {@code linkLayer}: the set value, else 128 KiB over
     * memory and 1 MiB over a network (per-chunk costs, completion, credit and header, dominate smaller chunks
     * there; docs/collectives.md, "Chunk and rendezvous sizes"). Both ends of a pair use the same device, so they
     * agree.
     */
    public int chunkBytesFor(LinkLayer linkLayer) {
        return chunkSet || !linkLayer.isNetwork() ? chunkBytes : Math.max(chunkBytes, TCP_CHUNK_BYTES);
    }

    /** {@link #chunkBytesFor(LinkLayer)} of the device called {@code device} (looked up, not opened). */
    public int chunkBytesFor(String device) {
        return chunkBytesFor(Verbs.device(device).linkLayer());
    }

    /**
     * Smallest message-path transfer to a peer served by a device attached to {@code linkLayer} that goes by
     * rendezvous (the receiver registers its destination and the sender writes straight into it, see
     * docs/collectives.md), or 0 for never: the set value (JCCL_RDV_BYTES, {@link #withRendezvousBytes}), else 256 KiB
     * over a network and off over memory (where the copy out of the inbox is cheaper than the clear-to-send round
     * trip). Both ends of a pair use the same device, so they agree.
     */
    public long rendezvousBytesFor(LinkLayer linkLayer) {
        return rendezvousBytes >= 0 ? rendezvousBytes : linkLayer.isNetwork() ? TCP_RENDEZVOUS_BYTES : 0;
    }

    /** {@link #rendezvousBytesFor(LinkLayer)} of the device called {@code device} (looked up, not opened). */
    public long rendezvousBytesFor(String device) {
        return rendezvousBytesFor(Verbs.device(device).linkLayer());
    }

    /** A copy with another rendezvous threshold (-1 automatic, 0 off; see {@link #rendezvousBytesFor}). */
    public CommunicatorOptions withRendezvousBytes(long bytes) {
        CommunicatorOptions o = copy();
        o.rendezvousBytes = bytes;
        return o.validate();
    }

    /** Inbox slots per peer. */
    public int slots() {
        return slots;
    }

    /** A copy with other chunk size and slot count. */
    public CommunicatorOptions withChunking(int chunkBytes, int slots) {
        CommunicatorOptions o = copy();
        o.chunkBytes = chunkBytes;
        o.chunkSet = true;
        o.slots = slots;
        return o.validate();
    }

    /** Direct staging bytes per round. */
    public long directBytes() {
        return directBytes;
    }

    /** A copy with another direct staging size. */
    public CommunicatorOptions withDirectBytes(long bytes) {
        CommunicatorOptions o = copy();
        o.directBytes = bytes;
        return o.validate();
    }

    /** JCCL_ALGO-style algorithm filter. */
    public String algorithms() {
        return algorithms;
    }

    /** A copy with another algorithm filter (NCCL syntax). */
    public CommunicatorOptions withAlgorithms(String spec) {
        CommunicatorOptions o = copy();
        o.algorithms = spec == null ? "" : spec;
        io.jccl.collectives.tuning.AlgorithmFilter.parse(o.algorithms);
        return o;
    }

    /** Job identity. */
    public String jobId() {
        return jobId;
    }

    /** A copy with another job id. */
    public CommunicatorOptions withJobId(String id) {
        CommunicatorOptions o = copy();
        o.jobId = id;
        return o;
    }

    /** Shared secret, or null. */
    public String authSecret() {
        return authSecret;
    }

    /** A copy with another secret (null: none). */
    public CommunicatorOptions withAuthSecret(String secret) {
        CommunicatorOptions o = copy();
        o.authSecret = secret;
        return o;
    }

    /** Flight recorder capacity. */
    public int flightRecorderCapacity() {
        return flightRecorderCapacity;
    }

    /** Host identity override, or null (boot id + host name). */
    public String hostId() {
        return hostId;
    }

    /** A copy with a host identity override (tests fake several hosts in one process with it). */
    public CommunicatorOptions withHostId(String id) {
        CommunicatorOptions o = copy();
        o.hostId = id;
        return o;
    }

    /** Whether the creating thread binds itself to one CPU by local rank (JCCL_CPU_BIND=core). */
    public boolean cpuBind() {
        return cpuBind;
    }

    /** A copy that binds (or not) the creating thread to one CPU by local rank. */
    public CommunicatorOptions withCpuBind(boolean bind) {
        CommunicatorOptions o = copy();
        o.cpuBind = bind;
        return o;
    }

    /**
     * How long the ranks of this JVM warm up the small-message collectives at communicator creation, in all (the
     * JVM's first communicator uses it; later ones run one round); 0: no warm-up (JCCL_WARMUP).
     */
    public long warmupNs() {
        return warmupNs;
    }

    /** A copy with warm-up window {@code window} per JVM ({@link Duration#ZERO}: no warm-up). */
    public CommunicatorOptions withWarmup(Duration window) {
        CommunicatorOptions o = copy();
        o.warmupNs = window.toNanos();
        return o.validate();
    }

    /** Communicator name (store namespace); "world" by default. */
    public String name() {
        return name;
    }

    /** A copy with another name: communicators sharing a store need distinct names. */
    public CommunicatorOptions withName(String name) {
        CommunicatorOptions o = copy();
        o.name = name;
        return o;
    }

    /** The settings every rank must share (compared at join). */
    public String fingerprint() {
        return "chunk=" + chunkBytes + (chunkSet ? "" : "/auto") + ",slots=" + slots + ",rdv=" + rendezvousBytes
            + ",direct=" + directBytes + ",directOff=" + directDisabled
            + ",algo=" + algorithms + ",shmOff=" + shmDisabled + ",transport=" + transports
            // warm-up runs collectives at creation: on and off do not mix (the length may differ)
            + ",warmup=" + (warmupNs > 0);
    }
}
