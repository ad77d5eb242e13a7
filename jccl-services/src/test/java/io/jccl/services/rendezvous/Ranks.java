package io.jccl.services.rendezvous;

import io.jccl.collectives.CommunicatorOptions;
import io.jccl.collectives.store.Store;
import io.jccl.common.testing.RankFutures;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;

/** Runs ranks as threads of this JVM, each with its own rendezvous (own device context) over one store. */
final class Ranks {
    interface Body {
        void run(Rendezvous r, CyclicBarrier barrier) throws Exception;
    }

    private Ranks() {
    }

    static CommunicatorOptions options(String device) {
        return CommunicatorOptions.defaults().withTransports(device).withTimeout(Duration.ofSeconds(20));
    }

    static void run(Store store, int n, int[] ranks, int size, CommunicatorOptions options, Body body) {
        CyclicBarrier barrier = new CyclicBarrier(n);
        List<CompletableFuture<Void>> futures = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            int rank = ranks[i];
            CompletableFuture<Void> f = new CompletableFuture<>();
            Thread.ofPlatform().name("rank-" + rank).daemon().start(() -> {
                try (Rendezvous r = Rendezvous.join(store, rank, size, options)) {
                    body.run(r, barrier);
                    barrier.await(30, TimeUnit.SECONDS); // nobody leaves while a peer still talks
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

    static void run(Store store, int size, CommunicatorOptions options, Body body) {
        int[] ranks = new int[size];
        for (int i = 0; i < size; i++) {
            ranks[i] = i;
        }
        run(store, size, ranks, size, options, body);
    }
}
