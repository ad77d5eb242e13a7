package io.jccl.collectives.direct;

import io.jccl.collectives.direct.DirectBarrier.WaitVerdict;
import org.junit.jupiter.api.Test;

import static io.jccl.collectives.direct.DirectBarrier.judgeWait;
import static org.junit.jupiter.api.Assertions.assertEquals;

/** The adaptive spin's reading of a direct-path wait that outlasted the spin. */
class WaitVerdictTest {
    @Test
    void aPeerOnAnotherCpuWasLateNotSharingThisCore() {
        assertEquals(WaitVerdict.PEER_ELSEWHERE, judgeWait(1, 0, 1, false, false));
        assertEquals(WaitVerdict.PEER_ELSEWHERE, judgeWait(2, 1, 0, true, false));
    }

    @Test
    void theHigherRankMovesOffASharedCpuTheLowerOneStays() {
        assertEquals(WaitVerdict.SAME_CPU, judgeWait(1, 3, 3, true, false));
        assertEquals(WaitVerdict.SAME_CPU, judgeWait(50, 3, 3, true, false));
        assertEquals(WaitVerdict.QUICK, judgeWait(1, 3, 3, false, false));
        assertEquals(WaitVerdict.PEER_BUSY, judgeWait(50, 3, 3, false, false));
    }

    @Test
    void unknownCpusFallBackToCountingQuickWaits() {
        assertEquals(WaitVerdict.QUICK, judgeWait(0, -1, -1, true, false));
        assertEquals(WaitVerdict.QUICK, judgeWait(2, 0, -1, true, false));
        assertEquals(WaitVerdict.QUICK, judgeWait(2, -1, 0, false, false));
        assertEquals(WaitVerdict.PEER_BUSY, judgeWait(3, -1, -1, true, false));
    }

    @Test
    void boundRanksNeedNoInference() {
        assertEquals(WaitVerdict.APART, judgeWait(1, 0, 0, true, true));
        assertEquals(WaitVerdict.APART, judgeWait(9, -1, -1, false, true));
    }
}
