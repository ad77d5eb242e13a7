package io.jccl.collectives;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * JCCL_SHRINK_QUORUM=majority: a shrink that would keep half of the ranks or fewer is refused (a partition's
 * minority must not decide on a standby store of its own), a majority shrinks as before; a bad value is a clear
 * error. Set through the system property jccl.shrink.quorum (the ranks are threads of this JVM).
 */
class ShrinkQuorumTest {
    @AfterEach
    void clear() {
        System.clearProperty("jccl.shrink.quorum");
    }

    @Test
    void shouldRefuseAShrinkToHalfTheRanksUnderTheMajorityRule() throws Exception {
        System.setProperty("jccl.shrink.quorum", "majority");
        List<Throwable> results = FailureTest.outcomes(4, Ranks.loop(), c -> {
            if (c.rank() >= 2) {
                return; // ranks 2 and 3 leave: the other two are half, not a majority
            }
            CollectiveException e = assertThrows(CollectiveException.class, () -> c.shrink(2, 3));
            assertInstanceOf(CollectiveException.Refused.class, e, e.toString());
            assertTrue(e.getMessage().contains("not a majority"), e.getMessage());
        });
        for (Throwable t : results) {
            assertNull(t, String.valueOf(t));
        }
    }

    @Test
    void shouldShrinkAMajorityUnderTheMajorityRule() throws Exception {
        System.setProperty("jccl.shrink.quorum", "majority");
        List<Throwable> results = FailureTest.outcomes(3, Ranks.loop(), c -> {
            if (c.rank() == 2) {
                return;
            }
            try (Communicator s = c.shrink(2)) {
                float[] v = {c.rank() + 1};
                s.allReduce(v, ReduceOp.SUM);
                assertEquals(3f, v[0]);
            }
        });
        for (Throwable t : results) {
            assertNull(t, String.valueOf(t));
        }
    }

    @Test
    void shouldRejectAnUnknownQuorum() throws Exception {
        System.setProperty("jccl.shrink.quorum", "most");
        List<Throwable> results = FailureTest.outcomes(2, Ranks.loop(), c -> {
            if (c.rank() == 1) {
                return;
            }
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> c.shrink(1));
            assertTrue(e.getMessage().contains("JCCL_SHRINK_QUORUM=most"), e.getMessage());
        });
        for (Throwable t : results) {
            assertNull(t, String.valueOf(t));
        }
    }
}
