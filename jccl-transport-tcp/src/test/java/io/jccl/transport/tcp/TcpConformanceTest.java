package io.jccl.transport.tcp;

import io.jccl.conformance.ProviderConformanceSuite;

import java.util.List;

/** Runs the provider conformance kit against the tcp provider (device {@code tcp0}), in-process and across JVMs. */
class TcpConformanceTest extends ProviderConformanceSuite {
    @Override
    protected String deviceName() {
        return "tcp0";
    }

    /** Child JVMs listen on loopback too, like this JVM (see the surefire configuration). */
    @Override
    protected List<String> peerJvmArguments() {
        return List.of("-Djccl.socket.ifname==lo");
    }
}
