package io.jccl.examples;

import io.jccl.collectives.CommunicatorOptions;
import io.jccl.collectives.store.InMemoryStore;
import io.jccl.collectives.store.Store;
import io.jccl.services.embedding.EmbeddingClient;
import io.jccl.services.embedding.EmbeddingLookup;
import io.jccl.services.embedding.EmbeddingServer;
import io.jccl.services.transfer.TransferEngine;
import io.jccl.services.transfer.TransferSettings;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;

/**
 * The embedding cache (jccl-services): rank 0 serves a table of embeddings; rank 1 looks a batch of rows up with
 * one-sided READs (rank 0's CPU takes no part), checks every value, looks the same rows up again (the cache answers),
 * then rank 0 updates a row: its invalidation reaches rank 1, whose cache drops the row, and the next lookup reads
 * the new version.
 *
 * <pre>
 * ./jccl example EmbeddingCacheExample [--device shm0|tcp0] [--rows 100000] [--dim 64] [--batch 256]
 * </pre>
 */
public final class EmbeddingCacheExample {
    private EmbeddingCacheExample() {
    }

    /** Entry point. */
    public static void main(String[] args) throws Exception {
        System.out.println(runBoth(ExampleSupport.option(args, "--device", "shm0"),
            Integer.parseInt(ExampleSupport.option(args, "--rows", "100000")),
            Integer.parseInt(ExampleSupport.option(args, "--dim", "64")),
            Integer.parseInt(ExampleSupport.option(args, "--batch", "256"))));
    }

    /** Value j of a row at a version: what the checks compare with. */
    static float value(long row, long version, int j) {
        return row * 0.5f + version * 1000 + j;
    }

    /** Runs both ranks as threads of this process over {@code device}; returns rank 1's report. */
    public static String runBoth(String device, int rows, int dim, int batch) throws Exception {
        Store store = new InMemoryStore();
        CommunicatorOptions options = CommunicatorOptions.fromEnvironment().withTransports(device)
            .withTimeout(Duration.ofSeconds(60));
        CyclicBarrier barrier = new CyclicBarrier(2);
        CompletableFuture<String> server = new CompletableFuture<>();
        Thread.ofPlatform().daemon().name("rank-0").start(() -> {
            try (TransferEngine engine = TransferEngine.create(store, 0, 2, options, TransferSettings.defaults());
                 EmbeddingServer table = EmbeddingServer.create(engine, "items", rows, dim, (r, out) -> {
                     for (int j = 0; j < out.length; j++) {
                         out[j] = value(r, 2, j);
                     }
                 })) {
                barrier.await(60, TimeUnit.SECONDS); // rank 1 looked up and cached its batch
                float[] fresh = new float[dim];
                for (int j = 0; j < dim; j++) {
                    fresh[j] = value(7, 4, j);
                }
                long version = table.update(7, fresh);
                barrier.await(60, TimeUnit.SECONDS); // rank 1 has seen the new version
                barrier.await(60, TimeUnit.SECONDS);
                server.complete("rank 0: served " + rows + " x " + dim + " floats, updated row 7 to version "
                    + version + ", " + table.invalidationsSent() + " invalidation(s) delivered");
            } catch (Exception e) {
                barrier.reset();
                server.completeExceptionally(e);
            }
        });
        String client;
        try (TransferEngine engine = TransferEngine.create(store, 1, 2, options, TransferSettings.defaults());
             EmbeddingClient table = EmbeddingClient.open(engine, "items", Duration.ofSeconds(60), 4096);
             EmbeddingLookup lookup = table.newLookup(batch)) {
            for (int i = 0; i < batch; i++) {
                lookup.add(7L + (long) i * (rows / batch));
            }
            long start = System.nanoTime();
            boolean ok = lookup.execute();
            double coldUs = (System.nanoTime() - start) / 1e3;
            int wrong = check(lookup, dim);
            lookup.clear();
            for (int i = 0; i < batch; i++) {
                lookup.add(7L + (long) i * (rows / batch));
            }
            start = System.nanoTime();
            ok &= lookup.execute();
            double warmUs = (System.nanoTime() - start) / 1e3;
            wrong += check(lookup, dim);
            long hits = table.cacheHits();
            barrier.await(60, TimeUnit.SECONDS);
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (table.isCached(7) && System.nanoTime() < until) {
                table.processInvalidations();
                Thread.sleep(1);
            }
            boolean dropped = !table.isCached(7);
            lookup.clear();
            lookup.add(7);
            ok &= lookup.execute();
            long version = lookup.version(0);
            wrong += check(lookup, dim);
            barrier.await(60, TimeUnit.SECONDS);
            barrier.await(60, TimeUnit.SECONDS);
            client = String.format("rank 1: %d rows over %s: first lookup %.0f us (cold; %s), again %.0f us "
                    + "(%d cache hits); %s; row 7 %s, read again at version %d; %s", batch, engine.deviceFor(0),
                coldUs, table.isDirect() ? "loads from the mapped table" : "one-sided READs", warmUs, hits, ok ? "all succeeded" : "FAILED", dropped ? "invalidated" : "NOT invalidated",
                version, wrong == 0 ? "every value checked" : wrong + " WRONG values");
        }
        return server.get(60, TimeUnit.SECONDS) + "\n" + client;
    }

    private static int check(EmbeddingLookup lookup, int dim) {
        int wrong = 0;
        for (int i = 0; i < lookup.size(); i++) {
            for (int j = 0; j < dim; j++) {
                if (lookup.get(i, j) != value(lookup.row(i), lookup.version(i), j)) {
                    wrong++;
                }
            }
        }
        return wrong;
    }
}
