package io.jccl.collectives;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.io.OutputStream;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * A network partition between two namespace hosts of {@code scripts/netns.sh} (prefix {@code jfp}) over tcp0: ranks
 * 0-2 on host 1 (the job's store, two standby stores), rank 3 alone on host 2 (its own standby store). The test cuts
 * host 2 off ({@code netns.sh shape --host 2 --loss 100}) while the ranks all-reduce ({@link PartitionMain}): the
 * majority shrinks to 3 ranks and checks an all-reduce; rank 3, which can reach only its own standby store, fails
 * its shrink with a clear error under {@code JCCL_SHRINK_QUORUM=majority} (without it, it would decide alone on its
 * own store: a split brain, docs/fault-tolerance.md); after the heal, its second try is refused too, and the
 * majority's communicator still all-reduces right. Runs only with JCCL_PARTITION_TEST=1 ({@code
 * scripts/partition-test.sh}: 30-35 s, over the default suite's budget); skipped, with the reason, where network
 * namespaces cannot be created (not root, no iproute2 or nftables).
 */
class PartitionSystemTest {
    private static final String PREFIX = "jfp";
    private static final Pattern SHRUNK = Pattern.compile("SHRUNK rank (\\d) size (\\d+) sum (\\d+) in (\\d+) ms");
    private static Path script;

    @BeforeAll
    static void upTestBed() throws Exception {
        // 30-35 s on a loaded 2-core VM, over the default suite's budget: run by scripts/partition-test.sh
        assumeTrue(System.getenv("JCCL_PARTITION_TEST") != null, "set JCCL_PARTITION_TEST=1 (scripts/partition-test.sh)");
        assumeTrue("root".equals(System.getProperty("user.name")),
            "needs root to create network namespaces (running as " + System.getProperty("user.name") + ")");
        Path candidate = Path.of(System.getProperty("user.dir")).resolve("../scripts/netns.sh").normalize();
        assumeTrue(Files.isExecutable(candidate), "scripts/netns.sh not found at " + candidate);
        assumeTrue(netns(List.of("ip", "netns", "list")) == 0, "'ip netns' is not available (install iproute2)");
        assumeTrue(netns(List.of("nft", "--version")) == 0, "'nft' is not available (install nftables)");
        script = candidate;
        int rc = netns(List.of(script.toString(), "up", "2"));
        assumeTrue(rc == 0, "scripts/netns.sh up 2 failed (rc " + rc + "): cannot create network namespaces here");
    }

    @AfterAll
    static void downTestBed() throws Exception {
        if (script != null) {
            netns(List.of(script.toString(), "down"));
        }
    }

    private static int netns(List<String> command) throws IOException, InterruptedException {
        List<String> full = new ArrayList<>(List.of("env", "JCCL_NETNS_PREFIX=" + PREFIX));
        full.addAll(command);
        Process p = new ProcessBuilder(full).redirectErrorStream(true).start();
        String output = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (!p.waitFor(60, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            return -1;
        }
        if (p.exitValue() != 0) {
            System.err.println(String.join(" ", full) + ": " + output);
        }
        return p.exitValue();
    }

    @Test
    void shouldLetTheMajorityGoOnAndTheCutOffRankFailClearlyAndStayExcludedAfterTheHeal() throws Exception {
        // JCCL_PARTITION_QUORUM=none shows the split brain without the majority rule (not in the suite)
        String quorum = System.getenv().getOrDefault("JCCL_PARTITION_QUORUM", "majority");
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        Map<String, String> env = Map.of("JCCL_TRANSPORT", "tcp0", "JCCL_PEER_TIMEOUT", "2s",
            "JCCL_SHRINK_QUORUM", quorum, "JCCL_SOCKET_IFNAME", "=eth0", "JCCL_STORE_ADDR", "10.77.0.1:" + port);
        try (MultiProcessTest.Job job = new MultiProcessTest.Job(4, "partition", env, false,
            r -> List.of("ip", "netns", "exec", PREFIX + "-h" + (r < 3 ? 1 : 2), "env",
                "JCCL_HOST_ID=" + PREFIX + "-h" + (r < 3 ? 1 : 2)))) {
            for (int r = 0; r < 4; r++) {
                assertTrue(job.waitForLine(r, "RUNNING", 90_000), "rank " + r + " did not start:\n" + job.out(r));
            }
            long cutMs = System.currentTimeMillis();
            assertEquals(0, netns(List.of(script.toString(), "shape", "--host", "2", "--loss", "100")));
            for (int r = 0; r < 3; r++) {
                assertTrue(job.waitForLine(r, "SHRUNK", 60_000), "rank " + r + " did not shrink:\n" + job.out(r));
                Matcher m = SHRUNK.matcher(job.out(r));
                assertTrue(m.find(), job.out(r));
                assertEquals("3", m.group(2), "majority size on rank " + r);
                assertEquals("6", m.group(3), "majority all-reduce on rank " + r + " (old ranks 0, 1, 2)");
            }
            long majorityMs = System.currentTimeMillis() - cutMs;
            boolean splitBrain = quorum.equals("none");
            String minorityLine = splitBrain ? "SHRUNK" : "SHRINK FAILED";
            assertTrue(job.waitForLine(3, minorityLine, 90_000), "rank 3: no " + minorityLine + ":\n" + job.out(3));
            long minorityMs = System.currentTimeMillis() - cutMs;
            if (!splitBrain) {
                assertTrue(job.out(3).contains("not a majority"), job.out(3));
            }
            assertEquals(0, netns(List.of(script.toString(), "shape", "--host", "2", "--loss", "0")));
            long healMs = System.currentTimeMillis();
            say(job, 3);
            if (!splitBrain) {
                assertTrue(job.waitForLine(3, "EXCLUDED", 60_000), "rank 3 after the heal:\n" + job.out(3));
            }
            long excludedMs = System.currentTimeMillis() - healMs;
            for (int r = 0; r < 3; r++) {
                say(job, r);
            }
            for (int r = 0; r < 4; r++) {
                Process p = job.processes.get(r);
                assertTrue(p.waitFor(60, TimeUnit.SECONDS), "rank " + r + " hangs:\n" + job.out(r));
                if (r < 3) {
                    assertTrue(job.out(r).contains("CHECKED rank " + r + " size 3 sum 6"), job.out(r));
                }
                assertEquals(0, p.exitValue(), "rank " + r + ":\n" + job.out(r));
            }
            System.out.println("partition (JCCL_SHRINK_QUORUM=" + quorum + "): cut -> majority shrunk and checked "
                + majorityMs + " ms; cut -> rank 3 " + minorityLine + " " + minorityMs + " ms; heal -> rank 3 "
                + (splitBrain ? "(alone in its own communicator)" : "excluded " + excludedMs + " ms") + "\n  rank 3: "
                + lastLines(job.out(3)));
        }
    }

    private static void say(MultiProcessTest.Job job, int rank) throws IOException {
        OutputStream in = job.processes.get(rank).getOutputStream();
        in.write('\n');
        in.flush();
    }

    private static String lastLines(String out) {
        return out.lines().filter(l -> l.startsWith("SHR") || l.startsWith("EXCL") || l.startsWith("REJOINED")
            || l.startsWith("CHECKED")).reduce((a, b) -> a + "\n  rank 3: " + b).orElse("");
    }
}
