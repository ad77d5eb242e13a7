package io.jccl.transport.tcp;

import io.jccl.common.testing.NetnsBed;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Two peer JVMs on two "hosts" (network namespaces from scripts/netns.sh joined by a bridge), doing WRITE, READ,
 * atomics and SEND with immediate across the link, then again with the link shaped to 200 Mbit/s and 2% random
 * packet loss. Skipped, with the reason, where network namespaces cannot be created (not root, no iproute2).
 */
class TcpSystemTest {
    private static final String PREFIX = "jtcp";
    private static NetnsBed bed;

    @BeforeAll
    static void upTestBed() throws Exception {
        bed = NetnsBed.up(PREFIX, 2);
    }

    @AfterAll
    static void downTestBed() throws Exception {
        if (bed != null) {
            bed.close();
        }
    }

    private static int run(List<String> command) throws IOException, InterruptedException {
        return NetnsBed.run(command);
    }

    /** A peer JVM inside a namespace. */
    private static final class Peer implements AutoCloseable {
        final Process process;
        final BufferedWriter in;
        final BlockingQueue<String> lines = new ArrayBlockingQueue<>(256);

        Peer(int host, String... jvmArguments) throws IOException {
            List<String> command = new ArrayList<>(List.of("ip", "netns", "exec", PREFIX + "-h" + host,
                Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "--enable-native-access=ALL-UNNAMED", "-Djccl.socket.ifname==eth0", "-Xss1m", "-XX:+UseSerialGC"));
            command.addAll(List.of(jvmArguments));
            command.addAll(List.of("-cp", System.getProperty("java.class.path"), TcpPeerMain.class.getName()));
            process = new ProcessBuilder(command).redirectError(ProcessBuilder.Redirect.INHERIT).start();
            in = new BufferedWriter(new OutputStreamWriter(process.getOutputStream(), StandardCharsets.UTF_8));
            Thread reader = new Thread(() -> {
                try (BufferedReader out = new BufferedReader(new InputStreamReader(process.getInputStream(),
                    StandardCharsets.UTF_8))) {
                    String line;
                    while ((line = out.readLine()) != null) {
                        lines.offer(line);
                    }
                } catch (IOException ignored) {
                    // process gone
                }
            }, "peer-" + host);
            reader.setDaemon(true);
            reader.start();
        }

        String expect(String prefix) throws InterruptedException {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (System.nanoTime() < deadline) {
                String line = lines.poll(100, TimeUnit.MILLISECONDS);
                if (line == null) {
                    if (!process.isAlive()) {
                        fail("peer exited (" + process.exitValue() + ") before answering " + prefix);
                    }
                    continue;
                }
                if (line.startsWith("FAIL")) {
                    fail("peer: " + line);
                }
                if (line.startsWith(prefix)) {
                    return line;
                }
            }
            fail("peer did not answer " + prefix + " within 60 s");
            return null;
        }

        void send(String command) throws IOException {
            in.write(command);
            in.newLine();
            in.flush();
        }

        @Override
        public void close() throws IOException {
            try {
                send("QUIT");
            } catch (IOException ignored) {
                // already gone
            }
            try {
                if (!process.waitFor(5, TimeUnit.SECONDS)) {
                    process.destroyForcibly();
                }
            } catch (InterruptedException e) {
                process.destroyForcibly();
                Thread.currentThread().interrupt();
            }
        }
    }

    private static boolean installed(String tool) throws IOException, InterruptedException {
        return run(List.of("sh", "-c", "command -v " + tool)) == 0;
    }

    /** Connects the QPs of two started peers; returns {a's READY fields, b's READY fields}. */
    private static String[][] connect(Peer a, Peer b) throws Exception {
        return connect(a, b, "10.77.0.1", "10.77.0.2");
    }

    private static String[][] connect(Peer a, Peer b, String addressA, String addressB) throws Exception {
        String[] ra = a.expect("READY ").split(" ");
        String[] rb = b.expect("READY ").split(" ");
        assertEquals(addressA, ra[4], "peer 1 listens on its namespace's address");
        assertEquals(addressB, rb[4]);
        a.send("CONNECT " + rb[1]);
        b.send("CONNECT " + ra[1]);
        a.expect("OK connected");
        b.expect("OK connected");
        return new String[][] {ra, rb};
    }

    @Test
    void shouldWriteReadRunAtomicsAndSendBetweenTwoHosts() throws Exception {
        try (Peer a = new Peer(1); Peer b = new Peer(2)) {
            String[][] r = connect(a, b);
            a.send("EXERCISE " + r[1][2] + " " + r[1][3] + " " + (4 << 20));
            String result = a.expect("OK");
            assertTrue(result.contains("fetch-add saw 99"), result);
            assertTrue(result.contains("swap saw 100"), result);
            b.send("RECEIVE 4");
            String received = b.expect("OK");
            assertTrue(received.contains("atomic=4242"), received);
        }
    }

    @Test
    void shouldSurviveASlowLossyLink() throws Exception {
        assumeTrue(installed("tc") && installed("nft"), "needs tc and nft for shaping (apt-get install -y iproute2 "
            + "nftables)");
        // TCP repairs the losses; the verbs layer must see none of them.
        assertEquals(0, bed.netns("shape", "--rate", "200mbit", "--loss", "2"));
        try (Peer a = new Peer(1); Peer b = new Peer(2)) {
            String[][] r = connect(a, b);
            b.send("EXERCISE " + r[0][2] + " " + r[0][3] + " " + (2 << 20));
            String result = b.expect("OK");
            assertTrue(result.contains("fetch-add saw 99"), result);
            a.send("RECEIVE 4");
            assertTrue(a.expect("OK").contains("atomic=4242"));
        } finally {
            bed.netns("shape", "--rate", "none", "--loss", "0");
        }
    }

    @Test
    void shouldFailOutstandingRequestsWhenTheNetworkPartitions() throws Exception {
        assumeTrue(installed("nft"), "needs nft to cut the link (apt-get install -y nftables)");
        // The peers' QPs have perftest's timeout 14 and retry count 7 (0.54 s): a silent connection is dead after 1 s.
        try (Peer a = new Peer(1); Peer b = new Peer(2)) {
            String[][] r = connect(a, b);
            assertTrue(runOk("shape", "--loss", "100"));
            a.send("WRITE_STATUS " + r[1][2] + " " + r[1][3]);
            String result = a.expect("OK");
            // No FIN or RST can cross the cut: only the requester's own timer can end the wait.
            assertTrue(result.contains("status=RETRY_EXC_ERR"), result);
            assertTrue(result.contains("qp ERR"), result);
        } finally {
            runOk("shape", "--loss", "0");
        }
    }

    private static boolean runOk(String... arguments) throws IOException, InterruptedException {
        return bed.netns(arguments) == 0;
    }

    @Test
    void shouldConnectOverIpv6() throws Exception {
        try (Peer a = new Peer(1, "-Djccl.socket.family=AF_INET6");
             Peer b = new Peer(2, "-Djccl.socket.family=AF_INET6")) {
            String[][] r = connect(a, b, "fd77::1", "fd77::2");
            a.send("EXERCISE " + r[1][2] + " " + r[1][3] + " " + (1 << 20));
            assertTrue(a.expect("OK").contains("swap saw 100"));
            b.send("RECEIVE 4");
            b.expect("OK");
        }
    }
}
