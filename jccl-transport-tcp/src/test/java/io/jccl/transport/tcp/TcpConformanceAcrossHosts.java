package io.jccl.transport.tcp;

import io.jccl.conformance.ProviderConformanceSuite;

import java.util.Arrays;
import java.util.List;

/**
 * The conformance kit with the peer JVMs on another "host" of the network-namespace test bed. Not run by surefire
 * directly (its name does not end in Test): {@link TcpConformanceAcrossHostsSystemTest} starts a JVM inside one
 * namespace that runs this class, with {@code jccl.conformance.peer.prefix} naming the command
 * ({@code ip netns exec <other>}) that puts each peer JVM in the other namespace.
 */
class TcpConformanceAcrossHosts extends ProviderConformanceSuite {
    /** System property with the peer command prefix, space-separated. */
    static final String PEER_PREFIX_PROPERTY = "jccl.conformance.peer.prefix";

    @Override
    protected String deviceName() {
        return "tcp0";
    }

    /** Peers use the namespace's own interface, as this JVM does. */
    @Override
    protected List<String> peerJvmArguments() {
        return List.of("-Djccl.socket.ifname==eth0");
    }

    @Override
    protected List<String> peerCommandPrefix() {
        String prefix = System.getProperty(PEER_PREFIX_PROPERTY, "").trim();
        return prefix.isEmpty() ? List.of() : Arrays.asList(prefix.split("\\s+"));
    }
}
