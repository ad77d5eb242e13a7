package io.jccl.tools.colltests;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;

class BusBandwidthTest {
    @Test
    void shouldUseNcclTestsFactors() {
        assertEquals(1.0, BusBandwidth.ALL_REDUCE.factor(2), 1e-12);
        assertEquals(1.5, BusBandwidth.ALL_REDUCE.factor(4), 1e-12);
        assertEquals(0.75, BusBandwidth.ALL_GATHER.factor(4), 1e-12);
        assertEquals(0.75, BusBandwidth.REDUCE_SCATTER.factor(4), 1e-12);
        assertEquals(0.75, BusBandwidth.ALL_TO_ALL.factor(4), 1e-12);
        assertEquals(0.875, BusBandwidth.GATHER.factor(8), 1e-12);
        assertEquals(0.875, BusBandwidth.SCATTER.factor(8), 1e-12);
        assertEquals(1.0, BusBandwidth.BROADCAST.factor(8), 1e-12);
        assertEquals(1.0, BusBandwidth.REDUCE.factor(8), 1e-12);
        assertEquals(1.0, BusBandwidth.SEND_RECV.factor(8), 1e-12);
    }

    @Test
    void shouldComputeAlgbwInDecimalGigabytes() {
        assertEquals(1.0, BusBandwidth.algorithmBandwidth(1e9, 1.0), 1e-12);
        assertEquals(2.0, BusBandwidth.algorithmBandwidth(1 << 20, (1 << 20) / 2e9), 1e-9);
        assertEquals(1.5, BusBandwidth.ALL_REDUCE.busBandwidth(1e9, 1.0, 4), 1e-12);
        assertEquals(BusBandwidth.ALL_REDUCE, BusBandwidth.of("all_reduce_perf"));
        assertEquals(BusBandwidth.SEND_RECV, BusBandwidth.of("sendrecv"));
    }
}
