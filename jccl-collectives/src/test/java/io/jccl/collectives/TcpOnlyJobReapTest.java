package io.jccl.collectives;

import org.junit.jupiter.api.Test;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Issue 15, item 11: the shared-memory files of a killed rank are removed by the next JCCL process on the host even
 * when that process's job uses only tcp0 (it never opens shm0, and before, never loaded the shm provider, whose
 * background reap removes them).
 */
class TcpOnlyJobReapTest {
    private static final Path SHM = Path.of("/dev/shm");

    private static Process child(String... args) throws IOException {
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        List<String> cmd = new ArrayList<>(List.of(java, "--enable-native-access=ALL-UNNAMED",
            "-XX:+UseSerialGC", "-Xmx128m", "-cp", System.getProperty("java.class.path"),
            ProviderHousekeepingMain.class.getName()));
        cmd.addAll(List.of(args));
        return new ProcessBuilder(cmd).redirectErrorStream(true).start();
    }

    private static List<Path> filesOf(long pid) throws IOException {
        try (Stream<Path> files = Files.list(SHM)) {
            return files.filter(f -> f.getFileName().toString().startsWith("jccl-" + pid + "-")).toList();
        }
    }

    @Test
    void aTcpOnlyProcessRemovesTheShmFilesOfAKilledProcess() throws Exception {
        Process holder = child("hold");
        List<Path> left;
        try {
            BufferedReader out = new BufferedReader(new InputStreamReader(holder.getInputStream(),
                StandardCharsets.UTF_8));
            String line;
            while ((line = out.readLine()) != null && !line.equals("HOLD")) {
                System.out.println("holder: " + line);
            }
            assertEquals("HOLD", line, "the holder did not start");
            left = filesOf(holder.pid());
            assertFalse(left.isEmpty(), "the holder made no files in /dev/shm");
        } finally {
            holder.destroyForcibly();
        }
        assertTrue(holder.waitFor(10, TimeUnit.SECONDS));
        assertTrue(left.stream().allMatch(Files::exists), "files of the killed process left for the test");
        // The tcp-only process lives 3 s: the background reap starts 200 ms after the provider loads.
        Process tcpOnly = child("tcp", "3000");
        String output = new String(tcpOnly.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(tcpOnly.waitFor(30, TimeUnit.SECONDS) && tcpOnly.exitValue() == 0, output);
        List<Path> still = left.stream().filter(Files::exists).toList();
        assertTrue(still.isEmpty(), "a tcp-only process left the killed process's files: " + still);
    }
}
