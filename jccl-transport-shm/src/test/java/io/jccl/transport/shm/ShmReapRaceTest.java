package io.jccl.transport.shm;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import static io.jccl.transport.shm.ShmTwoProcessTest.expectLine;
import static io.jccl.transport.shm.ShmTwoProcessTest.spawn;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Reapers never take the files of a process that is creating them: not its lock file between creation and locking
 * (the window {@link OwnerLock}'s creation closes, held open here by a pause), not its data files, which exist
 * only once its lock is held. Child processes (in their own PID namespace where possible) create and free files
 * while this process reaps in a loop.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class ShmReapRaceTest {
    private static final int CHILDREN = 4;

    @Test
    void shouldNeverReapTheFilesOfAProcessThatIsCreatingThem() throws Exception {
        AtomicBoolean stop = new AtomicBoolean();
        AtomicLong reaps = new AtomicLong();
        Thread reaper = new Thread(() -> {
            while (!stop.get()) {
                ShmFiles.reap();
                reaps.incrementAndGet();
            }
        }, "test-reaper");
        reaper.start();
        int maxAttempts = 0;
        try {
            List<String> prefix = PidNamespaces.available() ? PidNamespaces.prefix() : List.of();
            for (int i = 0; i < CHILDREN; i++) {
                Process child = spawn(prefix, ShmReapRaceMain.class.getName(), "50", "300");
                try {
                    BufferedReader out = new BufferedReader(new InputStreamReader(child.getInputStream(),
                        StandardCharsets.UTF_8));
                    int attempts = Integer.parseInt(expectLine(out, "ATTEMPTS ").substring(9).trim());
                    maxAttempts = Math.max(maxAttempts, attempts);
                    String verdict = expectLine(out, "");
                    while (!verdict.startsWith("OK") && !verdict.startsWith("MISSING")) {
                        verdict = expectLine(out, "");
                    }
                    assertTrue(verdict.startsWith("OK "), "child " + i + ": " + verdict);
                    assertTrue(child.waitFor(30, TimeUnit.SECONDS));
                    assertEquals(0, child.exitValue());
                } finally {
                    child.destroyForcibly();
                }
            }
        } finally {
            stop.set(true);
            reaper.join();
        }
        System.out.printf("%d children, %d reaps meanwhile, creation took up to %d attempts%n", CHILDREN,
            reaps.get(), maxAttempts);
        // A reaper took a fresh, not yet locked lock file during the pause at least once: the window was exercised.
        assertTrue(maxAttempts >= 2, "the reaper never met a lock file in its creation window");
    }
}
