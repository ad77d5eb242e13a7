package io.jccl.tools.demo;

import io.jccl.tools.JcclRuntime;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * {@code jccl demo --elastic}: starts 4 local {@link ElasticRank} processes, kills one (kill -9) at a random step
 * (any rank, the store's host included), lets the survivors shrink and train on, starts a replacement with
 * {@code JCCL_JOIN=1} at the address the survivors print, and checks the outcome: the survivors and the replacement
 * exit 0 (their own checks: bit-identical weights, 4 ranks again, accuracy within one point of an uninterrupted
 * run). Not the {@code Launcher}: it treats a killed rank as the job's failure, which is the point here not to.
 */
final class ElasticDemo {
    private static final int RANKS = 4;

    private final int epochs;
    private final long seed;
    private final long timeoutSeconds;
    private final Map<String, String> env;
    private final PrintStream out;

    ElasticDemo(int epochs, long seed, long timeoutSeconds, Map<String, String> env, PrintStream out) {
        this.epochs = epochs;
        this.seed = seed;
        this.timeoutSeconds = timeoutSeconds;
        this.env = env;
        this.out = out;
    }

    /** Runs the demo; returns the exit status (0: every check passed). */
    int run() throws Exception {
        java.util.SplittableRandom random = new java.util.SplittableRandom(seed);
        long stepsPerEpoch = (1500 + 63) / 64;
        long totalSteps = epochs * stepsPerEpoch;
        int victim = random.nextInt(RANKS);
        // somewhere after the first epoch and before the last, so that there is training on both sides
        long killStep = stepsPerEpoch + (long) (random.nextDouble() * Math.max(1, totalSteps - 2 * stepsPerEpoch));
        out.printf("jccl demo --elastic: %d local ranks, %d epochs; rank %d will be killed (kill -9) at step %d of %d "
            + "(seed %d)%n", RANKS, epochs, victim, killStep, totalSteps, seed);
        int port = JcclRuntime.freePort();
        long deadlineNs = System.nanoTime() + TimeUnit.SECONDS.toNanos(timeoutSeconds);
        List<Process> processes = new ArrayList<>();
        List<CompletableFuture<Void>> readers = new ArrayList<>();
        CompletableFuture<Void> killMe = new CompletableFuture<>();
        CompletableFuture<String> joinAddress = new CompletableFuture<>();
        try {
            for (int r = 0; r < RANKS; r++) {
                Map<String, String> e = rankEnv();
                e.put("JCCL_RANK", Integer.toString(r));
                e.put("JCCL_WORLD_SIZE", Integer.toString(RANKS));
                e.put("JCCL_STORE_ADDR", "127.0.0.1:" + port);
                processes.add(start(e, victim, killStep));
                readers.add(relay(processes.get(r), Integer.toString(r), killMe, joinAddress));
            }
            killMe.get(remainingMs(deadlineNs), TimeUnit.MILLISECONDS);
            long killNs = System.nanoTime();
            processes.get(victim).destroyForcibly(); // SIGKILL
            out.printf("jccl demo --elastic: killed rank %d (pid %d)%n", victim, processes.get(victim).pid());
            String address = joinAddress.get(remainingMs(deadlineNs), TimeUnit.MILLISECONDS);
            Map<String, String> e = rankEnv();
            e.put("JCCL_JOIN", "1");
            e.put("JCCL_STORE_ADDR", address);
            out.printf("jccl demo --elastic: starting a replacement (JCCL_JOIN=1 JCCL_STORE_ADDR=%s), %d ms after "
                + "the kill%n", address, TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - killNs));
            processes.add(start(e, victim, -1));
            readers.add(relay(processes.get(RANKS), "new", null, null));
            boolean ok = true;
            for (int i = 0; i < processes.size(); i++) {
                if (i == victim) {
                    continue;
                }
                Process p = processes.get(i);
                if (!p.waitFor(remainingMs(deadlineNs), TimeUnit.MILLISECONDS)) {
                    out.printf("jccl demo --elastic: %s did not finish within %d s%n", name(i), timeoutSeconds);
                    ok = false;
                    break;
                }
                if (p.exitValue() != 0) {
                    out.printf("jccl demo --elastic: %s exited with %d%n", name(i), p.exitValue());
                    ok = false;
                }
            }
            for (CompletableFuture<Void> f : readers) {
                f.get(5, TimeUnit.SECONDS); // their last lines are out
            }
            out.println(ok ? "jccl demo --elastic: all checks passed" : "jccl demo --elastic: CHECK FAILED");
            return ok ? 0 : 1;
        } catch (java.util.concurrent.TimeoutException e) {
            out.printf("jccl demo --elastic: FAILED: nothing happened within %d s (--timeout)%n", timeoutSeconds);
            return 1;
        } finally {
            for (Process p : processes) {
                p.destroyForcibly();
            }
        }
    }

    private static String name(int i) {
        return i == RANKS ? "the replacement" : "rank " + i;
    }

    private Map<String, String> rankEnv() {
        Map<String, String> e = new java.util.HashMap<>(env);
        // a dead process on this host is seen at once; the peer timeout bounds the rest (a silent store, a join)
        e.putIfAbsent("JCCL_PEER_TIMEOUT", "5s");
        return e;
    }

    private Process start(Map<String, String> e, int victim, long killStep) throws IOException {
        List<String> command = JcclRuntime.javaCommand(List.of("-XX:+UseSerialGC", "-Xmx256m"),
            ElasticRank.class.getName(), List.of(Integer.toString(epochs), Integer.toString(victim),
                Long.toString(killStep)));
        ProcessBuilder pb = new ProcessBuilder(command).redirectErrorStream(true);
        pb.environment().putAll(e);
        return pb.start();
    }

    /** Copies a process's lines to the output with a prefix and watches for the lines the demo acts on. */
    private CompletableFuture<Void> relay(Process p, String prefix, CompletableFuture<Void> killMe,
                                          CompletableFuture<String> joinAddress) {
        CompletableFuture<Void> done = new CompletableFuture<>();
        Thread.ofPlatform().daemon().name("elastic-out-" + prefix).start(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(p.getInputStream(),
                StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null) {
                    synchronized (out) {
                        out.println("[" + prefix + "] " + line);
                    }
                    if (killMe != null && line.startsWith("KILL ME")) {
                        killMe.complete(null);
                    } else if (joinAddress != null && line.startsWith("JOIN ADDRESS ")) {
                        joinAddress.complete(line.substring("JOIN ADDRESS ".length()).trim());
                    }
                }
            } catch (IOException ignored) {
                // the process is gone
            }
            done.complete(null);
        });
        return done;
    }

    private static long remainingMs(long deadlineNs) {
        return Math.max(1, TimeUnit.NANOSECONDS.toMillis(deadlineNs - System.nanoTime()));
    }
}
