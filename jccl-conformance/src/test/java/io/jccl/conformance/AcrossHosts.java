package io.jccl.conformance;

import io.jccl.common.testing.NetnsBed;
import org.junit.platform.launcher.LauncherDiscoveryRequest;
import org.junit.platform.launcher.core.LauncherDiscoveryRequestBuilder;
import org.junit.platform.launcher.core.LauncherFactory;
import org.junit.platform.launcher.listeners.SummaryGeneratingListener;
import org.junit.platform.launcher.listeners.TestExecutionSummary;

import java.io.IOException;
import java.io.PrintWriter;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.platform.engine.discovery.DiscoverySelectors.selectClass;
import static org.junit.platform.engine.discovery.DiscoverySelectors.selectMethod;

/**
 * The whole conformance kit with its peers on another "host" of the network-namespace test bed ({@link NetnsBed}):
 * {@link #assertKitPasses} starts a JVM in namespace h1 that runs a provider's kit class ({@link #main}), and the
 * kit starts each peer JVM in namespace h2 through {@link #peerCommandPrefix()} with {@link #peerJvmArguments()}, so
 * every byte crosses the bed's veth pairs and bridge. One harness for every network provider: a provider's
 * across-hosts kit class only names its device and returns these two lists.
 */
public final class AcrossHosts {
    /** System property: the command that puts a peer JVM on the other host ({@code ip netns exec <h2>}). */
    public static final String PEER_PREFIX_PROPERTY = "jccl.conformance.peer.prefix";
    /** System property: the peers' extra JVM arguments, separated by {@code |}. */
    public static final String PEER_JVM_ARGUMENTS_PROPERTY = "jccl.conformance.peer.jvm";
    private static final Pattern COUNTS = Pattern.compile("conformance across hosts: (\\d+) succeeded, (\\d+) failed");

    private AcrossHosts() {
    }

    /** The peers' command prefix this JVM was started with (empty outside the bed). */
    public static List<String> peerCommandPrefix() {
        String prefix = System.getProperty(PEER_PREFIX_PROPERTY, "").trim();
        return prefix.isEmpty() ? List.of() : Arrays.asList(prefix.split("\\s+"));
    }

    /** The peers' extra JVM arguments this JVM was started with (empty outside the bed). */
    public static List<String> peerJvmArguments() {
        String arguments = System.getProperty(PEER_JVM_ARGUMENTS_PROPERTY, "");
        return arguments.isEmpty() ? List.of() : Arrays.asList(arguments.split("\\|"));
    }

    /**
     * Runs {@code kit} in a JVM on host 1 of {@code bed} (with {@code ownJvmArguments}), its peers on host 2 (with
     * {@code peerJvmArguments}), and asserts that at least {@code minimumTests} of its tests ran and none failed.
     */
    public static void assertKitPasses(NetnsBed bed, Class<? extends ProviderConformanceSuite> kit,
            List<String> ownJvmArguments, List<String> peerJvmArguments, int minimumTests, long timeoutSeconds)
            throws IOException, InterruptedException {
        assertKitPasses(bed, kit.getName(), ownJvmArguments, peerJvmArguments, minimumTests, timeoutSeconds);
    }

    /**
     * As {@link #assertKitPasses(NetnsBed, Class, List, List, int, long)} for {@code selection}: a kit class's name,
     * or one test of it ({@code Class#method(parameter types)}, to chase one failure).
     */
    public static void assertKitPasses(NetnsBed bed, String selection, List<String> ownJvmArguments,
            List<String> peerJvmArguments, int minimumTests, long timeoutSeconds)
            throws IOException, InterruptedException {
        List<String> jvm = new ArrayList<>(ownJvmArguments);
        jvm.add("-D" + PEER_PREFIX_PROPERTY + "=ip netns exec " + bed.prefix() + "-h2");
        jvm.add("-D" + PEER_JVM_ARGUMENTS_PROPERTY + "=" + String.join("|", peerJvmArguments));
        NetnsBed.Result result = NetnsBed.runFor(bed.javaCommand(1, jvm, AcrossHosts.class, selection),
            timeoutSeconds);
        System.out.println(result.output());
        assertEquals(0, result.exitCode(), result.output());
        Matcher counts = COUNTS.matcher(result.output());
        assertTrue(counts.find(), result.output());
        assertEquals(0, Integer.parseInt(counts.group(2)), result.output());
        assertTrue(Integer.parseInt(counts.group(1)) >= minimumTests, "the whole kit ran: " + counts.group(1)
            + " tests");
    }

    /**
     * The JVM on host 1: runs the kit class named by {@code args[0]} (or one of its methods:
     * {@code Class#method(parameter types)}) and prints the JUnit summary; the exit status is the number of failed
     * tests (capped at 100).
     */
    public static void main(String[] args) throws ClassNotFoundException {
        LauncherDiscoveryRequest request = LauncherDiscoveryRequestBuilder.request()
            .selectors(args[0].contains("#") ? selectMethod(args[0]) : selectClass(Class.forName(args[0])))
            .configurationParameter("junit.jupiter.execution.timeout.default", "120 s")
            .build();
        SummaryGeneratingListener listener = new SummaryGeneratingListener();
        LauncherFactory.create().execute(request, listener);
        TestExecutionSummary summary = listener.getSummary();
        PrintWriter out = new PrintWriter(System.out, true);
        summary.printFailuresTo(out, 20);
        summary.printTo(out);
        out.printf("conformance across hosts: %d succeeded, %d failed, %d skipped%n", summary.getTestsSucceededCount(),
            summary.getTotalFailureCount(), summary.getTestsSkippedCount());
        out.flush();
        System.exit((int) Math.min(100, summary.getTotalFailureCount()));
    }
}
