package io.jccl.tools.colltests;

import io.jccl.tools.JcclRuntime;
import org.junit.jupiter.api.Test;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Ranks started by Open MPI's {@code mpirun} (Debian package openmpi-bin): each JVM learns its rank and the world
 * size from OMPI_COMM_WORLD_RANK/SIZE, rendezvouses through MASTER_ADDR/MASTER_PORT (rank 0 serves the store) and
 * runs a checked allreduce sweep. Skipped with a message when mpirun is not installed
 * ({@code scripts/install-deps.sh} installs it).
 */
class MpirunSystemTest {
    private static Path mpirun() {
        for (String dir : System.getenv().getOrDefault("PATH", "/usr/bin").split(File.pathSeparator)) {
            Path candidate = Path.of(dir, "mpirun");
            if (Files.isExecutable(candidate)) {
                return candidate;
            }
        }
        return null;
    }

    @Test
    void shouldRunCollectivesUnderMpirun() throws Exception {
        Path mpirun = mpirun();
        assumeTrue(mpirun != null, "mpirun not found (apt-get install openmpi-bin, or scripts/install-deps.sh)");
        List<String> command = new ArrayList<>(List.of(mpirun.toString(), "--allow-run-as-root", "--oversubscribe",
            "--mca", "btl", "self,tcp", "--mca", "pml", "ob1", "-np", "2",
            "-x", "MASTER_ADDR=127.0.0.1", "-x", "MASTER_PORT=" + JcclRuntime.freePort(), "-x", "PATH"));
        command.addAll(JcclRuntime.javaCommand(List.of(), "io.jccl.tools.Main", List.of("tests", "all_reduce_perf",
            "-b", "8", "-e", "64K", "-f", "64", "-n", "3", "-w", "1")));
        ProcessBuilder builder = new ProcessBuilder(command).redirectErrorStream(true);
        builder.environment().put("OMPI_ALLOW_RUN_AS_ROOT", "1");
        builder.environment().put("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
        Process process = builder.start();
        byte[] output;
        try {
            output = process.getInputStream().readAllBytes();
            assertTrue(process.waitFor(120, TimeUnit.SECONDS), "mpirun did not finish");
        } finally {
            process.destroyForcibly();
        }
        String text = new String(output, StandardCharsets.UTF_8);
        System.out.print(text);
        assertEquals(0, process.exitValue(), text);
        assertTrue(text.contains("# Out of bounds values : 0 OK"), text);
        // Rank 0 prints one table naming both ranks that mpirun started, and the provider between them.
        assertTrue(text.contains("Rank  0 Group") && text.contains("Rank  1 Group"), text);
    }
}
