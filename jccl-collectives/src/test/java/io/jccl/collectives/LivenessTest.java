package io.jccl.collectives;

import org.junit.jupiter.api.Test;

import java.net.InetAddress;
import java.net.ServerSocket;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * A rank's liveness port tells a live process from a killed one without its links (issue 17: a rank on another host
 * killed after the revocation is left out of the agreement in a round trip, not after JCCL_PEER_TIMEOUT).
 */
class LivenessTest {
    private static final long SECOND_NS = TimeUnit.SECONDS.toNanos(1);

    @Test
    void aListeningProcessIsAliveAndAPortNobodyListensOnIsDead() throws Exception {
        String mine = Liveness.listen(InetAddress.getLoopbackAddress());
        assertEquals(Liveness.Verdict.ALIVE, Liveness.probe(mine, 10 * SECOND_NS));
        assertEquals(mine, Liveness.listen(InetAddress.getLoopbackAddress()), "one port per process and address");
        int closed;
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            closed = s.getLocalPort(); // what a killed process leaves: a port its kernel refuses
        }
        assertEquals(Liveness.Verdict.DEAD, Liveness.probe("127.0.0.1 " + closed, 10 * SECOND_NS));
    }
}
