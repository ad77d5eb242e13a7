package io.jccl.transport.shm;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.TimeUnit;

/**
 * Child JVMs in a PID namespace of their own, as in containers that share {@code /dev/shm} but not their pids
 * (Kubernetes pods with a memory emptyDir, {@code docker --ipc}): {@code unshare --pid --fork --mount-proc}, which
 * needs root (or user namespaces). The child's own {@code /proc} shows its own pids, so the JVM is pid 1 there
 * and its files carry that pid. Tests skip (assumptions) where unshare cannot do it.
 */
final class PidNamespaces {
    private static Boolean available;

    private PidNamespaces() {
    }

    /** Whether {@code unshare --pid --fork --mount-proc} works here (tried once). */
    static synchronized boolean available() {
        if (available == null) {
            boolean ok;
            try {
                Process p = new ProcessBuilder("unshare", "--pid", "--fork", "--mount-proc", "true")
                    .redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
                ok = p.waitFor(10, TimeUnit.SECONDS) && p.exitValue() == 0;
                p.destroyForcibly();
            } catch (IOException | RuntimeException e) {
                ok = false;
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                ok = false;
            }
            available = ok;
        }
        return available;
    }

    /** The command prefix that runs what follows in a new PID namespace (killed with unshare). */
    static List<String> prefix() {
        return new ArrayList<>(List.of("unshare", "--pid", "--fork", "--mount-proc", "--kill-child"));
    }

    /** The JVM that {@code unshare} started (its pid in this namespace), waiting up to 10 s for it to appear. */
    static ProcessHandle jvmOf(Process unshare) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (System.nanoTime() - deadline < 0) {
            Optional<ProcessHandle> java = unshare.toHandle().descendants()
                .filter(h -> h.info().command().map(c -> c.endsWith("/java")).orElse(false)).findFirst();
            if (java.isPresent()) {
                return java.get();
            }
            Thread.sleep(5);
        }
        throw new AssertionError("no JVM under unshare " + unshare.pid());
    }
}
