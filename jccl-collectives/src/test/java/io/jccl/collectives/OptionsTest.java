package io.jccl.collectives;

import org.junit.jupiter.api.Test;

import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class OptionsTest {
    @Test
    void environmentAndPropertiesAreRead() {
        System.setProperty("jccl.algo", "allreduce:tree;broadcast:^ring");
        System.setProperty("jccl.timeout", "90s");
        System.setProperty("jccl.job.id", "job-7");
        System.setProperty("jccl.shm.disable", "1");
        try {
            CommunicatorOptions o = CommunicatorOptions.fromEnvironment();
            assertEquals("allreduce:tree;broadcast:^ring", o.algorithms());
            assertEquals(TimeUnit.SECONDS.toNanos(90), o.timeoutNs());
            assertEquals("job-7", o.jobId());
            assertTrue(o.shmDisabled());
        } finally {
            System.clearProperty("jccl.algo");
            System.clearProperty("jccl.timeout");
            System.clearProperty("jccl.job.id");
            System.clearProperty("jccl.shm.disable");
        }
    }

    @Test
    void durations() {
        assertEquals(TimeUnit.MILLISECONDS.toNanos(500), CommunicatorOptions.parseDurationNs("500ms", "X"));
        assertEquals(TimeUnit.MINUTES.toNanos(10), CommunicatorOptions.parseDurationNs("10m", "X"));
        assertEquals(TimeUnit.SECONDS.toNanos(30), CommunicatorOptions.parseDurationNs("30", "X"));
        assertEquals(TimeUnit.HOURS.toNanos(1), CommunicatorOptions.parseDurationNs("1h", "X"));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
            () -> CommunicatorOptions.parseDurationNs("soon", "JCCL_TIMEOUT"));
        assertTrue(e.getMessage().contains("JCCL_TIMEOUT=soon"), e.getMessage());
    }

    @Test
    void badSettingsAreRejectedEarly() {
        assertThrows(IllegalArgumentException.class, () -> CommunicatorOptions.defaults().withChunking(100, 4));
        assertThrows(IllegalArgumentException.class, () -> CommunicatorOptions.defaults().withChunking(4096, 0));
        assertThrows(IllegalArgumentException.class, () -> CommunicatorOptions.defaults().withAlgorithms("allreduce:x"));
    }

    @Test
    void forcedAlgorithmIsUsed() {
        Ranks.run(4, Ranks.loop().withAlgorithms("allreduce:tree"), c -> {
            assertEquals(io.jccl.collectives.tuning.Algorithm.TREE, c.algorithmFor(Collective.ALL_REDUCE, 64 << 20));
            int[] v = {1};
            c.allReduce(v, ReduceOp.SUM);
            assertEquals(4, v[0]);
            assertTrue(c.flightRecorder().dump().getLast().contains("algo=tree"), c.flightRecorder().dump().getLast());
        });
    }
}
