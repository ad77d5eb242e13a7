package io.jccl.collectives;

import io.jccl.common.ProcessIds;
import io.jccl.verbs.Counter;
import io.jccl.verbs.spi.CounterFile;
import org.junit.jupiter.api.Test;

import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Issue 16, bug 9: on the one-host default path (the direct path over shm0) the device counters that
 * {@code jccl devinfo -v --pid} reads stayed at 0, because the direct path posts no work requests. It counts its
 * operations into its device now (bus bytes each way, one packet each way per operation), and per-collective
 * statistics count operations, bytes and errors.
 */
class DirectPathCountersTest {
    private static final int ROUNDS = 10;
    private static final long LARGE = 64 * 1024;

    @Test
    void shouldCountDirectPathAllReducesIntoTheShmDeviceCounters() {
        CommunicatorOptions options = CommunicatorOptions.defaults().withTransports("shm0")
            .withTimeout(Duration.ofSeconds(30)).withAlgorithms("allreduce:direct;barrier:direct")
            .withName("counters");
        // 2 ranks: bus bytes of an all-reduce are 2(n-1)/n = 1 × its size
        long expected = ROUNDS * (8 + LARGE);
        Ranks.run(2, options, c -> {
            assertTrue(c.directAvailable(), "two ranks of one JVM over shm0 use the direct path");
            Map<Counter, Long> before = c.deviceCounters().get("shm0");
            MemorySegment small = c.allocate(8);
            MemorySegment large = c.allocate(LARGE);
            for (int i = 0; i < ROUNDS; i++) {
                c.allReduce(small, 2, DataType.FLOAT32, ReduceOp.SUM);
                c.allReduce(large, LARGE / 4, DataType.FLOAT32, ReduceOp.SUM);
            }
            Map<Counter, Long> after = c.deviceCounters().get("shm0");
            assertEquals(expected, after.get(Counter.PORT_XMIT_DATA) - before.get(Counter.PORT_XMIT_DATA));
            assertEquals(expected, after.get(Counter.PORT_RCV_DATA) - before.get(Counter.PORT_RCV_DATA));
            assertEquals(2L * ROUNDS, after.get(Counter.PORT_XMIT_PACKETS) - before.get(Counter.PORT_XMIT_PACKETS));
            assertEquals(2L * ROUNDS, after.get(Counter.PORT_RCV_PACKETS) - before.get(Counter.PORT_RCV_PACKETS));

            CollectiveStatistics s = c.statistics();
            assertEquals(2L * ROUNDS, s.operations(Collective.ALL_REDUCE));
            assertEquals(expected, s.bytes(Collective.ALL_REDUCE));
            assertEquals(0, s.errors(Collective.ALL_REDUCE));
            assertEquals(2L * ROUNDS, s.directOperations());

            // what `jccl devinfo -v --pid` reads: this JVM's counter files (both ranks' shm0 contexts)
            c.barrier(); // the other rank is done too
            long published = 0;
            for (CounterFile.Published p : CounterFile.read(ProcessIds.self())) {
                if (p.device().equals("shm0")) {
                    published += p.counters().get(Counter.PORT_XMIT_DATA.linuxName());
                }
            }
            assertTrue(published >= 2 * expected, "counter files show " + published + " bytes, want at least "
                + 2 * expected);
            c.barrier(); // neither rank closes (deleting its file) before both have read
        });
    }

    @Test
    void shouldCountBusBytesAsNcclTests() {
        assertEquals(8, CollectiveStatistics.busBytes(Collective.ALL_REDUCE, 8, 2));
        assertEquals(12, CollectiveStatistics.busBytes(Collective.ALL_REDUCE, 8, 4));
        assertEquals(6, CollectiveStatistics.busBytes(Collective.ALL_GATHER, 8, 4));
        assertEquals(8, CollectiveStatistics.busBytes(Collective.BROADCAST, 8, 4));
        assertEquals(0, CollectiveStatistics.busBytes(Collective.BARRIER, 0, 4));
        long huge = Long.MAX_VALUE / 2;
        assertEquals(huge / 4 * 6 + huge % 4 * 6 / 4, CollectiveStatistics.busBytes(Collective.ALL_REDUCE, huge, 4),
            "no overflow for sizes near the limit");
    }

    @Test
    void shouldCountErrorsPerCollective() throws Exception {
        java.util.List<CollectiveStatistics> stats = new java.util.concurrent.CopyOnWriteArrayList<>();
        FailureTest.outcomes(2, Ranks.loop().withAlgorithms(CollectivesTest.DIRECT), c -> {
            stats.add(c.statistics());
            FailureTest.allReduceOnce(c, c.rank() == 0 ? 10 : 11);
        });
        for (CollectiveStatistics s : stats) {
            assertEquals(1, s.errors(Collective.ALL_REDUCE));
            assertEquals(0, s.operations(Collective.ALL_REDUCE));
        }
    }
}
