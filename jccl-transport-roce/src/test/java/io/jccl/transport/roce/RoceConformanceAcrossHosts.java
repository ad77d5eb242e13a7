package io.jccl.transport.roce;

import io.jccl.conformance.ProviderConformanceSuite;

import java.util.Arrays;
import java.util.List;

/**
 * The conformance kit for roce0 with the peer JVMs on another "host" of the network-namespace test bed. Not run by
 * surefire directly (its name does not end in Test): {@link RoceConformanceAcrossHostsSystemTest} starts a JVM
 * inside one namespace that runs this class, with {@code jccl.conformance.peer.prefix} naming the command
 * ({@code ip netns exec <other>}) that puts each peer JVM in the other namespace, and
 * {@code jccl.conformance.peer.roce.address} the address the peers' contexts bind there (each context takes a free
 * UDP port).
 */
class RoceConformanceAcrossHosts extends ProviderConformanceSuite {
    /** System property with the peer command prefix, space-separated. */
    static final String PEER_PREFIX_PROPERTY = "jccl.conformance.peer.prefix";
    /** System property with the IPv4 address of the peers' host ({@code JCCL_ROCE_ADDRESS} of the peer JVMs). */
    static final String PEER_ADDRESS_PROPERTY = "jccl.conformance.peer.roce.address";

    @Override
    protected String deviceName() {
        return "roce0";
    }

    /** Peers bind their namespace host's address (this JVM binds its own through jccl.roce.address). */
    @Override
    protected List<String> peerJvmArguments() {
        return List.of("-Djccl.roce.port=0", "-Djccl.roce.address=" + System.getProperty(PEER_ADDRESS_PROPERTY));
    }

    @Override
    protected List<String> peerCommandPrefix() {
        String prefix = System.getProperty(PEER_PREFIX_PROPERTY, "").trim();
        return prefix.isEmpty() ? List.of() : Arrays.asList(prefix.split("\\s+"));
    }
}
