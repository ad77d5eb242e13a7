package io.jccl.collectives;

import io.jccl.collectives.store.InMemoryStore;
import org.junit.jupiter.api.Test;

import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The recovery path is rehearsed once per JVM after a communicator's creation (in the background), so that a real
 * recovery does not run cold; the rehearsal's agreement decides under keys of its rank only, alone.
 */
class RehearsalTest {
    @Test
    void theRehearsalAgreesAloneUnderItsOwnKeys() {
        try (InMemoryStore store = new InMemoryStore()) {
            assertArrayEquals(new int[] {3}, Rehearsal.members(store, 3));
            assertTrue(store.check("rehearsal/3/members", TimeUnit.SECONDS.toNanos(1)));
        }
        assertEquals(1, Rehearsal.failureReport(0), "the rehearsed flight recorder's dump");
    }

    @Test
    void creatingACommunicatorRehearsesTheRecoveryOncePerJvm() throws Exception {
        Ranks.run(2, Ranks.loop().withWarmup(java.time.Duration.ofMillis(1)), c -> { });
        long deadlineNs = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (Rehearsal.RAN.get() == 0 && System.nanoTime() < deadlineNs) {
            Thread.sleep(5);
        }
        assertTrue(Rehearsal.RAN.get() == 1, "rehearsals in this JVM: " + Rehearsal.RAN.get());
    }
}
