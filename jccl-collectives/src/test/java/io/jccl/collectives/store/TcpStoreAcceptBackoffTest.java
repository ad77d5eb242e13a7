package io.jccl.collectives.store;

import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.Writer;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A store server that runs out of file descriptors (EMFILE from accept) backs off instead of spinning, and says so
 * at most once a second; when descriptors come back it serves again. The server runs in a child JVM started with
 * {@code ulimit -n 96}, and this test fills its descriptors with connections.
 */
class TcpStoreAcceptBackoffTest {
    private static final long SECOND = TimeUnit.SECONDS.toNanos(1);

    @TempDir
    Path dir;

    @Test
    void acceptOutOfDescriptorsBacksOffAndLogsAtMostOncePerSecond() throws Exception {
        Assumptions.assumeTrue(Files.isExecutable(Path.of("/bin/bash")), "needs /bin/bash for ulimit");
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        Path stderr = dir.resolve("child.err");
        Process child = new ProcessBuilder("/bin/bash", "-c", "ulimit -n 96 && exec \"$@\"", "storm", java,
            "-XX:+UseSerialGC", "-Xmx64m", "-XX:TieredStopAtLevel=1", "-cp", System.getProperty("java.class.path"),
            AcceptStormMain.class.getName())
            .redirectError(stderr.toFile()).start();
        List<Socket> sockets = new ArrayList<>();
        try (BufferedReader out = new BufferedReader(new InputStreamReader(child.getInputStream(),
                StandardCharsets.UTF_8));
             Writer in = new java.io.OutputStreamWriter(child.getOutputStream(), StandardCharsets.UTF_8)) {
            String first = out.readLine();
            assertNotNull(first, "child failed: " + Files.readString(stderr));
            assertTrue(first.startsWith("PORT "), first);
            int port = Integer.parseInt(first.substring(5).trim());
            for (int i = 0; i < 150; i++) {
                sockets.add(Hostile.connect(port)); // the kernel accepts them; the child runs out of descriptors
            }
            Thread.sleep(3000);
            in.write("cpu\n");
            in.flush();
            String cpu = out.readLine();
            assertNotNull(cpu, "child failed: " + Files.readString(stderr));
            long cpuMs = Long.parseLong(cpu.substring(4).trim());
            long warnings;
            try (Stream<String> lines = Files.lines(stderr)) {
                warnings = lines.filter(l -> l.contains("accept failed")).count();
            }
            String summary = "3 s out of descriptors: server thread CPU " + cpuMs + " ms, " + warnings
                + " 'accept failed' warnings";
            System.out.println(summary);
            assertTrue(warnings >= 1, "the failure must be reported; " + summary);
            assertTrue(warnings <= 5, summary);
            assertTrue(cpuMs < 600, summary);

            sockets.forEach(Hostile::closeQuietly);
            sockets.clear();
            try (TcpStore store = new TcpStore("127.0.0.1", port, false, 10 * SECOND)) {
                store.setString("back", "again", SECOND);
                assertEquals("again", store.getString("back", SECOND));
            }
            in.write("exit\n");
            in.flush();
            assertTrue(child.waitFor(10, TimeUnit.SECONDS), "child did not exit");
        } finally {
            sockets.forEach(Hostile::closeQuietly);
            child.destroyForcibly();
        }
    }
}
