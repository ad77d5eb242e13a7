package io.jccl.services.rendezvous;

import io.jccl.collectives.store.FileStore;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.file.Path;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Ranks 0 and 1 here, rank 2 in a child JVM that is killed: the survivors' waits fail naming it. */
class RendezvousMultiProcessTest {
    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldFailWaitsNamingARankWhoseProcessDied(String device, @TempDir Path dir) throws Exception {
        String java = ProcessHandle.current().info().command().orElse("java");
        Process child = new ProcessBuilder(java, "--enable-native-access=ALL-UNNAMED", "-XX:+UseSerialGC",
            "-Xmx128m", "-cp", System.getProperty("java.class.path"), RendezvousChild.class.getName(), dir.toString(),
            device, "2", "3").redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
        try (FileStore store = new FileStore(dir)) {
            Ranks.run(store, 2, new int[] {0, 1}, 3, Ranks.options(device), (r, barrier) -> {
                r.publish(1);
                r.await(1, TimeUnit.SECONDS.toNanos(30));
                barrier.await(30, TimeUnit.SECONDS);
                if (r.rank() == 0) {
                    child.destroyForcibly();
                    child.waitFor(30, TimeUnit.SECONDS);
                }
                r.publish(2);
                // Thrown well before the 30 s deadline: the hub finds the death (process gone, or link failure)
                // and tells rank 1.
                RendezvousException e = assertThrows(RendezvousException.class,
                    () -> r.await(2, TimeUnit.SECONDS.toNanos(30)));
                // Rank 0's own readiness may not have reached rank 1 yet when the death does: it may be listed.
                assertTrue(e.getMessage().contains("cannot reach 3 ready ranks: rank 2 ")
                    && e.getMessage().matches("(?s).*not ready: ranks (0, )?2"), e.getMessage());
            });
        } finally {
            child.destroyForcibly();
        }
    }
}
