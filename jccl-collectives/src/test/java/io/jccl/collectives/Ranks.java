package io.jccl.collectives;

import io.jccl.collectives.store.InMemoryStore;
import io.jccl.collectives.store.Store;
import io.jccl.common.testing.RankFutures;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/** Runs n ranks as threads of this JVM, each with its own communicator (own contexts) over one InMemoryStore. */
final class Ranks {
    interface Body {
        void run(Communicator comm) throws Exception;
    }

    interface Factory {
        Communicator create(Store store, int rank, int size);
    }

    private Ranks() {
    }

    static CommunicatorOptions loop() {
        return CommunicatorOptions.defaults().withTransports("loop0").withTimeout(java.time.Duration.ofSeconds(20));
    }

    static void run(int n, CommunicatorOptions options, Body body) {
        runWith(n, (s, r, size) -> Communicator.create(s, r, size, options), body);
    }

    /** Runs the ranks; rethrows the first failure (with the others suppressed). */
    static void runWith(int n, Factory factory, Body body) {
        Store store = new InMemoryStore();
        List<CompletableFuture<Void>> futures = new ArrayList<>();
        for (int r = 0; r < n; r++) {
            int rank = r;
            CompletableFuture<Void> f = new CompletableFuture<>();
            Thread.ofPlatform().name("rank-" + r).daemon().start(() -> {
                try (Communicator c = factory.create(store, rank, n)) {
                    body.run(c);
                    f.complete(null);
                } catch (Throwable e) {
                    f.completeExceptionally(e);
                }
            });
            futures.add(f);
        }
        RankFutures.awaitAll(futures, 90);
    }
}
