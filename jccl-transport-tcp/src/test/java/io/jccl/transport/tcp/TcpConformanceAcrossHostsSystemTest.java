package io.jccl.transport.tcp;

import io.jccl.common.testing.NetnsBed;
import io.jccl.conformance.AcrossHosts;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.util.List;

/**
 * The whole conformance kit across two "hosts": a JVM in namespace h1 runs {@link TcpConformanceAcrossHosts}, whose
 * peer JVMs start in namespace h2 (scripts/netns.sh, joined by a bridge; each host reaches the other over its own
 * eth0 address, which both sides use). Skipped, with the reason, where namespaces cannot be created (not root, no
 * iproute2).
 */
class TcpConformanceAcrossHostsSystemTest {
    private static NetnsBed bed;

    @BeforeAll
    static void up() throws Exception {
        bed = NetnsBed.up("jcnf", 2);
    }

    @AfterAll
    static void down() throws Exception {
        if (bed != null) {
            bed.close();
        }
    }

    @Test
    @Timeout(300)
    void shouldPassTheConformanceKitWithThePeerOnAnotherHost() throws Exception {
        List<String> ownInterface = List.of("-Djccl.socket.ifname==eth0");
        AcrossHosts.assertKitPasses(bed, TcpConformanceAcrossHosts.class, ownInterface, ownInterface, 100, 280);
    }
}
