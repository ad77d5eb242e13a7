package io.jccl.tools.colltests;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * Runs a launcher (mpirun, torchrun) to its end for the system tests: collects its output on a reader thread, so a
 * launcher that hangs fails the test after the deadline (with what it printed so far) instead of blocking the
 * reader forever; prints the output and requires exit status 0.
 */
final class LauncherRun {
    private LauncherRun() {
    }

    static String run(ProcessBuilder builder, long timeoutSeconds, String what) throws IOException,
        InterruptedException {
        Process process = builder.redirectErrorStream(true).start();
        ByteArrayOutputStream output = new ByteArrayOutputStream();
        Thread reader = Thread.ofPlatform().daemon().start(() -> copy(process.getInputStream(), output));
        try {
            if (!process.waitFor(timeoutSeconds, TimeUnit.SECONDS)) {
                process.descendants().forEach(ProcessHandle::destroyForcibly);
                process.destroyForcibly();
                reader.join(5_000);
                fail(what + " did not finish within " + timeoutSeconds + " s; it printed:\n" + text(output));
            }
            reader.join(10_000);
        } finally {
            process.descendants().forEach(ProcessHandle::destroyForcibly);
            process.destroyForcibly();
        }
        String text = text(output);
        System.out.print(text);
        assertEquals(0, process.exitValue(), text);
        return text;
    }

    private static void copy(InputStream in, ByteArrayOutputStream out) {
        byte[] buffer = new byte[8192];
        try (in) {
            for (int n; (n = in.read(buffer)) >= 0; ) {
                synchronized (out) {
                    out.write(buffer, 0, n);
                }
            }
        } catch (IOException closed) {
            // the process was destroyed: what arrived is kept
        }
    }

    private static String text(ByteArrayOutputStream out) {
        synchronized (out) {
            return out.toString(StandardCharsets.UTF_8);
        }
    }
}
