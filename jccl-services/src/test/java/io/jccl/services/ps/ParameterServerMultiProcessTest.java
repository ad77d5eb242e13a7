package io.jccl.services.ps;

import io.jccl.collectives.store.FileStore;
import io.jccl.common.testing.RankFutures;
import io.jccl.services.transfer.TransferEngine;
import io.jccl.services.transfer.TransferSettings;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The server in a child JVM, two workers here: killing the server is a clear error on both workers, no hang. */
class ParameterServerMultiProcessTest {
    static final ParameterServerSpec SPEC = ParameterServerSpec.synchronous("kill", 1, 2, 4096,
        OptimizerSpec.sgd(0.01f, 0.9f), 0.5f).withTimeout(Duration.ofSeconds(20));

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldFailEveryWorkerClearlyWhenTheServerIsKilled(String transport, @TempDir Path dir) throws Exception {
        String java = ProcessHandle.current().info().command().orElse("java");
        Process child = new ProcessBuilder(java, "--enable-native-access=ALL-UNNAMED", "-XX:+UseSerialGC", "-Xmx256m",
            "-cp", System.getProperty("java.class.path"), ParameterServerChild.class.getName(), dir.toString(),
            transport).redirectErrorStream(true).start();
        List<String> lines = new CopyOnWriteArrayList<>();
        Thread.ofVirtual().start(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(child.getInputStream(),
                StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null) {
                    lines.add(line);
                }
            } catch (java.io.IOException ignored) {
                // gone
            }
        });
        try (FileStore store = new FileStore(dir)) {
            CyclicBarrier trained = new CyclicBarrier(2, child::destroyForcibly); // kill once both did 3 steps
            List<CompletableFuture<Void>> futures = new ArrayList<>();
            for (int r = 1; r <= 2; r++) {
                int rank = r;
                CompletableFuture<Void> f = new CompletableFuture<>();
                Thread.ofPlatform().daemon().start(() -> {
                    try (TransferEngine engine = TransferEngine.create(store, rank, 3, Jobs.options(transport),
                        TransferSettings.defaults())) {
                        ParameterWorker worker = ParameterWorker.connect(engine, SPEC);
                        float[] p = new float[SPEC.parameterCount()];
                        float[] g = new float[SPEC.parameterCount()];
                        for (int step = 0; step < 3; step++) {
                            worker.pull(p);
                            Jobs.gradient(p, worker.worker(), step, g);
                            worker.push(g);
                        }
                        trained.await(60, TimeUnit.SECONDS);
                        ParameterServerException e = assertThrows(ParameterServerException.class, () -> {
                            for (int step = 3; step < 10_000; step++) {
                                worker.pull(p);
                                worker.push(g);
                            }
                        });
                        String m = e.getMessage();
                        System.out.println("worker " + rank + " over " + transport + ": " + m);
                        assertTrue(m.contains("server 0 (rank 0)") && (m.contains("exited") || m.contains("unreachable")
                            || m.contains("closed")), m);
                        worker.close(); // after a failure: releases its memory, does not wait
                    } catch (Throwable e) {
                        f.completeExceptionally(e);
                    }
                    f.complete(null); // after the engine closed: it writes to the store's directory as it closes
                });
                futures.add(f);
            }
            RankFutures.awaitAll(futures, 100);
        } finally {
            child.destroyForcibly();
            assertTrue(child.waitFor(30, TimeUnit.SECONDS));
        }
        assertTrue(lines.contains("READY"), lines.toString());
    }
}
