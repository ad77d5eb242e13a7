package io.jccl.collectives;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.time.Duration;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The engine over the real providers (shm0, tcp0), ranks as threads of this JVM with their own contexts. */
class ProvidersTest {
    static CommunicatorOptions on(String transport) {
        return CommunicatorOptions.defaults().withTransports(transport).withTimeout(Duration.ofSeconds(30));
    }

    @ParameterizedTest(name = "{1} ranks over {0}, {2}")
    @CsvSource({"shm0,2,auto", "shm0,3,ring", "shm0,4,direct", "shm0,3,rhd", "tcp0,2,auto", "tcp0,3,ring",
        "tcp0,3,tree", "tcp0,4,rhd", "tcp0,3,rd"})
    void everyCollective(String transport, int n, String profile) {
        String spec = switch (profile) {
            case "ring" -> CollectivesTest.RING;
            case "tree" -> CollectivesTest.TREE;
            case "rhd" -> CollectivesTest.RHD;
            case "rd" -> CollectivesTest.RD;
            case "direct" -> CollectivesTest.DIRECT;
            default -> "";
        };
        Ranks.run(n, on(transport).withAlgorithms(spec).withChunking(8192, 4).withDirectBytes(16384),
            c -> CollectivesTest.everything(c, transport + "/" + profile, false));
    }

    @Test
    void sameHostPeersUseShmOthersTcp() {
        Ranks.runWith(4, (store, rank, size) -> Communicator.create(store, rank, size,
            CommunicatorOptions.defaults().withTimeout(Duration.ofSeconds(30)).withHostId(rank < 2 ? "hostA" : "hostB")),
            c -> {
                int buddy = c.rank() ^ 1;
                int other = (c.rank() + 2) % 4;
                assertTrue(c.transportOf(buddy).startsWith("shm0"), c.transportOf(buddy));
                assertTrue(c.transportOf(other).startsWith("tcp0") && c.transportOf(other).contains("different host"),
                    c.transportOf(other));
                assertEquals(false, c.directAvailable());
                // shm inside a host, tcp between: the hierarchical all-reduce saves inter-host latency
                assertEquals(io.jccl.collectives.tuning.Algorithm.HIER,
                    c.algorithmFor(Collective.ALL_REDUCE, 1024), c.tuningTable());
                CollectivesTest.everything(c, "mixed", false);
            });
    }

    @Test
    void shmDisabledFallsBackToTcp() {
        Ranks.run(2, CommunicatorOptions.defaults().withShmDisabled(true), c -> {
            assertTrue(c.transportOf(1 - c.rank()).startsWith("tcp0"), c.transportOf(1 - c.rank()));
            int[] v = {c.rank() + 1};
            c.allReduce(v, ReduceOp.SUM);
            assertEquals(3, v[0]);
        });
    }
}
