package io.jccl.common.testing;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;

/**
 * A child JVM for multi-process tests: this JVM's java and class path, JCCL's native access, a small serial heap,
 * a main class and its arguments; every line it prints (stdout and stderr) is kept in {@link #lines()} by a reader
 * thread, so a test can wait for a line the child prints when it reaches a point ("READY ...") and kill it there.
 * Closing kills it (SIGKILL), so a failed test leaves no process behind.
 */
public final class ChildJvm implements AutoCloseable {
    private final Process process;
    private final List<String> lines = new CopyOnWriteArrayList<>();

    private ChildJvm(Process process) {
        this.process = process;
        Thread.ofVirtual().start(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(process.getInputStream(),
                StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null) {
                    lines.add(line);
                }
            } catch (IOException ignored) {
                // the child is gone: what it printed is kept
            }
        });
    }

    /** Starts {@code mainClass} with {@code args} and the default options ({@code -Xmx256m}, serial GC). */
    public static ChildJvm start(Class<?> mainClass, String... args) throws IOException {
        return start(List.of(), mainClass, args);
    }

    /** Starts {@code mainClass} with {@code args}, adding {@code jvmOptions} after the default options. */
    public static ChildJvm start(List<String> jvmOptions, Class<?> mainClass, String... args) throws IOException {
        List<String> command = new ArrayList<>(List.of(ProcessHandle.current().info().command().orElse("java"),
            "--enable-native-access=ALL-UNNAMED", "-XX:+UseSerialGC", "-Xmx256m"));
        command.addAll(jvmOptions);
        command.addAll(List.of("-cp", System.getProperty("java.class.path"), mainClass.getName()));
        command.addAll(List.of(args));
        return new ChildJvm(new ProcessBuilder(command).redirectErrorStream(true).start());
    }

    /** The child process. */
    public Process process() {
        return process;
    }

    /** What it printed so far, line by line (a live, thread-safe view). */
    public List<String> lines() {
        return lines;
    }

    /**
     * Waits until the child printed a line matching {@code wanted} and returns it; fails (an AssertionError with
     * everything it printed) when it exits first or {@code timeoutSeconds} pass.
     */
    public String awaitLine(Predicate<String> wanted, String what, long timeoutSeconds) throws InterruptedException {
        long untilNs = System.nanoTime() + TimeUnit.SECONDS.toNanos(timeoutSeconds);
        while (true) {
            for (String line : lines) {
                if (wanted.test(line)) {
                    return line;
                }
            }
            if (!process.isAlive()) {
                // The reader may still be draining the last lines: one more look after it had a moment.
                Thread.sleep(50);
                for (String line : lines) {
                    if (wanted.test(line)) {
                        return line;
                    }
                }
                throw new AssertionError("the child exited (status " + process.exitValue() + ") before printing "
                    + what + ": " + lines);
            }
            if (System.nanoTime() - untilNs >= 0) {
                throw new AssertionError("the child never printed " + what + " within " + timeoutSeconds + " s: "
                    + lines);
            }
            Thread.sleep(10);
        }
    }

    /** Waits for the line {@code line} exactly (60 s at most). */
    public void awaitLine(String line) throws InterruptedException {
        awaitLine(line::equals, line, 60);
    }

    /** Kills it (SIGKILL) and waits until it is gone (30 s at most). */
    public void kill() throws InterruptedException {
        process.destroyForcibly();
        if (!process.waitFor(30, TimeUnit.SECONDS)) {
            throw new AssertionError("the child survived SIGKILL for 30 s");
        }
    }

    @Override
    public void close() {
        process.destroyForcibly();
    }
}
