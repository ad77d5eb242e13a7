package io.jccl.benchmarks;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Locale;

/**
 * Start-up probe, the JCCL side of the peers' {@code mpi_init.c}: time from {@code main} to a ready communicator
 * and to the end of the first barrier, MAX over ranks. Rank 0 prints
 * {@code jccl_init,<nranks>,<create ms>,<create+barrier ms>,<process start to barrier done ms>}
 * (the last column includes JVM start-up: /proc/uptime minus the process start time of /proc/self/stat, both
 * relative to boot with clock-tick (10 ms) resolution; -1 where /proc is missing).
 * Run it under {@code ./jccl run -np N}; the wall time of that whole command is the launcher figure.
 */
public final class StartupProbe {
    private StartupProbe() {
    }

    /** Entry point (no arguments). */
    public static void main(String[] args) throws Exception {
        long t0 = System.nanoTime();
        int status = 0;
        try (BenchBackend comm = BenchBackend.fromEnvironment()) {
            long t1 = System.nanoTime();
            comm.barrier();
            long t2 = System.nanoTime();
            double sinceStart = processAgeMs();
            System.err.printf(Locale.ROOT, "# rank %d: create %.1f ms, create+barrier %.1f ms, process start -> "
                + "barrier done %.0f ms%n", comm.rank(), (t1 - t0) / 1e6, (t2 - t0) / 1e6, sinceStart);
            double create = comm.maxOverRanks((t1 - t0) / 1e6);
            double ready = comm.maxOverRanks((t2 - t0) / 1e6);
            double fromStart = comm.maxOverRanks(sinceStart);
            if (comm.rank() == 0) {
                System.out.printf(Locale.ROOT, "jccl_init,%d,%.2f,%.2f,%.1f%n", comm.size(), create, ready, fromStart);
                System.out.flush();
            }
        } catch (Exception e) {
            System.err.println("startup probe failed: " + e);
            status = 1;
        }
        System.exit(status);
    }

    /** Milliseconds since this process started, from /proc (10 ms resolution), or -1. */
    static double processAgeMs() {
        try {
            String stat = Files.readString(Path.of("/proc/self/stat"));
            String[] f = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
            long startTicks = Long.parseLong(f[19]); // field 22 (starttime); f[0] is field 3
            double uptime = Double.parseDouble(Files.readString(Path.of("/proc/uptime")).split(" ")[0]);
            return (uptime - startTicks / 100.0) * 1000.0;
        } catch (Exception | Error e) {
            return -1;
        }
    }
}
