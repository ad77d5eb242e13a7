package io.jccl.collectives;

import io.jccl.common.Log;

import java.io.IOException;
import java.net.ConnectException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * Whether a rank on another host is still alive, when its links cannot tell any more (a revocation broke them):
 * each process listens on one port per local address ({@link #listen}), accepting and closing at once; a prober
 * connects ({@link #probe}). The kernel of a host whose process was killed refuses the connection at once (nothing
 * listens on the port), so a {@code kill -9} of a rank on another host during a shrink's agreement is known in a
 * round trip instead of after {@code JCCL_PEER_TIMEOUT} (30 s by default). A stopped process (SIGSTOP) still gets
 * its connections accepted by its kernel, and a partitioned or lost host does not answer: both are "unknown",
 * and the peer timeout still decides for them. Not on any hot path: one idle listening socket and a virtual thread
 * per process.
 */
final class Liveness {
    /** What a probe found. */
    enum Verdict {
        /** Something accepted the connection: the process (or at least its kernel, for a stopped one) is there. */
        ALIVE,
        /** Refused: no process listens there any more. */
        DEAD,
        /** No answer in time, or another error: the peer timeout decides. */
        UNKNOWN
    }

    private static final Map<InetAddress, ServerSocket> LISTENERS = new HashMap<>();

    private Liveness() {
    }

    /** This process's liveness port on {@code local} ("address port"), opened on first use. */
    static synchronized String listen(InetAddress local) throws IOException {
        ServerSocket s = LISTENERS.get(local);
        if (s == null) {
            ServerSocket server = new ServerSocket();
            server.bind(new InetSocketAddress(local, 0), 64);
            Thread.ofVirtual().name("jccl-liveness").start(() -> acceptLoop(server));
            LISTENERS.put(local, server);
            s = server;
        }
        return local.getHostAddress() + " " + s.getLocalPort();
    }

    private static void acceptLoop(ServerSocket server) {
        while (true) {
            try (Socket ignored = server.accept()) {
                // the connection was the answer
            } catch (IOException e) {
                if (server.isClosed()) {
                    return;
                }
                Log.get().info(-1, Log.Subsys.INIT, () -> "liveness listener: " + e);
            }
        }
    }

    /** Connects to {@code address} ("address port"), waiting at most {@code timeoutNs}. */
    static Verdict probe(String address, long timeoutNs) {
        String[] f = address.split(" ");
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress(f[0], Integer.parseInt(f[1])),
                (int) Math.max(1, TimeUnit.NANOSECONDS.toMillis(timeoutNs)));
            // connected to itself: nothing listens there (see SelfConnection), as a refusal says
            return io.jccl.collectives.store.SelfConnection.isSelf(s) ? Verdict.DEAD : Verdict.ALIVE;
        } catch (ConnectException e) {
            return e.getMessage() != null && e.getMessage().toLowerCase(java.util.Locale.ROOT).contains("refused")
                ? Verdict.DEAD : Verdict.UNKNOWN;
        } catch (IOException | RuntimeException e) {
            return Verdict.UNKNOWN;
        }
    }
}
