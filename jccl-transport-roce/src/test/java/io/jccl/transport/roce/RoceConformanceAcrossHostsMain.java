package io.jccl.transport.roce;

import org.junit.platform.launcher.Launcher;
import org.junit.platform.launcher.LauncherDiscoveryRequest;
import org.junit.platform.launcher.core.LauncherDiscoveryRequestBuilder;
import org.junit.platform.launcher.core.LauncherFactory;
import org.junit.platform.launcher.listeners.SummaryGeneratingListener;
import org.junit.platform.launcher.listeners.TestExecutionSummary;

import java.io.PrintWriter;

import static org.junit.platform.engine.discovery.DiscoverySelectors.selectClass;

/**
 * Runs {@link RoceConformanceAcrossHosts} in this JVM (started inside a network namespace) and prints the JUnit
 * summary; the exit status is the number of failed tests (capped at 100).
 */
public final class RoceConformanceAcrossHostsMain {
    private RoceConformanceAcrossHostsMain() {
    }

    /** Entry point. */
    public static void main(String[] args) {
        LauncherDiscoveryRequest request = LauncherDiscoveryRequestBuilder.request()
            .selectors(selectClass(RoceConformanceAcrossHosts.class))
            .configurationParameter("junit.jupiter.execution.timeout.default", "120 s")
            .build();
        Launcher launcher = LauncherFactory.create();
        SummaryGeneratingListener listener = new SummaryGeneratingListener();
        launcher.execute(request, listener);
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
