package io.jccl.tools.perftest;

import io.jccl.tools.JcclRuntime;
import io.jccl.verbs.Device;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * {@code jccl perf TEST --local}: starts the server as a second JVM on this host (same device, a free out-of-band
 * port) and runs the client in this JVM, so the two sides are separate processes as with two perftest commands.
 * Only the client's output is shown; the server's output is shown when something fails.
 */
final class LocalPerf {
    private static final int OUTPUT_LIMIT = 64 * 1024;

    private LocalPerf() {
    }

    static int run(PerfCommand command, PerfTest test) throws Exception {
        Device device = command.resolveDevice();
        int port = JcclRuntime.freePort();
        List<String> args = new ArrayList<>(List.of("perf", test.id(), "-d", device.name(), "-p",
            String.valueOf(port), "-r", String.valueOf(command.rxDepth), "--accept-timeout", "120000"));
        if (command.events) {
            args.add("-e");
        }
        if (command.localCpus != null) {
            if (command.localCpus.size() != 2) {
                throw new PerfException("--cpus takes two CPUs: SERVER,CLIENT");
            }
            args.add("--pin-cpu");
            args.add(String.valueOf(command.localCpus.get(0)));
            command.pinCpu = command.localCpus.get(1);
        }
        List<String> jvmOptions = new ArrayList<>();
        for (Map.Entry<Object, Object> e : System.getProperties().entrySet()) {
            String key = String.valueOf(e.getKey());
            if (key.startsWith("jccl.") && !key.equals("jccl.stderr.tty")) {
                jvmOptions.add("-D" + key + "=" + e.getValue());
            }
        }
        List<String> javaCommand = JcclRuntime.javaCommand(jvmOptions, "io.jccl.tools.Main", args);
        Process server = new ProcessBuilder(javaCommand).redirectErrorStream(true).start();
        StringBuilder serverOutput = new StringBuilder();
        Thread drain = Thread.ofPlatform().daemon().name("perf-server-output").start(() -> {
            try (BufferedReader reader = new BufferedReader(
                new InputStreamReader(server.getInputStream(), StandardCharsets.UTF_8))) {
                String line;
                while ((line = reader.readLine()) != null) {
                    synchronized (serverOutput) {
                        if (serverOutput.length() < OUTPUT_LIMIT
                            && !line.startsWith("WARNING: Using incubator modules")) {
                            serverOutput.append(line).append('\n');
                        }
                    }
                }
            } catch (IOException ignored) {
                // the server exited
            }
        });
        command.host = "127.0.0.1";
        command.device = device.name();
        command.port = port;
        if (command.connectTimeoutMs == null) {
            command.connectTimeoutMs = 60_000;
        }
        command.local = false;
        command.connectGiveUp = () -> !server.isAlive();
        int clientStatus;
        try {
            clientStatus = command.call();
        } catch (Exception e) {
            if (!server.waitFor(5, TimeUnit.SECONDS)) {
                server.destroyForcibly();
            }
            drain.join(1000);
            command.err.println("jccl perf --local: client failed: " + e.getMessage());
            command.err.print(indent("server output", serverOutput));
            throw e;
        }
        if (!server.waitFor(30, TimeUnit.SECONDS)) {
            server.destroyForcibly();
            command.err.println("jccl perf --local: the server did not exit within 30 s after the run; killed it");
            return clientStatus == 0 ? 1 : clientStatus;
        }
        drain.join(1000);
        int serverStatus = server.exitValue();
        if (serverStatus != 0) {
            command.err.println("jccl perf --local: the server exited with status " + serverStatus);
            command.err.print(indent("server output", serverOutput));
            return clientStatus == 0 ? serverStatus : clientStatus;
        }
        return clientStatus;
    }

    private static String indent(String title, StringBuilder text) {
        StringBuilder out = new StringBuilder("--- " + title + " ---\n");
        synchronized (text) {
            for (String line : text.toString().split("\n")) {
                out.append("  ").append(line).append('\n');
            }
        }
        return out.toString();
    }
}
