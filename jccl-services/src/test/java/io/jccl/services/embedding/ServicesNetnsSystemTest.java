package io.jccl.services.embedding;

import io.jccl.common.testing.NetnsBed;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.List;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The parameter server and the embedding cache between two "hosts" (network namespaces from scripts/netns.sh,
 * prefix {@code jem}) over tcp0, each rank a JVM of its own joined through a TCP store served by rank 0 on host 1
 * ({@link ServicesNetnsPeer}). Skipped, with the reason, where network namespaces cannot be created (not root, no
 * iproute2).
 */
class ServicesNetnsSystemTest {
    private static final String PREFIX = "jem";
    private static NetnsBed bed;

    @BeforeAll
    static void upTestBed() throws Exception {
        bed = NetnsBed.up(PREFIX, 2);
    }

    @AfterAll
    static void downTestBed() throws Exception {
        if (bed != null) {
            bed.close();
        }
    }

    @Test
    void shouldTrainThroughTheParameterServerAndLookUpEmbeddingsBetweenNamespaceHostsOverTcp() throws Exception {
        List<String> logs = bed.runRanks(2, ServicesNetnsPeer.class, 120);
        for (String log : logs) {
            assertTrue(log.contains("DEVICE tcp0") && log.contains("PS OK") && log.contains("EMB OK")
                && log.contains("DONE"), String.join("\n", logs));
        }
    }
}
