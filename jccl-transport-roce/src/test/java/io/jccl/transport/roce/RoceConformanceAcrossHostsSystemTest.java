package io.jccl.transport.roce;

import io.jccl.common.testing.NetnsBed;
import io.jccl.conformance.AcrossHosts;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.util.List;

/**
 * The whole conformance kit for roce0 across two "hosts" (as tcp0's TcpConformanceAcrossHostsSystemTest): a JVM in
 * namespace h1 of the bed ({@code scripts/netns.sh}, prefix {@code jrn}) runs {@link RoceConformanceAcrossHosts}
 * with its contexts bound to h1's address, and its peer JVMs start in namespace h2 bound to h2's, so every packet
 * crosses the bed's veth pairs and bridge. Skipped, with the reason, where namespaces cannot be created.
 */
class RoceConformanceAcrossHostsSystemTest {
    private static final String PREFIX = "jrn";
    private static NetnsBed bed;

    @BeforeAll
    static void up() throws Exception {
        bed = NetnsBed.up(PREFIX, 2);
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
        AcrossHosts.assertKitPasses(bed, RoceConformanceAcrossHosts.class,
            List.of("-Djccl.roce.port=0", "-Djccl.roce.address=" + NetnsBed.address(1)),
            List.of("-Djccl.roce.port=0", "-Djccl.roce.address=" + NetnsBed.address(2)), 100, 280);
    }
}
