package io.jccl.transport.tcp;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The whole conformance kit across two "hosts": a JVM in namespace h1 runs {@link TcpConformanceAcrossHosts}, whose
 * peer JVMs start in namespace h2 (scripts/netns.sh, joined by a bridge; each host reaches the other over its own
 * eth0 address). Skipped, with the reason, where namespaces cannot be created (not root, no iproute2).
 */
class TcpConformanceAcrossHostsSystemTest {
    private static final String PREFIX = "jcnf";
    private static Path script;

    @BeforeAll
    static void upTestBed() throws Exception {
        assumeTrue("root".equals(System.getProperty("user.name")),
            "needs root to create network namespaces (running as " + System.getProperty("user.name") + ")");
        Path candidate = Path.of(System.getProperty("user.dir")).resolve("../scripts/netns.sh").normalize();
        assumeTrue(Files.isExecutable(candidate), "scripts/netns.sh not found at " + candidate);
        assumeTrue(run(List.of("ip", "netns", "list"), 30).exitCode == 0,
            "'ip netns' is not available (install iproute2)");
        script = candidate;
        Result up = run(List.of("env", "JCCL_NETNS_PREFIX=" + PREFIX, script.toString(), "up", "2"), 60);
        assumeTrue(up.exitCode == 0, "scripts/netns.sh up 2 failed: cannot create network namespaces here: "
            + up.output);
    }

    @AfterAll
    static void downTestBed() throws Exception {
        if (script != null) {
            run(List.of("env", "JCCL_NETNS_PREFIX=" + PREFIX, script.toString(), "down"), 60);
        }
    }

    @Test
    @Timeout(300)
    void shouldPassTheConformanceKitWithThePeerOnAnotherHost() throws Exception {
        List<String> command = new ArrayList<>(List.of("ip", "netns", "exec", PREFIX + "-h1",
            Path.of(System.getProperty("java.home"), "bin", "java").toString()));
        for (String argument : ManagementFactory.getRuntimeMXBean().getInputArguments()) {
            if (argument.startsWith("--") || argument.startsWith("-XX:") || argument.startsWith("-Xss")) {
                command.add(argument);
            }
        }
        command.add("-Djccl.socket.ifname==eth0");
        command.add("-D" + TcpConformanceAcrossHosts.PEER_PREFIX_PROPERTY + "=ip netns exec " + PREFIX + "-h2");
        command.add("-cp");
        command.add(System.getProperty("java.class.path"));
        command.add(ConformanceAcrossHostsMain.class.getName());
        Result result = run(command, 280);
        System.out.println(result.output);
        assertEquals(0, result.exitCode, result.output);
        Matcher counts = Pattern.compile("conformance across hosts: (\\d+) succeeded, (\\d+) failed")
            .matcher(result.output);
        assertTrue(counts.find(), result.output);
        assertEquals(0, Integer.parseInt(counts.group(2)), result.output);
        assertTrue(Integer.parseInt(counts.group(1)) >= 100, "the whole kit ran: " + counts.group(1) + " tests");
    }

    private record Result(int exitCode, String output) {
    }

    private static Result run(List<String> command, long timeoutSeconds) throws IOException, InterruptedException {
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
}
