package io.jccl.collectives.core;

import io.jccl.collectives.store.InMemoryStore;
import io.jccl.collectives.store.Store;
import io.jccl.common.CpuAffinity;
import org.junit.jupiter.api.Test;

import java.util.BitSet;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Oversubscribed or not, from every local rank's CPUs (synthetic masks: no binding, no launcher). */
class CpuPlacementTest {
    private static final int NO_QUOTA = Integer.MAX_VALUE;

    private static BitSet[] masks(String... lists) {
        BitSet[] masks = new BitSet[lists.length];
        for (int i = 0; i < lists.length; i++) {
            masks[i] = CpuAffinity.parseCpuList(lists[i]);
        }
        return masks;
    }

    @Test
    void shouldNotCallTwoRanksBoundToTwoCpusOversubscribed() {
        // mpirun --bind-to core on a 2-CPU host: each rank's own mask is 1 CPU, together they fit
        CpuPlacement.Verdict v = CpuPlacement.decide(masks("0", "1"), 2, NO_QUOTA);
        assertFalse(v.oversubscribed(), v.reason());
        assertTrue(v.boundApart(), v.reason());
        assertTrue(v.reason().contains("[0] [1]"), v.reason());
    }

    @Test
    void shouldCallFourRanksOnTwoCpusOversubscribed() {
        CpuPlacement.Verdict v = CpuPlacement.decide(masks("0-1", "0-1", "0-1", "0-1"), 2, NO_QUOTA);
        assertTrue(v.oversubscribed(), v.reason());
        assertFalse(v.boundApart());
        assertTrue(v.reason().contains("only 2 of them"), v.reason());
    }

    @Test
    void shouldCallTwoRanksBoundToOneCpuOversubscribed() {
        CpuPlacement.Verdict v = CpuPlacement.decide(masks("0", "0"), 2, NO_QUOTA);
        assertTrue(v.oversubscribed(), v.reason());
        assertFalse(v.boundApart());
    }

    @Test
    void shouldNotCallUnboundRanksThatFitOversubscribed() {
        CpuPlacement.Verdict v = CpuPlacement.decide(masks("0-1", "0-1"), 2, NO_QUOTA);
        assertFalse(v.oversubscribed(), v.reason());
        assertFalse(v.boundApart(), "free to move: not bound apart");
    }

    @Test
    void shouldMatchOverlappingMasks() {
        // --bind-to socket style overlaps: {0,1} {0} {1,2} fit 3 CPUs only as 1, 0, 2 (needs an augmenting path)
        assertFalse(CpuPlacement.decide(masks("0-1", "0", "1-2"), 3, NO_QUOTA).oversubscribed());
        // {0,1} {0} {1}: three ranks, two CPUs between them, although the host has four
        assertTrue(CpuPlacement.decide(masks("0-1", "0", "1"), 4, NO_QUOTA).oversubscribed());
        assertEquals(2, CpuPlacement.matchRanksToCpus(masks("0-1", "0", "1")));
    }

    @Test
    void shouldCountUnknownMasksAsTheWholeHost() {
        BitSet[] twoUnknown = {new BitSet(), new BitSet()};
        assertFalse(CpuPlacement.decide(twoUnknown, 2, NO_QUOTA).oversubscribed());
        BitSet[] threeUnknown = {new BitSet(), new BitSet(), new BitSet()};
        CpuPlacement.Verdict v = CpuPlacement.decide(threeUnknown, 2, NO_QUOTA);
        assertTrue(v.oversubscribed());
        assertTrue(v.reason().contains("[?]"), v.reason());
    }

    @Test
    void shouldHonourTheCpuQuota() {
        // a container with 4 CPUs in its mask but a quota of 1 CPU: 2 ranks do not fit
        CpuPlacement.Verdict v = CpuPlacement.decide(masks("0-3", "0-3"), 4, 1);
        assertTrue(v.oversubscribed(), v.reason());
        assertTrue(v.reason().contains("quota allows 1"), v.reason());
    }

    @Test
    void shouldDecideFromThePeersPublishedMasks() {
        Store store = new InMemoryStore();
        long deadline = System.nanoTime() + 10_000_000_000L;
        store.setString("cpus/1", "1", 1_000_000_000L);
        // rank 0 on CPU 0 with rank 1 on CPU 1: apart; with rank 3 also on CPU 0: oversubscribed
        CpuPlacement.Verdict apart = CpuPlacement.exchange(store, 0, new int[] {0, 1}, CpuAffinity.parseCpuList("0"),
            deadline);
        assertFalse(apart.oversubscribed(), apart.reason());
        assertTrue(apart.boundApart(), apart.reason());
        assertEquals("0", store.getString("cpus/0", 1_000_000_000L));
        Store other = new InMemoryStore();
        other.setString("cpus/3", "0", 1_000_000_000L);
        CpuPlacement.Verdict shared = CpuPlacement.exchange(other, 0, new int[] {0, 3},
            CpuAffinity.parseCpuList("0"), deadline);
        assertTrue(shared.oversubscribed(), shared.reason());
    }

    @Test
    void shouldTreatAnUnreadablePeerRecordAsUnknown() {
        Store store = new InMemoryStore();
        store.setString("cpus/1", "not-a-list", 1_000_000_000L);
        CpuPlacement.Verdict v = CpuPlacement.exchange(store, 0, new int[] {0, 1}, CpuAffinity.parseCpuList("0"),
            System.nanoTime() + 10_000_000_000L);
        assertTrue(v.reason().contains("[0] [?]"), v.reason());
        assertFalse(v.boundApart());
    }

    @Test
    void shouldNeedNoStoreForOneLocalRank() {
        Store store = new InMemoryStore();
        CpuPlacement.Verdict v = CpuPlacement.exchange(store, 5, new int[] {5}, CpuAffinity.parseCpuList("3"),
            System.nanoTime() + 1_000_000_000L);
        assertFalse(v.oversubscribed(), v.reason());
        assertFalse(v.boundApart());
    }
}
