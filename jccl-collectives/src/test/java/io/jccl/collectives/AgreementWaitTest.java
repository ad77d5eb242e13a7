package io.jccl.collectives;

import org.junit.jupiter.api.Test;

import java.util.BitSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A survivor waiting for another's join record waits in the store instead of polling it every 5 ms (a round trip per
 * awaited rank each time: at 8 ranks 7 survivors on one store thread, and the last record seen up to a poll late),
 * and reads the records its wait saw arrive without looking for them again. Rank 1's record is written once rank 0
 * waits in the store, or after 200 store calls of rank 0 (what polling makes); then rank 0 must have made few calls.
 * Counts, not times.
 */
class AgreementWaitTest {
    @Test
    void aSurvivorWaitsForTheAwaitedRecordInTheStoreInsteadOfPollingIt() throws Exception {
        try (CountingStore store = new CountingStore()) {
            long waitNs = TimeUnit.HOURS.toNanos(1);
            long deadlineNs = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            int[] checksBefore = new int[1];
            Runnable recordOfRank1 = () -> {
                checksBefore[0] = store.count("check", "join/1");
                store.setString("shrink1/join/1", "-1;", waitNs); // value -1, knows no rank dead
            };
            store.onFirstWait = recordOfRank1; // written while rank 0 waits in the store (if it does)
            CompletableFuture<int[]> zero = CompletableFuture.supplyAsync(() -> Shrink.members(store, 1, 0, 2,
                new BitSet(), j -> false, waitNs, deadlineNs), Thread::startVirtualThread);
            while (store.count("wait", "") == 0 && store.total() < 200 && !zero.isDone()) {
                Thread.sleep(1);
            }
            int before = store.total();
            if (store.count("wait", "") == 0) {
                recordOfRank1.run(); // it polls: write it now, so that it ends and the counts below fail
            }
            assertArrayEquals(new int[] {0, 1}, zero.get(60, TimeUnit.SECONDS));
            assertTrue(before < 20, "rank 0 made " + before + " store calls before rank 1's record came: "
                + store.calls);
            assertEquals(checksBefore[0], store.count("check", "join/1"), "looks for rank 1's record after the wait"
                + " saw it: " + store.calls);
        }
    }
}
