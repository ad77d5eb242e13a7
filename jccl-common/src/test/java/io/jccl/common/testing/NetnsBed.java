package io.jccl.common.testing;

import java.io.IOException;
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
 * The network-namespace test bed of {@code scripts/netns.sh} for system tests: {@link #up} creates N "hosts" under
 * a prefix of the test's own, or skips the test (a JUnit assumption, with the reason) where namespaces cannot be
 * created (not root, no iproute2, no script); {@link #close} takes them down.
 */
public final class NetnsBed implements AutoCloseable {
    private final String prefix;
    private final Path script;

    private NetnsBed(String prefix, Path script) {
        this.prefix = prefix;
        this.script = script;
    }

    /** Creates {@code hosts} hosts named {@code prefix-h1..} (the module's {@code ../scripts/netns.sh}). */
    public static NetnsBed up(String prefix, int hosts) throws IOException, InterruptedException {
        assumeTrue("root".equals(System.getProperty("user.name")),
            "needs root to create network namespaces (running as " + System.getProperty("user.name") + ")");
        Path candidate = Path.of(System.getProperty("user.dir")).resolve("../scripts/netns.sh").normalize();
        assumeTrue(Files.isExecutable(candidate), "scripts/netns.sh not found at " + candidate);
        assumeTrue(run(List.of("ip", "netns", "list")) == 0, "'ip netns' is not available (install iproute2)");
        NetnsBed bed = new NetnsBed(prefix, candidate);
        int rc = bed.netns("up", Integer.toString(hosts));
        assumeTrue(rc == 0, "scripts/netns.sh up " + hosts + " failed (rc " + rc + "): cannot create network "
            + "namespaces here");
        return bed;
    }

    /** The namespaces' prefix: host i is the namespace {@code prefix-hi}. */
    public String prefix() {
        return prefix;
    }

    /** {@code scripts/netns.sh ARGS} under this bed's prefix; returns its exit status. */
    public int netns(String... args) throws IOException, InterruptedException {
        return run(command(args));
    }

    /** The command line of {@code scripts/netns.sh ARGS} under this bed's prefix (to start with more arguments). */
    public List<String> command(String... args) {
        List<String> command = new ArrayList<>(List.of("env", "JCCL_NETNS_PREFIX=" + prefix, script.toString()));
        command.addAll(List.of(args));
        return command;
    }

    /** Runs {@code command} to its end (60 s at most, else -1); prints its output when it fails. */
    public static int run(List<String> command) throws IOException, InterruptedException {
        Result r = runFor(command, 60);
        if (r.exitCode() != 0) {
            System.err.println(String.join(" ", command) + ": " + r.output());
        }
        return r.exitCode();
    }

    /** What {@link #runFor} saw: the exit status (-1 when it ran out of time) and the output, stdout and stderr. */
    public record Result(int exitCode, String output) {
    }

    /** Runs {@code command} to its end, {@code timeoutSeconds} at most (then killed, exit status -1). */
    public static Result runFor(List<String> command, long timeoutSeconds) throws IOException, InterruptedException {
        Path log = Files.createTempFile("jccl-netns-", ".log");
        try {
            Process p = new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(log.toFile()).start();
            if (!p.waitFor(timeoutSeconds, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                return new Result(-1, Files.readString(log, StandardCharsets.UTF_8) + "\n(timed out)");
            }
            return new Result(p.exitValue(), Files.readString(log, StandardCharsets.UTF_8));
        } finally {
            Files.deleteIfExists(log);
        }
    }

    /**
     * The command line of a JVM on host {@code host} running {@code mainClass} with {@code args}: this JVM's java,
     * its module and VM options ({@code --...}, {@code -XX:...}, {@code -Xss...}) and class path, then
     * {@code jvmArguments}.
     */
    public List<String> javaCommand(int host, List<String> jvmArguments, Class<?> mainClass, String... args) {
        List<String> command = new ArrayList<>(List.of("ip", "netns", "exec", prefix + "-h" + host,
            Path.of(System.getProperty("java.home"), "bin", "java").toString()));
        for (String argument : java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()) {
            if (argument.startsWith("--") || argument.startsWith("-XX:") || argument.startsWith("-Xss")) {
                command.add(argument);
            }
        }
        command.addAll(jvmArguments);
        command.add("-cp");
        command.add(System.getProperty("java.class.path"));
        command.add(mainClass.getName());
        command.addAll(List.of(args));
        return command;
    }

    /** Host {@code host}'s IPv4 address on the bed's bridge (scripts/netns.sh: 10.77.0.i, host 1 first). */
    public static String address(int host) {
        return "10.77.0." + host;
    }

    /**
     * Starts rank {@code rank} of a {@code worldSize}-rank tcp0 job on host {@code rank + 1}: a JVM of its own running
     * {@code mainClass} on this JVM's class path, joined through the store rank 0 serves on host 1 at
     * {@code storePort}, its output (stdout and stderr) in {@code output}.
     */
    public Process startRank(int rank, int worldSize, int storePort, Class<?> mainClass, Path output)
            throws IOException {
        List<String> command = new ArrayList<>(List.of("ip", "netns", "exec", prefix + "-h" + (rank + 1),
            "env", "JCCL_RANK=" + rank, "JCCL_WORLD_SIZE=" + worldSize,
            "JCCL_STORE_ADDR=" + address(1) + ":" + storePort, "JCCL_TRANSPORT=tcp0", "JCCL_TIMEOUT=60",
            Path.of(System.getProperty("java.home"), "bin", "java").toString(), "--enable-native-access=ALL-UNNAMED",
            "-Djccl.socket.ifname==eth0", "-Xmx256m", "-XX:+UseSerialGC", "-cp", System.getProperty("java.class.path"),
            mainClass.getName()));
        return new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(output.toFile()).start();
    }

    /**
     * Runs {@code mainClass} as every rank of a tcp0 job, rank r on host r + 1, and returns each rank's output once
     * all exited 0; fails (with every rank's output) when one does not finish within {@code timeoutSeconds} or exits
     * otherwise. The ranks are killed on the way out in any case.
     */
    public List<String> runRanks(int worldSize, Class<?> mainClass, long timeoutSeconds)
            throws IOException, InterruptedException {
        int port = 20_000 + java.util.concurrent.ThreadLocalRandom.current().nextInt(20_000);
        Path dir = Files.createTempDirectory("jccl-" + prefix + "-netns");
        List<Process> ranks = new ArrayList<>();
        List<Path> outputs = new ArrayList<>();
        try {
            for (int r = 0; r < worldSize; r++) {
                outputs.add(dir.resolve("rank" + r + ".log"));
                ranks.add(startRank(r, worldSize, port, mainClass, outputs.get(r)));
            }
            long deadlineNs = System.nanoTime() + TimeUnit.SECONDS.toNanos(timeoutSeconds);
            boolean done = true;
            for (Process rank : ranks) {
                done &= rank.waitFor(Math.max(0, deadlineNs - System.nanoTime()), TimeUnit.NANOSECONDS);
            }
            List<String> logs = new ArrayList<>();
            StringBuilder all = new StringBuilder();
            for (int r = 0; r < worldSize; r++) {
                logs.add(Files.readString(outputs.get(r)));
                all.append("rank ").append(r).append(":\n").append(logs.get(r)).append('\n');
            }
            assertTrue(done, "a rank did not finish within " + timeoutSeconds + " s:\n" + all);
            for (Process rank : ranks) {
                assertEquals(0, rank.exitValue(), all.toString());
            }
            return logs;
        } finally {
            ranks.forEach(Process::destroyForcibly);
        }
    }

    /** Takes the hosts down. */
    @Override
    public void close() throws IOException, InterruptedException {
        netns("down");
    }
}
