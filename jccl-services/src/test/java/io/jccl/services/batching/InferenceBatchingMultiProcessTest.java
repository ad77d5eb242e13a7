package io.jccl.services.batching;

import io.jccl.collectives.store.FileStore;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.foreign.Arena;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** A consumer in a child JVM killed while this producer waits: a clear error, soon, not a hang. */
class InferenceBatchingMultiProcessTest {
    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldFailWaitsWhenTheConsumerProcessDies(String device, @TempDir Path dir) throws Exception {
        String java = ProcessHandle.current().info().command().orElse("java");
        Process child = new ProcessBuilder(java, "--enable-native-access=ALL-UNNAMED", "-XX:+UseSerialGC",
            "-Xmx256m", "-cp", System.getProperty("java.class.path"), BatchingChild.class.getName(), dir.toString(),
            device).redirectErrorStream(true).start();
        try (FileStore store = new FileStore(dir); Arena arena = Arena.ofConfined()) {
            BufferedReader out = new BufferedReader(new InputStreamReader(child.getInputStream(),
                StandardCharsets.UTF_8));
            String line;
            while ((line = out.readLine()) != null && !line.startsWith("READY")) {
                // the child's start-up lines
            }
            assertEquals("READY " + device, line);
            try (InferenceClient client = InferenceClient.connect(store, "child",
                InferenceBatchingTest.options(device))) {
                client.submit(arena.allocate(4));
                client.submit(arena.allocate(4));
                child.destroyForcibly();
                assertTrue(child.waitFor(30, TimeUnit.SECONDS));
                // Thrown, not null: found out before the 20 s wait ended.
                BatchingException e = assertThrows(BatchingException.class,
                    () -> client.poll(TimeUnit.SECONDS.toNanos(20)));
                assertTrue(e.getMessage().contains("inference server 'child' (pid " + child.pid() + ")"),
                    e.getMessage());
                assertTrue(e.getMessage().contains("exited") || e.getMessage().contains("unreachable"),
                    e.getMessage());
                BatchingException again = assertThrows(BatchingException.class, () -> client.submit(
                    arena.allocate(4)));
                assertEquals(e.getMessage(), again.getMessage(), "the client stays failed with the same reason");
            }
        } finally {
            child.destroyForcibly();
        }
    }
}
