package io.jccl.collectives.tuning;

import io.jccl.collectives.Collective;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class CostModelTest {
    static final TuningParameters TCP = new TuningParameters(new LinkParameters(15, 2), null, 10, 1 << 20, 128 << 10);
    static final TuningParameters SHM = new TuningParameters(new LinkParameters(2, 6), new LinkParameters(0.5, 8), 10,
        1 << 20, 128 << 10);

    @Test
    void smallMessagesPreferLogStepsLargePreferBandwidthOptimal() {
        AlgorithmFilter none = AlgorithmFilter.none();
        Algorithm small = CostModel.select(Collective.ALL_REDUCE, 8, 8, TCP, none);
        assertTrue(small == Algorithm.TREE || small == Algorithm.RHD || small == Algorithm.RD, small.toString());
        // one exchange instead of two for 2 ranks
        assertEquals(Algorithm.RD, CostModel.select(Collective.ALL_REDUCE, 2, 8, TCP, none));
        assertEquals(Algorithm.RING, CostModel.select(Collective.ALL_REDUCE, 2, 64L << 20, TCP, none));
        Algorithm large = CostModel.select(Collective.ALL_REDUCE, 8, 256L << 20, TCP, none);
        assertTrue(large == Algorithm.RING || large == Algorithm.RHD, large.toString());
        assertEquals(Algorithm.DIRECT, CostModel.select(Collective.ALL_REDUCE, 4, 8, SHM, none));
        assertEquals(Algorithm.TREE, CostModel.select(Collective.BROADCAST, 8, 8, TCP, none));
        assertEquals(Algorithm.RING, CostModel.select(Collective.BROADCAST, 8, 64L << 20, TCP, none));
    }

    @Test
    void estimatesFollowAlphaBeta() {
        // ring all-reduce on 4 ranks, 4 MB: 6 steps x 15 us + 2*(3/4)*4e6 B / 2 GB/s + (3/4)*4e6 / 10 GB/s (+ chunks)
        double us = CostModel.estimateUs(Collective.ALL_REDUCE, Algorithm.RING, 4, 4_000_000, TCP);
        double expected = 6 * 15 + 1.5 * 4e6 / 2e3 + 0.75 * 4e6 / 10e3;
        assertTrue(Math.abs(us - expected) < 6 * 0.2 * 8, us + " vs " + expected);
        assertTrue(Double.isInfinite(CostModel.estimateUs(Collective.ALL_REDUCE, Algorithm.DIRECT, 4, 8, TCP)));
        assertEquals(0, CostModel.estimateUs(Collective.ALL_REDUCE, Algorithm.RING, 1, 1 << 20, TCP));
        assertTrue(Double.isInfinite(CostModel.estimateUs(Collective.GATHER, Algorithm.RING, 4, 8, TCP)));
    }

    @Test
    void jcclAlgoSyntaxAsNccl() {
        AlgorithmFilter f = AlgorithmFilter.parse("allreduce:ring;broadcast:^tree");
        assertTrue(f.allows(Collective.ALL_REDUCE, Algorithm.RING));
        assertFalse(f.allows(Collective.ALL_REDUCE, Algorithm.TREE));
        assertFalse(f.allows(Collective.BROADCAST, Algorithm.TREE));
        assertTrue(f.allows(Collective.BROADCAST, Algorithm.RING));
        assertTrue(f.allows(Collective.REDUCE, Algorithm.TREE), "unnamed collectives are unrestricted");
        AlgorithmFilter everywhere = AlgorithmFilter.parse("^direct");
        assertFalse(everywhere.allows(Collective.ALL_GATHER, Algorithm.DIRECT));
        assertEquals(Algorithm.RING, CostModel.select(Collective.ALL_REDUCE, 4, 8, SHM,
            AlgorithmFilter.parse("allreduce:ring")));
        // a filter that leaves nothing applicable falls back to the cheapest
        assertEquals(Algorithm.LINEAR, CostModel.select(Collective.GATHER, 4, 8, SHM, AlgorithmFilter.parse("ring")));
        assertThrows(IllegalArgumentException.class, () -> AlgorithmFilter.parse("allreduce:warp"));
        assertThrows(IllegalArgumentException.class, () -> AlgorithmFilter.parse("allsum:ring"));
    }

    @Test
    void tableMarksTheChoice() {
        String table = CostModel.table(8, SHM, AlgorithmFilter.none());
        assertTrue(table.contains("cost model for 8 ranks"), table);
        assertTrue(table.contains("allReduce      direct"), table);
        assertTrue(table.contains("*"), table);
    }
}
