package io.jccl.transport.roce;

import io.jccl.conformance.ProviderConformanceSuite;

/**
 * The conformance kit for roce0 with the peer JVMs on another "host" of the network-namespace test bed. Not run by
 * surefire directly (its name does not end in Test): {@link RoceConformanceAcrossHostsSystemTest} starts a JVM
 * inside one namespace that runs this class through {@code AcrossHosts}, which says how each peer JVM is put in the
 * other namespace and which address its contexts bind there (each context takes a free UDP port).
 */
class RoceConformanceAcrossHosts extends ProviderConformanceSuite {
    @Override
    protected String deviceName() {
        return "roce0";
    }
}
