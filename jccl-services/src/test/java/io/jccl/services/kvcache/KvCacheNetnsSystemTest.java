package io.jccl.services.kvcache;

import io.jccl.common.testing.NetnsBed;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.List;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The transfer engine and the KV-cache transfer between two "hosts" (network namespaces from scripts/netns.sh,
 * prefix {@code jkv}) over tcp0, each rank a JVM of its own joined through a TCP store served by rank 0 on host 1
 * ({@link KvNetnsPeer}). Skipped, with the reason, where network namespaces cannot be created (not root, no
 * iproute2).
 */
class KvCacheNetnsSystemTest {
    private static final String PREFIX = "jkv";
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
    void shouldTransferAndHandOverKvBlocksBetweenNamespaceHostsOverTcp() throws Exception {
        List<String> logs = bed.runRanks(2, KvNetnsPeer.class, 120);
        String both = String.join("\n", logs);
        for (String log : logs) {
            assertTrue(log.contains("DEVICE tcp0") && log.contains("ENGINE OK") && log.contains("DONE"), both);
        }
        assertTrue(logs.get(0).contains("KV SENT 6") && logs.get(1).contains("KV OK 6"), both);
    }
}
