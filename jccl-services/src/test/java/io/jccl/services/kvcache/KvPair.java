package io.jccl.services.kvcache;

import io.jccl.collectives.CommunicatorOptions;
import io.jccl.collectives.store.InMemoryStore;
import io.jccl.collectives.store.Store;
import io.jccl.common.testing.RankFutures;
import io.jccl.services.transfer.TransferEngine;
import io.jccl.services.transfer.TransferSettings;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;

/** Two ranks as threads of this JVM (rank 0 prefill, rank 1 decode), each with its own transfer engine. */
final class KvPair {
    interface Body {
        void run(TransferEngine engine, CyclicBarrier barrier) throws Exception;
    }

    /** A small layout: 2 tokens x 2 layers x 2 heads x 16 x 2 B = 512 B per block. */
    static final KvCacheLayout LAYOUT = new KvCacheLayout(2, 2, 2, 16, 2);

    private KvPair() {
    }

    static CommunicatorOptions options(String transport) {
        return CommunicatorOptions.defaults().withTransports(transport).withTimeout(Duration.ofSeconds(20));
    }

    /** Runs {@code prefill} as rank 0 and {@code decode} as rank 1 until both return. */
    static void run(String transport, Body prefill, Body decode) {
        Store store = new InMemoryStore();
        CyclicBarrier barrier = new CyclicBarrier(2);
        CompletableFuture<Void> f0 = start(store, 0, transport, prefill, barrier);
        CompletableFuture<Void> f1 = start(store, 1, transport, decode, barrier);
        RankFutures.awaitAll(List.of(f0, f1), 100);
    }

    private static CompletableFuture<Void> start(Store store, int rank, String transport, Body body,
                                                 CyclicBarrier barrier) {
        CompletableFuture<Void> f = new CompletableFuture<>();
        Thread.ofPlatform().name("rank-" + rank).daemon().start(() -> {
            try (TransferEngine e = TransferEngine.create(store, rank, 2, options(transport),
                TransferSettings.defaults())) {
                body.run(e, barrier);
                f.complete(null);
            } catch (Throwable t) {
                barrier.reset();
                f.completeExceptionally(t);
            }
        });
        return f;
    }

    static void await(CyclicBarrier barrier) throws Exception {
        barrier.await(30, TimeUnit.SECONDS);
    }
}
