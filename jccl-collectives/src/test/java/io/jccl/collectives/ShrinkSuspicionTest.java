package io.jccl.collectives;

import io.jccl.collectives.store.InMemoryStore;
import io.jccl.collectives.store.Store;
import org.junit.jupiter.api.Test;

import java.util.BitSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;

/**
 * Survivors that each know a different dead rank (each the neighbour of one; two kills on two hosts, the links
 * broken by the revocation) learn the others' verdicts from the join records and decide at once, instead of each
 * waiting JCCL_PEER_TIMEOUT (30 s by default) for the rank only the other knows dead. Here the peer timeout is an
 * hour and the deadline 60 s: without the records' verdicts both would fail with a timeout.
 */
class ShrinkSuspicionTest {
    @Test
    void survivorsThatKnowDifferentDeadRanksDecideTogetherWithoutThePeerTimeout() throws Exception {
        try (Store store = new InMemoryStore()) {
            long waitNs = TimeUnit.HOURS.toNanos(1);
            long deadlineNs = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            CompletableFuture<int[]> two = CompletableFuture.supplyAsync(() -> Shrink.members(store, 1, 2, 4,
                ranks(0), j -> false, waitNs, deadlineNs), Thread::startVirtualThread);
            CompletableFuture<int[]> three = CompletableFuture.supplyAsync(() -> Shrink.members(store, 1, 3, 4,
                ranks(1), j -> false, waitNs, deadlineNs), Thread::startVirtualThread);
            assertArrayEquals(new int[] {2, 3}, two.get());
            assertArrayEquals(new int[] {2, 3}, three.get());
        }
    }

    private static BitSet ranks(int... r) {
        BitSet s = new BitSet();
        for (int i : r) {
            s.set(i);
        }
        return s;
    }
}
