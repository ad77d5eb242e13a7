package io.jccl.collectives;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.function.IntFunction;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Randomised fault injection: ranks as separate JVMs run random collectives ({@link FaultInjectionMain}), checked
 * against a reference; the test kills a random rank (rank 0, the store's host, included) at a random moment, and in
 * a third of the trials a second rank 0-400 ms later (often during the first recovery). Every trial checks: no hang
 * (every survivor exits within 90 s), no wrong result (a rank exits 2 on one), every survivor exits 0 and prints the
 * same member list, and that list is exactly the ranks that finished (the agreement invariants).
 *
 * <p>In CI a modest run: 2 trials of 4 ranks over shm0. {@code scripts/fault-injection.sh} runs more through the
 * environment: JCCL_FI_TRIALS (per case), JCCL_FI_RANKS (e.g. "4 8"), JCCL_FI_TRANSPORT (shm0, tcp0), JCCL_FI_SEED;
 * JCCL_FI_NETNS_HOSTS=H runs rank r in host r % H + 1 of a running {@code scripts/netns.sh} bed (prefix
 * JCCL_NETNS_PREFIX, default jft; {@code scripts/fault-injection-netns.sh} brings it up and down).
 */
class FaultInjectionTest {
    private static final Pattern DONE = Pattern.compile("DONE rank (\\d+) members \\[([\\d, ]*)\\] agreed (-?\\d+)");
    private static final Pattern RECOVERED = Pattern.compile("RECOVERED rank \\d+ members .* at (\\d+)");
    private static final Pattern PHASES = Pattern.compile("PHASES rank (\\d+) failed ([\\d.]+) start ([\\d.]+) decided"
        + " ([\\d.]+) records ([\\d.]+) devices ([\\d.]+) qps ([\\d.]+) connected ([\\d.]+) init ([\\d.]+) ready"
        + " ([\\d.]+) recovered ([\\d.]+) attempts (\\d+) store (\\d+) cause (.*)");
    /** The recovery breakdown's columns: the first survivor's detection, then the last survivor's timeline. */
    static final String[] PHASE_NAMES = {"detect", "revoke-spread", "fail->shrink", "agreement", "join-records",
        "devices", "queue-pairs", "all-connected", "placement+barrier", "warm-up", "first-collectives", "total"};

    /** Beyond the suite's 120 s default: the script's runs take long; every wait of a trial is bounded (90 s). */
    @Test
    @Timeout(value = 12, unit = TimeUnit.HOURS)
    void randomKillsLeaveSurvivorsThatAgreeAndComputeRightResults() throws Exception {
        int trials = Integer.parseInt(env("JCCL_FI_TRIALS", "2"));
        String transport = env("JCCL_FI_TRANSPORT", "shm0");
        long baseSeed = Long.parseLong(env("JCCL_FI_SEED", Long.toString(System.nanoTime() & 0xFFFFFF)));
        List<String> failures = new ArrayList<>();
        for (String ranks : env("JCCL_FI_RANKS", "4").trim().split("\\s+")) {
            int n = Integer.parseInt(ranks);
            List<Long> recoveryMs = new ArrayList<>();
            List<double[]> breakdowns = new ArrayList<>();
            Map<String, Integer> causes = new java.util.TreeMap<>();
            int ok = 0;
            for (int t = 0; t < trials; t++) {
                long seed = baseSeed + 1000L * n + t;
                String failure = trial(n, transport, seed, recoveryMs, breakdowns, causes);
                if (failure == null) {
                    ok++;
                } else {
                    failures.add(n + " ranks, seed " + seed + ": " + failure);
                }
            }
            recoveryMs.sort(null);
            System.out.println("fault injection over " + transport + ", " + n + " ranks: " + trials + " trials, " + ok
                + " passed, " + (trials - ok) + " failed; kill -> first working shrunk communicator (ms): median "
                + (recoveryMs.isEmpty() ? "-" : recoveryMs.get(recoveryMs.size() / 2)) + ", max "
                + (recoveryMs.isEmpty() ? "-" : recoveryMs.getLast()) + ", p90 "
                + (recoveryMs.isEmpty() ? "-" : recoveryMs.get(recoveryMs.size() * 9 / 10)) + ", within "
                + (hostsEnv() > 0 ? "2" : "1") + " s " + recoveryMs.stream().filter(ms -> ms <= (hostsEnv() > 0 ? 2000
                : 1000)).count() + "/" + recoveryMs.size() + " (seeds from " + baseSeed + ")");
            printBreakdown(transport, n, breakdowns, causes);
        }
        assertTrue(failures.isEmpty(), String.join("\n\n", failures));
    }

    /** One trial; null when every check passed, else what failed (with the outputs). */
    private static String trial(int n, String transport, long seed, List<Long> recoveryMs, List<double[]> breakdowns,
                                Map<String, Integer> causes) throws Exception {
        SplittableRandom random = new SplittableRandom(seed);
        int victim = random.nextInt(n);
        long delayMs = random.nextInt(500);
        int second = random.nextInt(3) == 0 ? (victim + 1 + random.nextInt(n - 1)) % n : -1;
        long secondDelayMs = random.nextInt(400);
        int hosts = hostsEnv();
        // default settings otherwise (JCCL_PEER_TIMEOUT 30 s): a kill must be detected without the peer timeout
        Map<String, String> settings = new HashMap<>(Map.of("JCCL_TRANSPORT", transport));
        IntFunction<List<String>> prefix = r -> List.of();
        if (hosts > 0) {
            // rank r on namespace host r % hosts + 1 of scripts/netns.sh (rank 0, the store's host, on host 1)
            String ns = env("JCCL_NETNS_PREFIX", "jft");
            settings.put("JCCL_STORE_ADDR", "10.77.0.1:" + freePort());
            settings.put("JCCL_SOCKET_IFNAME", "=eth0");
            prefix = r -> List.of("ip", "netns", "exec", ns + "-h" + (r % hosts + 1), "env",
                "JCCL_HOST_ID=" + ns + "-h" + (r % hosts + 1));
        }
        try (MultiProcessTest.Job job = new MultiProcessTest.Job(n, "fault", settings, true, prefix,
            Long.toString(seed))) {
            long startMs = System.currentTimeMillis();
            for (int r = 0; r < n; r++) {
                if (!job.waitForLine(r, "RUNNING", 90_000)) {
                    return "rank " + r + " did not start:\n" + job.out(r);
                }
            }
            Thread.sleep(delayMs);
            long killMs = System.currentTimeMillis();
            job.processes.get(victim).destroyForcibly();
            if (second >= 0) {
                Thread.sleep(secondDelayMs);
                job.processes.get(second).destroyForcibly();
            }
            TreeSet<Integer> finished = new TreeSet<>();
            String list = null;
            StringBuilder problems = new StringBuilder();
            for (int r = 0; r < n; r++) {
                Process p = job.processes.get(r);
                boolean killed = r == victim || r == second;
                if (!p.waitFor(90, TimeUnit.SECONDS)) {
                    problems.append("HANG: rank ").append(r).append(" still running after 90 s\n");
                    continue;
                }
                Thread.sleep(50); // its last lines
                Matcher m = DONE.matcher(job.out(r));
                if (m.find()) {
                    finished.add(r);
                    if (list == null) {
                        list = m.group(2);
                    } else if (!list.equals(m.group(2))) {
                        problems.append("DISAGREEMENT: rank ").append(r).append(" ended with members [")
                            .append(m.group(2)).append("], another with [").append(list).append("]\n");
                    }
                    if (!m.group(3).equals("1")) {
                        problems.append("rank ").append(r).append(" agreed ").append(m.group(3)).append(", not 1\n");
                    }
                } else if (!killed) {
                    problems.append(job.out(r).contains("WRONG") ? "WRONG RESULT" : "FAILED").append(": rank ")
                        .append(r).append(" exited ").append(p.exitValue()).append(" without DONE\n");
                }
                if (!killed && p.exitValue() != 0) {
                    problems.append("rank ").append(r).append(" exited ").append(p.exitValue()).append('\n');
                }
            }
            if (System.getenv("JCCL_FI_VERBOSE") != null) {
                System.out.println("trial " + seed + ": started in " + (killMs - startMs) + " ms, all exited "
                    + (System.currentTimeMillis() - killMs) + " ms after the kill at " + killMs + "; victim " + victim
                    + (second >= 0 ? ", then " + second + " after " + secondDelayMs + " ms" : ""));
                boolean all = "2".equals(System.getenv("JCCL_FI_VERBOSE"));
                for (int r = 0; r < n; r++) {
                    for (String line : job.out(r).split("\n")) {
                        if (all || line.startsWith("PHASES") || line.contains("ready after")
                            || line.contains("looks at the records")) {
                            System.out.println("  " + line);
                        }
                    }
                }
            }
            String expected = finished.toString().replaceAll("[\\[\\]]", "");
            if (list != null && !list.equals(expected)) {
                problems.append("the member list [").append(list).append("] is not the ranks that finished [")
                    .append(expected).append("]\n");
            }
            // recovered when the last survivor has a working shrunk communicator (its first RECOVERED line)
            long last = -1;
            for (int r : finished) {
                Matcher m = RECOVERED.matcher(job.out(r));
                if (m.find()) {
                    last = Math.max(last, Long.parseLong(m.group(1)));
                }
            }
            if (last >= 0) {
                recoveryMs.add(last - killMs);
                if (second < 0) {
                    breakdown(job, finished, killMs, breakdowns, causes);
                }
            }
            if (System.getenv("JCCL_FI_VERBOSE") != null) {
                // one line per trial, so that a run stopped early (a time limit) still counts its trials
                System.out.println("TRIAL " + (problems.isEmpty() ? "PASS" : "FAIL") + " " + n + " ranks seed " + seed
                    + (second >= 0 ? " (two kills)" : "") + " recovery " + (last >= 0 ? (last - killMs) + " ms" : "-"));
            }
            if (problems.isEmpty()) {
                return null;
            }
            StringBuilder outputs = new StringBuilder("victim " + victim + " after " + delayMs + " ms"
                + (second >= 0 ? ", then " + second + " after " + secondDelayMs + " ms" : "") + ":\n" + problems);
            for (int r = 0; r < n; r++) {
                outputs.append("--- rank ").append(r).append(":\n").append(tail(job.out(r))).append('\n');
            }
            return outputs.toString();
        }
    }

    /**
     * The phases of a one-kill trial (from the survivors' PHASES lines): the first survivor's failure after the
     * kill (detection), the spread of the others' failures (the revocation's flood), then the timeline of the
     * survivor that recovered last, which adds up to the recovery time.
     */
    private static void breakdown(MultiProcessTest.Job job, TreeSet<Integer> finished, long killMs,
                                  List<double[]> breakdowns, Map<String, Integer> causes) {
        List<double[]> rows = new ArrayList<>();
        String firstCause = null;
        double firstFailed = Double.MAX_VALUE;
        for (int r : finished) {
            Matcher m = PHASES.matcher(job.out(r));
            if (!m.find()) {
                return; // no phases (a recovery that failed and was redone): not in the breakdown
            }
            double[] t = new double[11];
            for (int i = 0; i < 10; i++) {
                t[i] = Double.parseDouble(m.group(2 + i));
            }
            t[10] = Integer.parseInt(m.group(12));
            rows.add(t);
            if (t[0] < firstFailed) {
                firstFailed = t[0];
                firstCause = m.group(14);
            }
        }
        double lastFailed = rows.stream().mapToDouble(t -> t[0]).max().orElse(0);
        double[] last = rows.stream().max(java.util.Comparator.comparingDouble(t -> t[9])).orElseThrow();
        double[] b = new double[PHASE_NAMES.length];
        b[0] = firstFailed - killMs;
        b[1] = lastFailed - firstFailed;
        for (int i = 1; i < 10; i++) {
            b[1 + i] = last[i] - last[i - 1];
        }
        b[2] = last[1] - last[0];
        b[11] = last[9] - killMs;
        breakdowns.add(b);
        causes.merge(causeKind(firstCause), 1, Integer::sum);
    }

    /** The first detection's cause, in a few words (the exception and what the message says happened). */
    static String causeKind(String cause) {
        String kind = cause.substring(0, Math.max(0, cause.indexOf(':')));
        String text = cause.toLowerCase(java.util.Locale.ROOT);
        // the first clause of the message says what the detector saw
        String[][] kinds = {{"is gone", "process gone"}, {"retry_exc_err", "connection lost, QP in ERROR"},
            {"queue pair to it is in error", "connection lost, QP in ERROR"}, {"its queue pair is in error",
            "connection lost, QP in ERROR"}, {"heartbeat", "heartbeat"}, {"no sign of life", "peer timeout"},
            {"revoked by", "revoked"}, {"timed out", "timeout"}};
        for (String[] k : kinds) {
            if (text.contains(k[0])) {
                return kind + " (" + k[1] + ")";
            }
        }
        return kind + " (" + (cause.length() > 80 ? cause.substring(0, 80) + "..." : cause) + ")";
    }

    private static void printBreakdown(String transport, int n, List<double[]> breakdowns,
                                       Map<String, Integer> causes) {
        if (breakdowns.isEmpty()) {
            return;
        }
        StringBuilder sb = new StringBuilder("recovery breakdown over " + transport + ", " + n + " ranks, "
            + breakdowns.size() + " one-kill trials, median / p90 ms:");
        for (int i = 0; i < PHASE_NAMES.length; i++) {
            int col = i;
            double[] v = breakdowns.stream().mapToDouble(b -> b[col]).sorted().toArray();
            sb.append(String.format(java.util.Locale.ROOT, " %s %.0f / %.0f;", PHASE_NAMES[i], v[v.length / 2],
                v[v.length * 9 / 10]));
        }
        sb.append(" first detection: ").append(causes);
        System.out.println(sb);
    }

    private static int hostsEnv() {
        return Integer.parseInt(env("JCCL_FI_NETNS_HOSTS", "0"));
    }

    private static int freePort() throws java.io.IOException {
        try (java.net.ServerSocket s = new java.net.ServerSocket(0)) {
            return s.getLocalPort();
        }
    }

    private static String tail(String text) {
        return text.length() <= 4000 ? text : "..." + text.substring(text.length() - 4000);
    }

    private static String env(String name, String fallback) {
        String v = System.getenv(name);
        return v == null || v.isBlank() ? fallback : v;
    }
}
