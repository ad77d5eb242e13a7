package io.jccl.transport.tcp;

import io.jccl.conformance.ProviderConformanceSuite;

/**
 * The conformance kit with the peer JVMs on another "host" of the network-namespace test bed. Not run by surefire
 * directly (its name does not end in Test): {@link TcpConformanceAcrossHostsSystemTest} starts a JVM inside one
 * namespace that runs this class through {@code AcrossHosts}, which says how each peer JVM is put in the other
 * namespace.
 */
class TcpConformanceAcrossHosts extends ProviderConformanceSuite {
    @Override
    protected String deviceName() {
        return "tcp0";
    }
}
