package io.jccl.services.ps;

import io.jccl.collectives.CommunicatorOptions;
import io.jccl.collectives.store.InMemoryStore;
import io.jccl.collectives.store.Store;
import io.jccl.common.testing.RankFutures;
import io.jccl.services.transfer.TransferEngine;
import io.jccl.services.transfer.TransferSettings;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/** Runs the ranks of a parameter-server job as threads of this JVM, each with its own transfer engine. */
final class Jobs {
    interface Body {
        void run(TransferEngine engine) throws Exception;
    }

    private Jobs() {
    }

    static CommunicatorOptions options(String transport) {
        return CommunicatorOptions.defaults().withTransports(transport).withTimeout(Duration.ofSeconds(20));
    }

    static void run(int n, String transport, Body body) {
        Store store = new InMemoryStore();
        List<CompletableFuture<Void>> futures = new ArrayList<>();
        for (int r = 0; r < n; r++) {
            int rank = r;
            CompletableFuture<Void> f = new CompletableFuture<>();
            Thread.ofPlatform().name("ps-rank-" + r).daemon().start(() -> {
                try (TransferEngine e = TransferEngine.create(store, rank, n, options(transport),
                    TransferSettings.defaults())) {
                    body.run(e);
                } catch (Throwable e) {
                    f.completeExceptionally(e);
                }
                f.complete(null); // after the engine closed (a no-op when it failed)
            });
            futures.add(f);
        }
        RankFutures.awaitAll(futures, 100);
    }

    /**
     * A synthetic gradient of worker {@code w} at {@code step}: a function of the weights (so a difference anywhere
     * propagates), with magnitudes 10^±3 apart between workers (so the summation order shows in the bits).
     */
    static void gradient(float[] parameters, int w, long step, float[] out) {
        float magnitude = w % 3 == 0 ? 1f : w % 3 == 1 ? 1e-3f : 1e3f;
        for (int i = 0; i < parameters.length; i++) {
            float x = parameters[i] * (w + 1) + step * 0.37f + i * 0.01f;
            out[i] = (float) StrictMath.sin(x) * magnitude;
        }
    }

    static float[] initial(int count) {
        float[] p = new float[count];
        for (int i = 0; i < count; i++) {
            p[i] = (float) StrictMath.cos(i * 0.7) * 0.5f;
        }
        return p;
    }
}
