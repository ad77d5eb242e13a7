package io.jccl.tools.launcher;

import io.jccl.common.SecureIds;
import io.jccl.tools.JcclRuntime;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;

/**
 * Starts N processes of one command on this host as the ranks of a job, the way {@code torchrun} or
 * {@code mpirun -np N} does on one node, and supervises them.
 *
 * <p>Every rank gets {@code JCCL_RANK}, {@code JCCL_WORLD_SIZE}, {@code JCCL_LOCAL_RANK}, {@code JCCL_LOCAL_SIZE},
 * {@code JCCL_JOB_ID}, {@code JCCL_STORE_ADDR} (host:port of the rendezvous store rank 0 serves) and the torchrun
 * names {@code RANK}, {@code WORLD_SIZE}, {@code LOCAL_RANK}, {@code LOCAL_WORLD_SIZE}, {@code MASTER_ADDR},
 * {@code MASTER_PORT}. Output lines are prefixed with {@code [rank]} unless disabled. When a rank exits with a
 * non-zero status the others are killed and that status is the job's; a timeout kills everything (status 124);
 * so does the launcher's own shutdown (Ctrl-C).
 *
 * <pre>{@code
 * Launcher.Result r = Launcher.builder().ranks(4).javaMain("io.jccl.examples.AllReduce", List.of("-n", "10"))
 *     .timeout(Duration.ofMinutes(1)).build().run();
 * }</pre>
 */
public final class Launcher {
    /** Exit status reported when the job ran past its timeout (as coreutils {@code timeout}). */
    public static final int TIMEOUT_STATUS = 124;
    /** Exit status reported when the launcher was interrupted (as a shell reports SIGINT). */
    public static final int INTERRUPTED_STATUS = 130;
    private static final long KILL_GRACE_MS = 2000;

    private final int ranks;
    private final List<String> command;
    private final boolean prefixOutput;
    private final Duration timeout;
    private final Map<String, String> environment;
    private final Path workingDirectory;
    private final PrintStream out;
    private final PrintStream err;
    private final String jobId;
    private final int masterPort;
    private final AotCache aot;

    private Launcher(Builder b) {
        this.ranks = b.ranks;
        this.command = List.copyOf(b.command);
        this.prefixOutput = b.prefixOutput;
        this.timeout = b.timeout;
        this.environment = Map.copyOf(b.environment);
        this.workingDirectory = b.workingDirectory;
        this.out = b.out;
        this.err = b.err;
        this.jobId = b.jobId != null ? b.jobId : randomJobId();
        this.masterPort = b.masterPort > 0 ? b.masterPort : JcclRuntime.freePort();
        this.aot = b.aot;
    }

    /** A new builder. */
    public static Builder builder() {
        return new Builder();
    }

    /** The job id every rank sees as JCCL_JOB_ID. */
    public String jobId() {
        return jobId;
    }

    /** The rendezvous port (MASTER_PORT, and the port of JCCL_STORE_ADDR). */
    public int masterPort() {
        return masterPort;
    }

    /** The environment rank {@code rank} is started with (on top of this process's environment). */
    public Map<String, String> rankEnvironment(int rank) {
        Map<String, String> env = new LinkedHashMap<>(environment);
        String r = String.valueOf(rank);
        String n = String.valueOf(ranks);
        env.put("JCCL_RANK", r);
        env.put("JCCL_WORLD_SIZE", n);
        env.put("JCCL_LOCAL_RANK", r);
        env.put("JCCL_LOCAL_SIZE", n);
        env.put("JCCL_JOB_ID", jobId);
        env.put("JCCL_STORE_ADDR", "127.0.0.1:" + masterPort);
        env.put("MASTER_ADDR", "127.0.0.1");
        env.put("MASTER_PORT", String.valueOf(masterPort));
        env.put("RANK", r);
        env.put("WORLD_SIZE", n);
        env.put("LOCAL_RANK", r);
        env.put("LOCAL_WORLD_SIZE", n);
        return env;
    }

    /**
     * Starts the ranks and waits for them.
     *
     * @return the job's outcome; {@link Result#exitCode()} is 0 only if every rank exited with 0
     * @throws IOException when a rank cannot be started (the ones already started are killed)
     */
    public Result run() throws IOException, InterruptedException {
        Process[] processes = new Process[ranks];
        List<Thread> pumps = new ArrayList<>();
        Thread hook = Thread.ofPlatform().unstarted(() -> killAll(processes));
        Runtime.getRuntime().addShutdownHook(hook);
        long startNs = System.nanoTime();
        AotCache.Plan plan = aotPlan();
        boolean finished = false;
        try {
            for (int rank = 0; rank < ranks; rank++) {
                ProcessBuilder pb = new ProcessBuilder(plan.commandFor(rank, command));
                pb.environment().putAll(rankEnvironment(rank));
                if (workingDirectory != null) {
                    pb.directory(workingDirectory.toFile());
                }
                try {
                    processes[rank] = pb.start();
                } catch (IOException e) {
                    killAll(processes);
                    throw new IOException("cannot start rank " + rank + " (" + String.join(" ", command) + "): "
                        + e.getMessage(), e);
                }
                String prefix = prefixOutput ? "[" + rank + "] " : "";
                int r = rank;
                pumps.add(pump(processes[rank].getInputStream(), out, prefix, "rank-" + rank + "-out", false,
                    line -> plan.isJvmNote(r, line)));
                pumps.add(pump(processes[rank].getErrorStream(), err, prefix, "rank-" + rank + "-err", true,
                    line -> false));
            }
            Result result = supervise(processes, startNs);
            for (Thread pump : pumps) {
                pump.join(2000);
            }
            if (aot != null) {
                aot.finish(plan, result.exitCode() != 0 ? result.exitCode() : result.rankExitCodes()[0]);
                finished = true;
            }
            return result;
        } catch (InterruptedException e) {
            killAll(processes);
            throw e;
        } finally {
            if (aot != null && !finished) {
                aot.finish(plan, -1); // drops a recording of a job that did not end normally
            }
            try {
                Runtime.getRuntime().removeShutdownHook(hook);
            } catch (IllegalStateException ignored) {
                // the JVM is shutting down; the hook runs
            }
        }
    }

    /** What the AOT cache does for this job (nothing without one). */
    AotCache.Plan aotPlan() {
        if (aot == null) {
            return AotCache.Plan.none("no AOT cache directory");
        }
        Map<String, String> env = new LinkedHashMap<>(System.getenv());
        env.putAll(environment);
        return aot.plan(command, env);
    }

    private final Object exitSignal = new Object();
    private int exitsSeen;
    private int exitsHandled;

    private Result supervise(Process[] processes, long startNs) throws InterruptedException {
        for (Process p : processes) {
            p.onExit().thenRun(() -> {
                synchronized (exitSignal) {
                    exitsSeen++;
                    exitSignal.notifyAll();
                }
            });
        }
        int[] exitCodes = new int[ranks];
        Arrays.fill(exitCodes, Integer.MIN_VALUE);
        int running = ranks;
        long deadlineNs = timeout == null || timeout.isZero() ? Long.MAX_VALUE : startNs + timeout.toNanos();
        while (running > 0) {
            for (int rank = 0; rank < ranks; rank++) {
                if (exitCodes[rank] != Integer.MIN_VALUE || processes[rank].isAlive()) {
                    continue;
                }
                int code = processes[rank].exitValue();
                exitCodes[rank] = code;
                running--;
                if (code != 0) {
                    int others = 0;
                    for (int k = 0; k < ranks; k++) {
                        if (processes[k].isAlive()) {
                            others++;
                        }
                    }
                    err.println("jccl run: rank " + rank + " exited with code " + code
                        + (others > 0 ? "; killing the " + others + " other rank" + (others == 1 ? "" : "s") : ""));
                    killAll(processes);
                    fillExitCodes(processes, exitCodes);
                    return new Result(code, rank, false, exitCodes);
                }
            }
            if (running == 0) {
                break;
            }
            if (System.nanoTime() > deadlineNs) {
                err.println("jccl run: timeout after " + timeout.toSeconds() + " s; killing all " + ranks + " ranks");
                killAll(processes);
                fillExitCodes(processes, exitCodes);
                return new Result(TIMEOUT_STATUS, -1, true, exitCodes);
            }
            // Wake on any rank's exit (onExit callbacks signal the monitor) or after 50 ms, whichever comes first:
            // waiting on one process only noticed another's exit up to 50 ms late, on every job's last exit.
            synchronized (exitSignal) {
                if (exitsSeen == exitsHandled) {
                    exitSignal.wait(50);
                }
                exitsHandled = exitsSeen;
            }
        }
        return new Result(0, -1, false, exitCodes);
    }

    private static void fillExitCodes(Process[] processes, int[] exitCodes) throws InterruptedException {
        for (int k = 0; k < processes.length; k++) {
            if (exitCodes[k] == Integer.MIN_VALUE && processes[k] != null) {
                processes[k].waitFor(KILL_GRACE_MS, TimeUnit.MILLISECONDS);
                exitCodes[k] = processes[k].isAlive() ? -1 : processes[k].exitValue();
            }
        }
    }

    /** Kills every process still running (and their children): SIGTERM, then SIGKILL after a grace period. */
    private static void killAll(Process[] processes) {
        List<ProcessHandle> handles = new ArrayList<>();
        for (Process p : processes) {
            if (p != null && p.isAlive()) {
                p.toHandle().descendants().forEach(handles::add);
                handles.add(p.toHandle());
            }
        }
        handles.forEach(ProcessHandle::destroy);
        long deadline = System.nanoTime() + KILL_GRACE_MS * 1_000_000L;
        for (ProcessHandle h : handles) {
            long left = deadline - System.nanoTime();
            if (left > 0) {
                try {
                    h.onExit().get(left, TimeUnit.NANOSECONDS);
                } catch (Exception ignored) {
                    // forced below
                }
            }
            if (h.isAlive()) {
                h.destroyForcibly();
            }
        }
    }

    /**
     * Copies a rank's output line by line with the prefix. On stderr the JDK's "Using incubator modules" warning
     * (the first line of every JVM started with the Vector API module) is dropped: N copies of it say nothing.
     */
    private static Thread pump(InputStream in, PrintStream target, String prefix, String name, boolean stderr,
                               Predicate<String> drop) {
        return Thread.ofPlatform().daemon().name(name).start(() -> {
            try (BufferedReader reader = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8))) {
                String line;
                boolean first = true;
                while ((line = reader.readLine()) != null) {
                    if (stderr && first && line.startsWith("WARNING: Using incubator modules")) {
                        first = false;
                        continue;
                    }
                    first = false;
                    if (drop.test(line)) {
                        continue;
                    }
                    synchronized (target) {
                        target.println(prefix + line);
                        target.flush();
                    }
                }
            } catch (IOException ignored) {
                // the process went away
            }
        });
    }

    private static String randomJobId() {
        // SecureIds reads /dev/urandom: a SecureRandom here cost the launcher ~20 ms of security-provider start-up.
        return HexFormat.of().formatHex(SecureIds.bytes(6));
    }

    /**
     * How a job ended.
     *
     * @param exitCode 0, the first non-zero rank status, or {@link #TIMEOUT_STATUS}
     * @param failedRank the rank whose non-zero exit ended the job, or -1
     * @param timedOut whether the timeout killed the job
     * @param rankExitCodes each rank's status (-1 if it could not be reaped)
     */
    public record Result(int exitCode, int failedRank, boolean timedOut, int[] rankExitCodes) {
    }

    /** Builds a {@link Launcher}. */
    public static final class Builder {
        private int ranks = 1;
        private List<String> command = List.of();
        private boolean prefixOutput = true;
        private Duration timeout;
        private final Map<String, String> environment = new LinkedHashMap<>();
        private Path workingDirectory;
        private PrintStream out = System.out;
        private PrintStream err = System.err;
        private String jobId;
        private int masterPort;
        private AotCache aot;

        private Builder() {
        }

        /** Number of ranks (processes), at least 1. */
        public Builder ranks(int n) {
            if (n < 1) {
                throw new IllegalArgumentException("need at least one rank");
            }
            this.ranks = n;
            return this;
        }

        /** The command every rank runs. */
        public Builder command(List<String> command) {
            this.command = List.copyOf(command);
            return this;
        }

        /** Runs {@code mainClass} in a JVM with the JCCL flags and class path. */
        public Builder javaMain(String mainClass, List<String> args) {
            return javaMain(List.of(), mainClass, args);
        }

        /** Runs {@code mainClass} in a JVM with the JCCL flags, class path and {@code jvmOptions}. */
        public Builder javaMain(List<String> jvmOptions, String mainClass, List<String> args) {
            return command(JcclRuntime.javaCommand(jvmOptions, mainClass, args));
        }

        /** Whether output lines get a {@code [rank] } prefix (default true). */
        public Builder prefixOutput(boolean prefix) {
            this.prefixOutput = prefix;
            return this;
        }

        /** Kill the job after this long (null or zero: no limit). */
        public Builder timeout(Duration timeout) {
            this.timeout = timeout;
            return this;
        }

        /** An extra environment variable for every rank. */
        public Builder env(String name, String value) {
            environment.put(Objects.requireNonNull(name), Objects.requireNonNull(value));
            return this;
        }

        /** Working directory of the ranks (default: this process's). */
        public Builder workingDirectory(Path dir) {
            this.workingDirectory = dir;
            return this;
        }

        /** Where rank stdout goes (default System.out). */
        public Builder out(PrintStream out) {
            this.out = Objects.requireNonNull(out);
            return this;
        }

        /** Where rank stderr and the launcher's messages go (default System.err). */
        public Builder err(PrintStream err) {
            this.err = Objects.requireNonNull(err);
            return this;
        }

        /** A fixed job id (default: random). */
        public Builder jobId(String id) {
            this.jobId = id;
            return this;
        }

        /** A fixed rendezvous port (default: a free port). */
        public Builder masterPort(int port) {
            this.masterPort = port;
            return this;
        }

        /**
         * Use (or train) JDK AOT caches for Java rank commands (see {@link AotCache}); null (the default) for none.
         */
        public Builder aotCache(AotCache cache) {
            this.aot = cache;
            return this;
        }

        /** The launcher. */
        public Launcher build() {
            if (command.isEmpty()) {
                throw new IllegalArgumentException("no command to launch");
            }
            return new Launcher(this);
        }
    }
}
