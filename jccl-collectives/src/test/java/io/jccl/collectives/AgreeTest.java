package io.jccl.collectives;

import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@link Communicator#agree}: the bitwise AND of the live ranks' values and the same failed set on every rank that
 * returns (ULFM's MPIX_Comm_agree), on a healthy communicator, after a lost rank, and with a rank that never comes.
 */
class AgreeTest {
    private static final int[] VALUES = {0b1111, 0b0111, 0b1110, 0b1111};

    @Test
    void shouldAndTheValuesOfAHealthyCommunicator() throws Exception {
        List<Throwable> results = FailureTest.outcomes(4, Ranks.loop(), c -> {
            Communicator.Agreement a = c.agree(VALUES[c.rank()]);
            assertEquals(0b0110, a.value());
            assertArrayEquals(new int[0], a.failedRanks());
            // a second agreement is a new one (its own keys), and the communicator still works
            assertEquals(0, c.agree(c.rank() == 2 ? 0 : 1).value(), "rank 2 vetoes");
            assertEquals(4f * 1, ShrinkTest.sum(c, 1));
        });
        for (int r = 0; r < 4; r++) {
            assertNull(results.get(r), "rank " + r + ": " + results.get(r));
        }
    }

    @Test
    void shouldLeaveOutALostRankOnEverySurvivor() throws Exception {
        List<Throwable> results = FailureTest.outcomes(4, Ranks.loop(), c -> {
            ShrinkTest.sum(c, 1);
            if (c.rank() == 1) {
                c.abort("lost");
                return;
            }
            assertThrows(CollectiveException.PeerFailure.class, () -> FailureTest.allReduceOnce(c, 100_000));
            Communicator.Agreement a = c.agree(VALUES[c.rank()]);
            assertEquals(0b1110, a.value(), "the AND of ranks 0, 2 and 3");
            assertArrayEquals(new int[] {1}, a.failedRanks());
        });
        for (int r = 0; r < 4; r++) {
            assertNull(results.get(r), "rank " + r + ": " + results.get(r));
        }
    }

    /**
     * Rank 3 is alive but never comes (nobody knows it failed): the others decide without it after the peer
     * timeout, all with the same set; when it comes at last it is told it was left out.
     */
    @Test
    void shouldDecideWithoutASilentRankAfterThePeerTimeoutAndRefuseItLater() throws Exception {
        CountDownLatch decided = new CountDownLatch(3);
        List<Throwable> results = FailureTest.outcomes(4, Ranks.loop().withPeerTimeout(Duration.ofSeconds(1)), c -> {
            if (c.rank() == 3) {
                assertTrue(decided.await(60, TimeUnit.SECONDS));
                CollectiveException.Refused e = assertThrows(CollectiveException.Refused.class, () -> c.agree(0));
                assertTrue(e.getMessage().contains("left out"), e.getMessage());
                return;
            }
            Communicator.Agreement a = c.agree(VALUES[c.rank()]);
            decided.countDown();
            assertEquals(0b0110, a.value());
            assertArrayEquals(new int[] {3}, a.failedRanks());
        });
        for (int r = 0; r < 4; r++) {
            assertNull(results.get(r), "rank " + r + ": " + results.get(r));
        }
    }
}
