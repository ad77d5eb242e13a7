package io.jccl.collectives;

import io.jccl.collectives.store.InMemoryStore;
import io.jccl.collectives.store.Store;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReferenceArray;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The warm-up at communicator creation (JCCL_WARMUP): on by default, collective, bounded, off on request. */
class WarmupTest {
    private static final long SECOND_NS = 1_000_000_000L;

    @Test
    void shouldWarmUpAtCreationByDefault() {
        // Before issue 16 bug 8 a communicator ran nothing at creation but its connectivity barrier.
        AtomicReferenceArray<Integer> rounds = new AtomicReferenceArray<>(2);
        Ranks.run(2, Ranks.loop(), c -> {
            rounds.set(c.rank(), c.warmupRounds);
            float[] data = {c.rank() + 1f};
            c.allReduce(data, ReduceOp.SUM);
            assertEquals(3f, data[0]);
        });
        assertTrue(rounds.get(0) >= 1, "rounds " + rounds);
        assertEquals(1, Warmup.operations(1));
        assertEquals(5, Warmup.operations(2));
        assertEquals(rounds.get(0), rounds.get(1), "every rank runs the same rounds");
    }

    @Test
    void shouldNotWarmUpWhenTurnedOff() {
        Ranks.run(2, Ranks.loop().withWarmup(Duration.ZERO), c -> assertEquals(0, c.warmupRounds));
    }

    @Test
    void shouldStopEveryRankTogetherWhateverTheirWindows() {
        // rank 0 is done at once, rank 1 warms for 200 ms of its own: both run the rounds rank 1 needs
        long[] windowsNs = {1, 200_000_000L};
        int[] rounds = new int[2];
        Ranks.run(2, Ranks.loop().withWarmup(Duration.ZERO), c -> {
            rounds[c.rank()] = Warmup.run(c, windowsNs[c.rank()], new AtomicLong());
            c.barrier();
        });
        assertEquals(rounds[0], rounds[1]);
        assertTrue(rounds[0] > 1, "rank 1 was not done after one round: " + rounds[0]);
    }

    @Test
    void shouldRunOneRoundOnceTheJvmsWindowHasPassed() {
        // a split or a second communicator of the same JVM: the JVM is warm already
        AtomicLong windowStart = new AtomicLong(System.nanoTime() - SECOND_NS);
        int[] rounds = new int[2];
        Ranks.run(2, Ranks.loop().withWarmup(Duration.ZERO), c -> rounds[c.rank()] = Warmup.run(c, SECOND_NS / 2,
            windowStart));
        assertArrayEquals(new int[] {1, 1}, rounds);
    }

    @Test
    void shouldRefuseRanksThatDisagreeOnWarmingUp() throws Exception {
        // one rank warming up while the other starts its own collectives would fail in a mismatch, or wait
        Store store = new InMemoryStore();
        CommunicatorOptions on = Ranks.loop().withTimeout(Duration.ofSeconds(10));
        CompletableFuture<Communicator> other = CompletableFuture.supplyAsync(() -> Communicator.create(store, 1, 2,
            on.withWarmup(Duration.ZERO)));
        CollectiveException.Refused e = assertThrows(CollectiveException.Refused.class,
            () -> Communicator.create(store, 0, 2, on).close());
        assertTrue(e.getMessage().contains("different JCCL settings") && e.getMessage().contains("JCCL_WARMUP"),
            e.getMessage());
        try {
            other.get(20, TimeUnit.SECONDS).close();
        } catch (Exception expected) {
            // refused too
        }
    }

    @Test
    void shouldParseJcclWarmup() {
        assertEquals(0, CommunicatorOptions.parseWarmupNs("0"));
        assertEquals(0, CommunicatorOptions.parseWarmupNs("off"));
        assertEquals(CommunicatorOptions.DEFAULT_WARMUP_MS * 1_000_000L, CommunicatorOptions.parseWarmupNs("1"));
        assertEquals(200_000_000L, CommunicatorOptions.parseWarmupNs("200ms"));
        assertEquals(2 * SECOND_NS, CommunicatorOptions.parseWarmupNs(" 2s "));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
            () -> CommunicatorOptions.parseWarmupNs("5"));
        assertTrue(e.getMessage().contains("JCCL_WARMUP=5") && e.getMessage().contains("200ms"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> CommunicatorOptions.parseWarmupNs("soon"));
    }

    @Test
    void shouldNotWarmUpAlone() {
        AtomicInteger rounds = new AtomicInteger(-1);
        Ranks.run(1, Ranks.loop(), c -> rounds.set(c.warmupRounds));
        assertEquals(0, rounds.get());
    }

    @Test
    void shouldStartTheKernelWarmupOncePerJvmAndOnlyWhenOn() {
        assertTrue(!Warmup.startKernels(0, 2), "JCCL_WARMUP=0 starts nothing");
        assertTrue(!Warmup.startKernels(SECOND_NS, 1), "one rank: nothing to warm");
        Warmup.startKernels(SECOND_NS, 2);
        assertTrue(!Warmup.startKernels(SECOND_NS, 2), "once per JVM");
    }
}
