package io.jccl.collectives.store;

import io.jccl.common.Log;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;

/**
 * The child process of {@link TcpStoreAcceptBackoffTest}: a store server in a JVM started with few file descriptors
 * (ulimit -n), so that its accept fails with EMFILE once the parent has opened enough connections. Commands on
 * stdin: {@code cpu} prints the server thread's CPU time in ms, {@code exit} ends.
 */
public final class AcceptStormMain {
    private AcceptStormMain() {
    }

    /** Runs until {@code exit} on stdin. */
    public static void main(String[] args) throws Exception {
        Log.get(); // open what logging needs before descriptors run out
        ThreadMXBean threads = ManagementFactory.getThreadMXBean();
        threads.getCurrentThreadCpuTime();
        try (TcpStoreServer server = new TcpStoreServer(InetAddress.getLoopbackAddress(), 0)) {
            String name = "jccl-store-server-" + server.port();
            long id = -1;
            for (Thread t : Thread.getAllStackTraces().keySet()) {
                if (t.getName().equals(name)) {
                    id = t.threadId();
                }
            }
            System.out.println("PORT " + server.port());
            System.out.flush();
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            for (String line; (line = in.readLine()) != null; ) {
                if (line.equals("cpu")) {
                    System.out.println("CPU " + threads.getThreadCpuTime(id) / 1_000_000);
                    System.out.flush();
                } else if (line.equals("exit")) {
                    return;
                }
            }
        }
    }
}
