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
    void oneHostJobOpensNoNetworkDevice() {
        Ranks.run(3, CommunicatorOptions.defaults().withTimeout(Duration.ofSeconds(30)), c -> {
            assertEquals(java.util.Set.of("shm0"), c.devicesTried);
            assertTrue(c.transportOf((c.rank() + 1) % 3).startsWith("shm0"), c.transportOf((c.rank() + 1) % 3));
        });
    }

    @Test
    void networkDevicePreferredBeforeShmIsOpenedAndChosen() {
        // tcp0 first in the order: every pair's choice reaches it before shm0, so it opens in the second exchange
        Ranks.run(2, CommunicatorOptions.defaults().withTransports("tcp0,shm0").withTimeout(Duration.ofSeconds(30)),
            c -> {
                assertTrue(c.transportOf(1 - c.rank()).startsWith("tcp0"), c.transportOf(1 - c.rank()));
                int[] v = {c.rank() + 1};
                c.allReduce(v, ReduceOp.SUM);
                assertEquals(3, v[0]);
            });
    }

    @Test
    void onlyRanksWithRemotePeersOpenNetworkDevices() {
        // ranks 0 and 1 share hostA, rank 2 is alone on hostB: every rank talks to rank 2 over tcp0, but the pair
        // 0-1 settles on shm0 in the first exchange
        Ranks.runWith(3, (store, rank, size) -> Communicator.create(store, rank, size,
            CommunicatorOptions.defaults().withTimeout(Duration.ofSeconds(30)).withHostId(rank < 2 ? "hostA" : "hostB")),
            c -> {
                if (c.rank() < 2) {
                    assertTrue(c.transportOf(1 - c.rank()).startsWith("shm0"), c.transportOf(1 - c.rank()));
                    assertEquals(java.util.Set.of("shm0", "tcp0"), c.devicesTried);
                    assertTrue(c.transportOf(2).startsWith("tcp0"), c.transportOf(2));
                } else {
                    assertTrue(c.transportOf(0).startsWith("tcp0"), c.transportOf(0));
                    assertTrue(c.transportOf(1).startsWith("tcp0"), c.transportOf(1));
                }
                CollectivesTest.everything(c, "mixed3", false);
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
