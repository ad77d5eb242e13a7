package io.jccl.collectives;

import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Collectives over roce0 (the RoCEv2 provider, on the test class path only), ranks as JVMs: the setting that selects
 * it, results checked, and the {@code JCCL_DEBUG=INFO} lines that say why it was chosen or why not.
 */
class RoceCollectivesProcessTest {
    @Test
    void shouldRunCollectivesOverRoceWhenJcclTransportNamesIt() throws Exception {
        // JCCL_ROCE_PORT=0: every rank's context takes a free UDP port (peers learn it from the endpoint records)
        try (MultiProcessTest.Job job = new MultiProcessTest.Job(3, "small", Map.of("JCCL_TRANSPORT", "roce0",
            "JCCL_ROCE_PORT", "0", "JCCL_DEBUG", "INFO", "JCCL_DEBUG_SUBSYS", "INIT"), false)) {
            for (int r = 0; r < 3; r++) {
                assertTrue(job.processes.get(r).waitFor(60, TimeUnit.SECONDS), "rank " + r + " hung:\n" + job.out(r));
                assertEquals(0, job.processes.get(r).exitValue(), job.out(r));
                assertTrue(job.out(r).contains("OK rank " + r), job.out(r));
                for (int j = 0; j < 3; j++) {
                    if (j != r) {
                        assertTrue(job.out(r).contains("rank " + r + " -> rank " + j + " via roce0: same host, roce0 "
                            + "requested"), job.out(r));
                    }
                }
                assertFalse(job.out(r).contains("roce0 not considered"), job.out(r));
            }
        }
    }

    @Test
    void shouldSayWhyRoceWasNotChosen() throws Exception {
        // Not named: the default order (shm0, tcp0) serves the job, and INFO says roce0 exists and how to select it.
        try (MultiProcessTest.Job job = new MultiProcessTest.Job(2, "small", Map.of("JCCL_DEBUG", "INFO",
            "JCCL_DEBUG_SUBSYS", "INIT", "JCCL_WARMUP", "0"), false)) {
            String out = finish(job, 2);
            assertTrue(out.contains("roce0 not considered: not a default device (default order shm0,tcp0); "
                + "JCCL_TRANSPORT=roce0 selects it"), out);
            assertTrue(out.contains("via shm0"), out);
        }
        // Named first, but the ranks are on two hosts (host identities) and roce0 listens on loopback (the default
        // JCCL_ROCE_ADDRESS): roce0 refuses to open for remote peers, and INFO and the fallback say so.
        try (MultiProcessTest.Job job = new MultiProcessTest.Job(2, "small", Map.of("JCCL_TRANSPORT", "roce0,tcp0",
            "JCCL_ROCE_PORT", "0", "JCCL_DEBUG", "INFO", "JCCL_DEBUG_SUBSYS", "INIT", "JCCL_WARMUP", "0"), false,
            r -> List.of("env", "JCCL_HOST_ID=host" + r))) {
            String out = finish(job, 2);
            assertTrue(out.contains("rank 0 -> rank 1 via tcp0: roce0 unavailable here (roce0 is bound to 127.0.0.1 "
                + "(JCCL_ROCE_ADDRESS), which peers on other hosts cannot reach"), out);
            assertTrue(out.contains("rank 1 -> rank 0 via tcp0: roce0 unavailable here"), out);
        }
    }

    /** Waits for every rank to pass; returns all their output. */
    private static String finish(MultiProcessTest.Job job, int n) throws InterruptedException {
        StringBuilder all = new StringBuilder();
        for (int r = 0; r < n; r++) {
            assertTrue(job.processes.get(r).waitFor(60, TimeUnit.SECONDS), "rank " + r + " hung:\n" + job.out(r));
            assertEquals(0, job.processes.get(r).exitValue(), job.out(r));
            assertTrue(job.out(r).contains("OK rank " + r), job.out(r));
            all.append(job.out(r)).append('\n');
        }
        return all.toString();
    }
}
