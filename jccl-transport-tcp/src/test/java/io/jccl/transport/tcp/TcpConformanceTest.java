package io.jccl.transport.tcp;

import io.jccl.conformance.ProviderConformanceSuite;

/** Runs the provider conformance kit against the tcp provider (device {@code tcp0}), in-process and across JVMs. */
class TcpConformanceTest extends ProviderConformanceSuite {
    @Override
    protected String deviceName() {
        return "tcp0";
    }
}
