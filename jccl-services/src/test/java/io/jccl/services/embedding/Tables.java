package io.jccl.services.embedding;

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
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;

/** Ranks as threads of this JVM, each with its own transfer engine over one InMemoryStore; row contents to check. */
final class Tables {
    interface Body {
        void run(TransferEngine engine, CyclicBarrier barrier) throws Exception;
    }

    private Tables() {
    }

    /** A test mode: a device ("shm0", "tcp0"), with "/read" for READ work requests where direct access exists. */
    static CommunicatorOptions options(String mode) {
        return CommunicatorOptions.defaults().withTransports(mode.split("/")[0]).withTimeout(Duration.ofSeconds(20));
    }

    /** Opens {@code table} as the mode says (direct access unless "/read"). */
    static EmbeddingClient open(TransferEngine e, String table, int cacheRows, String mode) {
        return EmbeddingClient.open(e, table, Duration.ofSeconds(20), cacheRows, EmbeddingClient.ROW_RETRY_LIMIT_DEFAULT,
            !mode.endsWith("/read"));
    }

    static void run(int n, String transport, Body body) {
        Store store = new InMemoryStore();
        CyclicBarrier barrier = new CyclicBarrier(n);
        List<CompletableFuture<Void>> futures = new ArrayList<>();
        for (int r = 0; r < n; r++) {
            int rank = r;
            CompletableFuture<Void> f = new CompletableFuture<>();
            Thread.ofPlatform().name("rank-" + r).daemon().start(() -> {
                try (TransferEngine e = TransferEngine.create(store, rank, n, options(transport),
                    TransferSettings.defaults())) {
                    body.run(e, barrier);
                    barrier.await(30, TimeUnit.SECONDS);
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

    /** Value {@code j} of {@code row} at {@code version}: an integer below 2^23, so exact as a float. */
    static float value(long row, long version, int j) {
        long h = (row * 1_000_003L + version * 7919L + j * 31L) * 0x9E3779B97F4A7C15L;
        return (float) ((h >>> 40) & 0x7FFFFF);
    }

    static float[] row(long row, long version, int dim) {
        float[] v = new float[dim];
        for (int j = 0; j < dim; j++) {
            v[j] = value(row, version, j);
        }
        return v;
    }

    /** Null when lookup row {@code i} holds exactly the values of its row at its version, else what differs. */
    static String check(EmbeddingLookup l, int i, int dim) {
        long row = l.row(i);
        long version = l.version(i);
        for (int j = 0; j < dim; j++) {
            float want = value(row, version, j);
            float got = l.get(i, j);
            if (got != want) {
                return "row " + row + " version " + version + " value " + j + ": " + got + " != " + want;
            }
        }
        return null;
    }
}
