package io.jccl.transport.tcp;

import io.jccl.common.Config;
import io.jccl.common.Log;
import io.jccl.common.idle.BackoffIdleStrategy;

import java.util.concurrent.atomic.AtomicBoolean;

/**
 * Settings of a tcp context, read from {@code JCCL_*} environment variables (or their {@code jccl.*} system
 * properties) by {@link #fromConfig()}, or built directly for {@link TcpDevice#open(TcpSettings)}.
 *
 * @param threads progress threads per context ({@code JCCL_TCP_THREADS}, default 1)
 * @param interfaces interface filter as NCCL_SOCKET_IFNAME ({@code JCCL_SOCKET_IFNAME}, e.g. {@code eth},
 *     {@code ^docker,lo}, {@code =eth0}); null for the default choice
 * @param family {@code AF_INET}, {@code AF_INET6} or null for either ({@code JCCL_SOCKET_FAMILY})
 * @param address address to bind and advertise, overriding interface selection ({@code JCCL_TCP_ADDRESS})
 * @param port listener port, 0 for an ephemeral one ({@code JCCL_TCP_PORT})
 * @param socketBufferBytes SO_SNDBUF/SO_RCVBUF ({@code JCCL_TCP_SOCKBUF}); 0 leaves the sizes to the kernel's
 *     autotuning. Default 4 MiB where net.core.rmem_max and wmem_max allow it, else 0: asking for more than the
 *     maximum would silently cap the buffers and switch autotuning off, the worst of both
 * @param connectTimeoutMs least time a QP is given to establish its connection after RTR, even when its
 *     timeout/retry_cnt budget is shorter ({@code JCCL_TCP_CONNECT_TIMEOUT_MS}, default 2000)
 * @param spinNs how long a progress thread busy-polls before blocking in select ({@code JCCL_TCP_SPIN_US},
 *     default {@code JCCL_SPIN_US}, 50 µs)
 */
public record TcpSettings(int threads, String interfaces, String family, String address, int port,
                          int socketBufferBytes, long connectTimeoutMs, long spinNs) {

    /**
     * The retired floor of the hung-peer detection (10 s by default until the tcp provider probed idle links). The
     * limit is now each QP's own timeout and retry count ({@link TcpLiveness}); communicators set those from
     * JCCL_PEER_TIMEOUT. A provider-wide floor would override what every communicator asked for, so the variable
     * is ignored, with one warning per process.
     */
    static final String RETIRED_PEER_TIMEOUT = "JCCL_TCP_PEER_TIMEOUT_MS";
    private static final AtomicBoolean RETIRED_WARNED = new AtomicBoolean();

    /** Default {@link #notSentLowatBytes} on virtual interfaces (veth, bridge, macvlan: containers, namespaces). */
    static final int VIRTUAL_NOTSENT_LOWAT_BYTES = 128 << 10;

    /**
     * {@code TCP_NOTSENT_LOWAT} for this context's connections to other hosts, in bytes (0: the kernel's default,
     * unlimited): a non-blocking write then queues at most about this much data that is not yet on the wire.
     * {@code JCCL_TCP_NOTSENT_LOWAT} sets it for every interface; by default it is 128 KiB on virtual interfaces and
     * off on NICs. Why virtual ones: a veth pair has no hardware queue that keeps a flow on one CPU. With megabytes
     * queued unsent, the kernel transmits for the socket both from the writing thread and from the softirq that
     * processes the peer's ACKs on the other CPU, each into its own CPU's backlog; the two streams overtake each
     * other, the receiver sees reordering, the sender takes it for loss. On a NIC the limit would only add
     * application wake-ups, and loopback measured worse with it (never limited). Measurements: docs/transport-tcp.md,
     * "Unsent bytes on virtual interfaces".
     */
    static int notSentLowatBytes(boolean virtualInterface) {
        long configured = Config.longValue("JCCL_TCP_NOTSENT_LOWAT", -1);
        if (configured >= 0) {
            return (int) Math.min(configured, Integer.MAX_VALUE);
        }
        return virtualInterface ? VIRTUAL_NOTSENT_LOWAT_BYTES : 0;
    }

    /** Validates the values. */
    public TcpSettings {
        if (threads < 1 || threads > 64) {
            throw new IllegalArgumentException("JCCL_TCP_THREADS=" + threads + " outside 1..64");
        }
        if (port < 0 || port > 65535) {
            throw new IllegalArgumentException("JCCL_TCP_PORT=" + port + " outside 0..65535");
        }
        if (family != null && !family.equals("AF_INET") && !family.equals("AF_INET6")) {
            throw new IllegalArgumentException("JCCL_SOCKET_FAMILY=" + family + ": use AF_INET or AF_INET6");
        }
        if (socketBufferBytes < 0 || connectTimeoutMs < 0 || spinNs < 0) {
            throw new IllegalArgumentException("negative tcp setting");
        }
    }

    /** Settings from the environment. */
    public static TcpSettings fromConfig() {
        warnIfRetiredPeerTimeoutSet();
        String family = Config.value("JCCL_SOCKET_FAMILY");
        return new TcpSettings((int) Config.longValue("JCCL_TCP_THREADS", 1), blankToNull(Config.value(
            "JCCL_SOCKET_IFNAME")), blankToNull(family), blankToNull(Config.value("JCCL_TCP_ADDRESS")),
            (int) Config.longValue("JCCL_TCP_PORT", 0), (int) Config.longValue("JCCL_TCP_SOCKBUF",
            defaultSocketBuffer()),
            Config.longValue("JCCL_TCP_CONNECT_TIMEOUT_MS", 2000),
            Config.longValue("JCCL_TCP_SPIN_US", BackoffIdleStrategy.SPIN_NS / 1000) * 1000);
    }

    /** One WARN per process when {@link #RETIRED_PEER_TIMEOUT} is set: it has no effect any more. */
    private static void warnIfRetiredPeerTimeoutSet() {
        String value = Config.value(RETIRED_PEER_TIMEOUT);
        if (value != null && !value.isBlank() && RETIRED_WARNED.compareAndSet(false, true)) {
            Log.get().warn(-1, Log.Subsys.NET, RETIRED_PEER_TIMEOUT + "=" + value.trim() + " is ignored: the tcp "
                + "provider declares a peer dead after each queue pair's own timeout and retry count (4.096 us x "
                + "2^timeout x (retry_cnt+1), at least 1 s; timeout 0 never), probing idle connections; communicators "
                + "set them from JCCL_PEER_TIMEOUT (see docs/transport-tcp.md, \"Errors and lost connections\")");
        }
    }

    /** A copy binding to {@code address} (a numeric IP or host name) instead of selecting an interface. */
    public TcpSettings withAddress(String address) {
        return new TcpSettings(threads, interfaces, family, address, port, socketBufferBytes, connectTimeoutMs,
            spinNs);
    }

    /** A copy with another interface filter (NCCL_SOCKET_IFNAME syntax). */
    public TcpSettings withInterfaces(String spec) {
        return new TcpSettings(threads, spec, family, null, port, socketBufferBytes, connectTimeoutMs, spinNs);
    }

    /** A copy with another number of progress threads. */
    public TcpSettings withThreads(int n) {
        return new TcpSettings(n, interfaces, family, address, port, socketBufferBytes, connectTimeoutMs, spinNs);
    }

    /** A copy with another connection-establishment floor. */
    public TcpSettings withConnectTimeoutMs(long ms) {
        return new TcpSettings(threads, interfaces, family, address, port, socketBufferBytes, ms, spinNs);
    }

    static int defaultSocketBuffer() {
        int wanted = 4 << 20;
        try {
            long rmem = Long.parseLong(java.nio.file.Files.readString(java.nio.file.Path.of(
                "/proc/sys/net/core/rmem_max")).trim());
            long wmem = Long.parseLong(java.nio.file.Files.readString(java.nio.file.Path.of(
                "/proc/sys/net/core/wmem_max")).trim());
            return Math.min(rmem, wmem) >= wanted ? wanted : 0;
        } catch (Exception e) {
            return 0;
        }
    }

    private static String blankToNull(String s) {
        return s == null || s.isBlank() ? null : s.trim();
    }
}
