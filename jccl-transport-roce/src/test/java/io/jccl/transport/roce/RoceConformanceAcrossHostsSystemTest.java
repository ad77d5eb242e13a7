package io.jccl.transport.roce;

import io.jccl.common.testing.NetnsBed;
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

/**
 * The whole conformance kit for roce0 across two "hosts" (as tcp0's TcpConformanceAcrossHostsSystemTest): a JVM in
 * namespace h1 of the bed ({@code scripts/netns.sh}, prefix {@code jrn}) runs {@link RoceConformanceAcrossHosts}
 * with its contexts bound to h1's address, and its peer JVMs start in namespace h2 bound to h2's, so every packet
 * crosses the bed's veth pairs and bridge. Skipped, with the reason, where namespaces cannot be created.
 */
class RoceConformanceAcrossHostsSystemTest {
    private static final String PREFIX = "jrn";
    private static NetnsBed bed;

    @BeforeAll
    static void up() throws Exception {
        bed = NetnsBed.up(PREFIX, 2);
    }

    @AfterAll
    static void down() throws Exception {
        if (bed != null) {
            bed.close();
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
        command.add("-Djccl.roce.port=0");
        command.add("-Djccl.roce.address=" + NetnsBed.address(1));
        command.add("-D" + RoceConformanceAcrossHosts.PEER_ADDRESS_PROPERTY + "=" + NetnsBed.address(2));
        command.add("-D" + RoceConformanceAcrossHosts.PEER_PREFIX_PROPERTY + "=ip netns exec " + PREFIX + "-h2");
        command.add("-cp");
        command.add(System.getProperty("java.class.path"));
        command.add(RoceConformanceAcrossHostsMain.class.getName());
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
        Path log = Files.createTempFile("jccl-jrn-", ".log");
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
