package io.jccl.collectives;

import io.jccl.collectives.tuning.Algorithm;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.concurrent.ConcurrentHashMap;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * A rank alone on its host beside hosts with several ranks (what a shrink leaves after a kill between namespace
 * hosts: old ranks 0 and 2 on host A, 1 on host B): every rank must price the hierarchical all-reduce alike, or they
 * pick different algorithms and the all-reduce fails with a mismatch.
 */
class UnevenHostsTest {
    @Test
    void shouldPickTheSameAllReduceAlgorithmOnEveryRankWhenOneRankIsAloneOnItsHost() {
        String[] hostOf = {"hostA", "hostB", "hostA"};
        Map<Integer, Algorithm> picked = new ConcurrentHashMap<>();
        Ranks.runWith(3, (store, rank, size) -> Communicator.create(store, rank, size,
            CommunicatorOptions.defaults().withTransports("tcp0").withShmDisabled(true)
                .withTimeout(Duration.ofSeconds(20)).withHostId(hostOf[rank])), c -> {
                    for (long bytes : new long[] {8, 4096, 1 << 20}) {
                        picked.put(c.rank() * 100 + Long.numberOfTrailingZeros(bytes),
                            c.algorithmFor(Collective.ALL_REDUCE, bytes));
                    }
                    float[] v = {c.rank() + 1, 10 * (c.rank() + 1)};
                    c.allReduce(v, ReduceOp.SUM);
                    assertArrayEquals(new float[] {6, 60}, v);
                });
        for (int shift : new int[] {3, 12, 20}) {
            assertEquals(picked.get(shift), picked.get(100 + shift), "rank 1 (alone on hostB) vs rank 0 at 2^" + shift);
            assertEquals(picked.get(shift), picked.get(200 + shift), "rank 2 vs rank 0 at 2^" + shift);
        }
    }
}
