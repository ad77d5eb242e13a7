package io.jccl.services.embedding;

import io.jccl.common.testing.NetnsBed;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The parameter server and the embedding cache between two "hosts" (network namespaces from scripts/netns.sh,
 * prefix {@code jem}) over tcp0, each rank a JVM of its own joined through a TCP store served by rank 0 on host 1
 * ({@link ServicesNetnsPeer}). Skipped, with the reason, where network namespaces cannot be created (not root, no
 * iproute2).
 */
class ServicesNetnsSystemTest {
    private static final String PREFIX = "jem";
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

    private static Process peer(int rank, int port, Path output) throws IOException {
        List<String> command = new ArrayList<>(List.of("ip", "netns", "exec", PREFIX + "-h" + (rank + 1),
            "env", "JCCL_RANK=" + rank, "JCCL_WORLD_SIZE=2", "JCCL_STORE_ADDR=10.77.0.1:" + port,
            "JCCL_TRANSPORT=tcp0", "JCCL_TIMEOUT=60",
            Path.of(System.getProperty("java.home"), "bin", "java").toString(), "--enable-native-access=ALL-UNNAMED",
            "-Djccl.socket.ifname==eth0", "-Xmx256m", "-XX:+UseSerialGC", "-cp", System.getProperty("java.class.path"),
            ServicesNetnsPeer.class.getName()));
        return new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(output.toFile()).start();
    }

    @Test
    void shouldTrainThroughTheParameterServerAndLookUpEmbeddingsBetweenNamespaceHostsOverTcp() throws Exception {
        int port = 20_000 + ThreadLocalRandom.current().nextInt(20_000);
        Path dir = Files.createTempDirectory("jccl-emb-netns");
        Path out0 = dir.resolve("rank0.log");
        Path out1 = dir.resolve("rank1.log");
        Process p0 = peer(0, port, out0);
        Process p1 = peer(1, port, out1);
        try {
            boolean done = p0.waitFor(120, TimeUnit.SECONDS) & p1.waitFor(30, TimeUnit.SECONDS);
            String log0 = Files.readString(out0);
            String log1 = Files.readString(out1);
            String both = "rank 0:\n" + log0 + "\nrank 1:\n" + log1;
            assertTrue(done, "a peer did not finish within 120 s:\n" + both);
            assertEquals(0, p0.exitValue(), both);
            assertEquals(0, p1.exitValue(), both);
            for (String log : List.of(log0, log1)) {
                assertTrue(log.contains("DEVICE tcp0") && log.contains("PS OK") && log.contains("EMB OK")
                    && log.contains("DONE"), both);
            }
        } finally {
            p0.destroyForcibly();
            p1.destroyForcibly();
        }
    }
}
