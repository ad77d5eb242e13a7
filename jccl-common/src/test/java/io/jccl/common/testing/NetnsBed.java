package io.jccl.common.testing;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

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
        Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
        String output = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (!p.waitFor(60, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            return -1;
        }
        if (p.exitValue() != 0) {
            System.err.println(String.join(" ", command) + ": " + output);
        }
        return p.exitValue();
    }

    /** Takes the hosts down. */
    @Override
    public void close() throws IOException, InterruptedException {
        netns("down");
    }
}
