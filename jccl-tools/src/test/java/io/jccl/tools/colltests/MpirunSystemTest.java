package io.jccl.tools.colltests;

import io.jccl.common.CpuAffinity;
import io.jccl.tools.JcclRuntime;
import org.junit.jupiter.api.Test;

import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

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

    /** Runs {@code command} (mpirun, as root where needed) and returns what it printed; fails on a non-zero exit. */
    private static String run(List<String> command) throws Exception {
        ProcessBuilder builder = new ProcessBuilder(command);
        builder.environment().put("OMPI_ALLOW_RUN_AS_ROOT", "1");
        builder.environment().put("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
        return LauncherRun.run(builder, 120, "mpirun");
    }

    /**
     * mpirun's default binding ({@code --bind-to core} for two ranks) gives each rank a mask of one CPU; the ranks
     * decide together that they are not oversubscribed (issue 16, bug 2: each rank used to count only its own mask
     * and yield at once in every wait). The decision is JCCL's {@code CPU placement} INFO line.
     */
    @Test
    void shouldNotTakeRanksBoundByMpirunForOversubscribed() throws Exception {
        Path mpirun = mpirun();
        assumeTrue(mpirun != null, "mpirun not found (apt-get install openmpi-bin, or scripts/install-deps.sh)");
        assumeTrue(CpuAffinity.onlineCpus() >= 2, "needs two CPUs for two ranks bound to cores of their own");
        // No --oversubscribe and no --bind-to: mpirun's defaults, as a user runs it.
        List<String> command = new ArrayList<>(List.of(mpirun.toString(), "--allow-run-as-root",
            "--mca", "btl", "self,tcp", "--mca", "pml", "ob1", "--report-bindings", "-np", "2",
            "-x", "MASTER_ADDR=127.0.0.1", "-x", "MASTER_PORT=" + JcclRuntime.freePort(), "-x", "PATH",
            "-x", "JCCL_DEBUG=INFO", "-x", "JCCL_DEBUG_SUBSYS=INIT"));
        command.addAll(JcclRuntime.javaCommand(List.of(), "io.jccl.tools.Main", List.of("tests", "all_reduce_perf",
            "-b", "8", "-e", "8", "-n", "10", "-w", "1", "--jit_warmup", "0")));
        String text = run(command);
        assertTrue(text.contains("# Out of bounds values : 0 OK"), text);
        List<String> placements = text.lines().filter(l -> l.contains("CPU placement: ")).toList();
        assertEquals(2, placements.size(), "one CPU placement line per rank:\n" + text);
        for (String line : placements) {
            assertTrue(line.contains("every rank has a CPU of its own"), line);
            assertTrue(!line.contains("yields early"), line);
        }
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
        String text = run(command);
        assertTrue(text.contains("# Out of bounds values : 0 OK"), text);
        // Rank 0 prints one table naming both ranks that mpirun started, and the provider between them.
        assertTrue(text.contains("Rank  0 Group") && text.contains("Rank  1 Group"), text);
    }
}
