package io.jccl.examples;

import io.jccl.verbs.Verbs;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import static org.junit.jupiter.api.Assertions.assertTrue;

/** Runs every example against every provider on the class path, as the README tells users to. */
class ExamplesTest {
    private static void assumeDevice(String device) {
        Assumptions.assumeTrue(Verbs.devices().stream().anyMatch(d -> d.name().equals(device)),
            device + " is not available here");
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldPushAndPullParameters(String device) throws Exception {
        assumeDevice(device);
        String report = ParameterServerExample.runBoth(device, 4096);
        assertTrue(report.contains("identical"), report);
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldDeliverWriteWithImmediateInOrder(String device) throws Exception {
        assumeDevice(device);
        String report = SequencedWriteWithImmediateExample.run(device, 3000);
        assertTrue(report.contains("3000 WRITE_WITH_IMM records arrived in order"), report);
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldMeasureOperationLatency(String device) {
        assumeDevice(device);
        String report = OperationLatencyExample.run(device, 500);
        assertTrue(report.contains("RDMA_WRITE") && report.contains("RDMA_READ")
            && report.contains("ATOMIC_FETCH_AND_ADD"), report);
    }
}
