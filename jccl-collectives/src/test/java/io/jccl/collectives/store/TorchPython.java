package io.jccl.collectives.store;

import org.junit.jupiter.api.Assumptions;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * A Python interpreter with PyTorch, for tests against torch's own TCPStore: {@code JCCL_TEST_PYTHON}, else
 * {@code python3} on the PATH, else {@code /usr/bin/python3} (Debian's python3-torch installs there, which a pyenv
 * {@code python3} on the PATH does not see). Tests skip, saying why, when none imports torch
 * ({@code scripts/install-deps.sh} installs python3-torch).
 */
public final class TorchPython {
    private static String found;
    private static boolean searched;

    private TorchPython() {
    }

    /** The interpreter that imports torch, or null. */
    public static synchronized String interpreter() {
        if (!searched) {
            searched = true;
            List<String> candidates = new ArrayList<>();
            String configured = System.getenv("JCCL_TEST_PYTHON");
            if (configured != null && !configured.isBlank()) {
                candidates.add(configured);
            }
            candidates.add("python3");
            candidates.add("/usr/bin/python3");
            for (String c : candidates) {
                try {
                    Process p = new ProcessBuilder(c, "-c", "import torch.distributed").redirectErrorStream(true)
                        .start();
                    p.getInputStream().readAllBytes();
                    if (p.waitFor(60, TimeUnit.SECONDS) && p.exitValue() == 0) {
                        found = c;
                        break;
                    }
                } catch (IOException e) {
                    // not installed there
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    break;
                }
            }
        }
        return found;
    }

    /** Skips the calling test when no Python imports torch. */
    public static String require() {
        String py = interpreter();
        Assumptions.assumeTrue(py != null, "skipped: no Python with PyTorch (python3 -c \"import torch\" fails for "
            + "JCCL_TEST_PYTHON, python3 and /usr/bin/python3); scripts/install-deps.sh installs python3-torch");
        return py;
    }

    /**
     * A Python child running {@code torch.distributed.TCPStore(host, 0, worldSize, is_master=True)}; it prints the
     * port and serves until its standard input closes ({@link #close}).
     */
    public static final class Server implements AutoCloseable {
        private final Process process;
        private final int port;

        /** Starts the server on a free port of 127.0.0.1. */
        public Server(int worldSize) throws IOException {
            String script = String.join("\n",
                "import sys, datetime, torch.distributed as d",
                "s = d.TCPStore('127.0.0.1', 0, " + worldSize + ", True, timeout=datetime.timedelta(seconds=120),"
                    + " wait_for_workers=False)",
                "print(s.port, flush=True)",
                "sys.stdin.read()");
            process = new ProcessBuilder(require(), "-c", script).redirectError(ProcessBuilder.Redirect.INHERIT)
                .start();
            String line = new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))
                .readLine();
            if (line == null) {
                process.destroyForcibly();
                throw new IOException("the Python TCPStore server exited before printing its port");
            }
            port = Integer.parseInt(line.trim());
        }

        /** The port it serves. */
        public int port() {
            return port;
        }

        @Override
        public void close() throws IOException, InterruptedException {
            try (OutputStream in = process.getOutputStream()) {
                in.flush();
            }
            if (!process.waitFor(30, TimeUnit.SECONDS)) {
                process.destroyForcibly();
            }
        }
    }

    /** Runs a Python script to its end and returns what it printed (stdout and stderr); fails on a non-zero exit. */
    public static String run(String script) throws IOException, InterruptedException {
        Process p = new ProcessBuilder(require(), "-c", script).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (!p.waitFor(120, TimeUnit.SECONDS) || p.exitValue() != 0) {
            p.destroyForcibly();
            throw new AssertionError("python failed: " + out);
        }
        return out;
    }
}
