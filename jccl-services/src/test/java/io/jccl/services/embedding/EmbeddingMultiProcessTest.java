package io.jccl.services.embedding;

import io.jccl.collectives.store.FileStore;
import io.jccl.services.transfer.TransferEngine;
import io.jccl.services.transfer.TransferSettings;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The server in a child JVM ({@link EmbeddingChild}) rewriting hot rows without pause while this process looks them
 * up (no row comes back torn), then killed in the middle of lookups: they fail with the server named, none hangs.
 */
class EmbeddingMultiProcessTest {
    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldReturnOnlyWholeRowsWhileAnotherProcessWritesAndFailCleanlyWhenItDies(String transport,
                                                                                  @TempDir Path dir)
        throws Exception {
        String java = ProcessHandle.current().info().command().orElse("java");
        Process child = new ProcessBuilder(java, "--enable-native-access=ALL-UNNAMED", "-XX:+UseSerialGC", "-Xmx256m",
            "-cp", System.getProperty("java.class.path"), EmbeddingChild.class.getName(), dir.toString(), transport)
            .redirectErrorStream(true).start();
        List<String> lines = new CopyOnWriteArrayList<>();
        Thread.ofVirtual().start(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(child.getInputStream(),
                StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null) {
                    lines.add(line);
                }
            } catch (IOException ignored) {
                // gone
            }
        });
        try (FileStore store = new FileStore(dir);
             TransferEngine engine = TransferEngine.create(store, 0, 2, Tables.options(transport),
                 TransferSettings.defaults())) {
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (!lines.contains("READY")) {
                assertTrue(System.nanoTime() < until && child.isAlive(), "child never got ready: " + lines);
                Thread.sleep(10);
            }
            try (EmbeddingClient c = Tables.open(engine, "remote", 0, transport);
                 EmbeddingLookup l = c.newLookup(32)) {
                long stop = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(1500);
                long rows = 0;
                while (System.nanoTime() < stop) {
                    l.clear();
                    for (int i = 0; i < 32; i++) {
                        l.add(i % 8);
                    }
                    assertTrue(l.execute(), () -> l.error(0));
                    for (int i = 0; i < 32; i++) {
                        String bad = Tables.check(l, i, 128);
                        assertNull(bad, bad);
                    }
                    rows += 32;
                }
                System.out.println(transport + " across processes: " + rows + " rows checked, " + c.tornReads()
                    + " re-read");
                Thread.ofVirtual().start(child::destroyForcibly);
                String error = null;
                for (int round = 0; round < 1_000_000 && error == null; round++) {
                    l.clear();
                    for (int i = 0; i < 32; i++) {
                        l.add(i);
                    }
                    if (!l.execute()) {
                        error = l.error(0) != null ? l.error(0) : l.error(31);
                    }
                    if ((round & 63) == 0) {
                        Thread.sleep(1); // a dead server's pages stay mapped: the probe (1 ms) must come round
                    }
                }
                assertTrue(error != null && error.contains("rank 1"), "error: " + error);
                l.clear();
                l.add(3);
                assertFalse(l.execute(), "a later lookup fails too");
                assertTrue(l.error(0).contains("rank 1"), l.error(0));
            }
        } finally {
            child.destroyForcibly();
            child.waitFor(30, TimeUnit.SECONDS);
        }
    }
}
