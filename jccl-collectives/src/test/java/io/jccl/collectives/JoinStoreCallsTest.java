package io.jccl.collectives;

import org.junit.jupiter.api.Test;

import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A communicator's join makes few calls to the store after the join records: one endpoint record per rank (not one
 * per peer) and a counter barrier for "every rank connected" (not a record per rank that every rank reads, twice
 * with the direct path's verdict). At 8 ranks a shrink's new join made 7 writes, 9 + 9 barrier calls per rank in a
 * row through one store thread (the recovery breakdown of docs/fault-tolerance.md, "queue pairs" and "all
 * connected"). Counts, not times.
 */
class JoinStoreCallsTest {
    @Test
    void eachRankWritesOneEndpointRecordAndPassesTheConnectedBarrierInThreeCalls() {
        int n = 4;
        CountingStore store = new CountingStore();
        List<java.util.concurrent.CompletableFuture<Void>> futures = new java.util.ArrayList<>();
        for (int r = 0; r < n; r++) {
            int rank = r;
            java.util.concurrent.CompletableFuture<Void> f = new java.util.concurrent.CompletableFuture<>();
            Thread.ofPlatform().name("rank-" + r).daemon().start(() -> {
                try (Communicator c = Communicator.create(store, rank, n, Ranks.loop())) {
                    c.barrier();
                    f.complete(null);
                } catch (Throwable e) {
                    f.completeExceptionally(e);
                }
            });
            futures.add(f);
        }
        io.jccl.common.testing.RankFutures.awaitAll(futures, 90);
        assertEquals(n, store.count("set", "/ep/"), "endpoint records written: " + store.calls);
        int barrier = store.count("", "/connected") + store.count("", "/direct/");
        assertTrue(barrier <= 3 * n, "store calls of the connected barrier: " + barrier + " " + store.calls);
    }
}
