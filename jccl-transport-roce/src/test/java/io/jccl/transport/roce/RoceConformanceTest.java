package io.jccl.transport.roce;

import io.jccl.conformance.ProviderConformanceSuite;

import java.util.List;

/**
 * Runs the provider conformance kit against the roce provider (device {@code roce0}), in-process and across JVMs.
 * Every context takes a free UDP port ({@code jccl.roce.port=0}, set for this JVM in the surefire configuration and
 * passed to the peer JVMs), so contexts in one JVM and concurrent test runs never collide on 4791.
 */
class RoceConformanceTest extends ProviderConformanceSuite {
    @Override
    protected String deviceName() {
        return "roce0";
    }

    @Override
    protected List<String> peerJvmArguments() {
        return List.of("-Djccl.roce.port=0");
    }
}
