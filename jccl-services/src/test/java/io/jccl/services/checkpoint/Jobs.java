package io.jccl.services.checkpoint;

import io.jccl.collectives.CommunicatorOptions;
import io.jccl.collectives.store.InMemoryStore;
import io.jccl.collectives.store.Store;
import io.jccl.common.testing.RankFutures;
import io.jccl.services.transfer.TransferEngine;
import io.jccl.services.transfer.TransferSettings;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;

/**
 * A job of n ranks as threads of this JVM, each with its own transfer engine over one InMemoryStore; the last rank
 * runs the checkpoint agent, the others are training ranks.
 */
final class Jobs {
    interface Rank {
        void run(TransferEngine engine, CyclicBarrier barrier) throws Exception;
    }

    interface AgentBody {
        void run(CheckpointAgent agent, CyclicBarrier barrier) throws Exception;
    }

    static final Duration TIMEOUT = Duration.ofSeconds(20);

    private Jobs() {
    }

    static CommunicatorOptions options(String transport) {
        return CommunicatorOptions.defaults().withTransports(transport).withTimeout(TIMEOUT);
    }

    /**
     * Runs {@code trainers} training ranks and an agent (rank {@code trainers}) with {@code settings}; the agent's
     * body runs beside the trainers (it must pass the barrier as often as they do); everyone closes together.
     */
    static void run(String transport, int trainers, CheckpointSettings settings, AgentBody agentBody, Rank trainer) {
        int n = trainers + 1;
        Store store = new InMemoryStore();
        CyclicBarrier barrier = new CyclicBarrier(n);
        List<CompletableFuture<Void>> futures = new ArrayList<>();
        for (int r = 0; r < n; r++) {
            int rank = r;
            CompletableFuture<Void> f = new CompletableFuture<>();
            Thread.ofPlatform().name("rank-" + r).daemon().start(() -> {
                try (TransferEngine e = TransferEngine.create(store, rank, n, options(transport),
                    TransferSettings.defaults())) {
                    if (rank == trainers) {
                        try (CheckpointAgent agent = CheckpointAgent.start(e, settings)) {
                            agentBody.run(agent, barrier);
                            barrier.await(60, TimeUnit.SECONDS);
                        }
                    } else {
                        trainer.run(e, barrier);
                        barrier.await(60, TimeUnit.SECONDS);
                    }
                    barrier.await(60, TimeUnit.SECONDS); // nobody closes while a peer still transfers
                    f.complete(null);
                } catch (Throwable e) {
                    barrier.reset();
                    f.completeExceptionally(e);
                }
            });
            futures.add(f);
        }
        RankFutures.awaitAll(futures, 100);
    }

    /** The value of the flat state's byte {@code i} at {@code step}. */
    static byte value(long step, long i) {
        long x = (i + 1) * 0x9E3779B97F4A7C15L ^ step * 0xC2B2AE3D27D4EB4FL;
        return (byte) (x ^ (x >>> 29));
    }

    /** Fills {@code length} bytes of {@code m} with the flat state of {@code step} from byte {@code from}. */
    static void fill(MemorySegment m, long at, long from, long length, long step) {
        for (long i = 0; i < length; i++) {
            m.set(ValueLayout.JAVA_BYTE, at + i, value(step, from + i));
        }
    }

    /** The first byte of {@code m} that differs from step {@code step}'s state, or -1. */
    static long mismatch(MemorySegment m, long at, long from, long length, long step) {
        for (long i = 0; i < length; i++) {
            if (m.get(ValueLayout.JAVA_BYTE, at + i) != value(step, from + i)) {
                return i;
            }
        }
        return -1;
    }
}
