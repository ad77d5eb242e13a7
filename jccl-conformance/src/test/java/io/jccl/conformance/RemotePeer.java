package io.jccl.conformance;

import io.jccl.verbs.Endpoint;
import io.jccl.verbs.QueuePairState;
import io.jccl.verbs.VerbsException;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.UncheckedIOException;
import java.io.Writer;
import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

/**
 * A peer in a child JVM: launches {@link PeerProcess} with this JVM's class path and speaks its line protocol
 * over the child's stdin/stdout. Every answer is awaited with a deadline; a missed deadline or a dead child kills
 * the process and fails the call with the tail of the child's stderr, so a broken provider cannot hang a test.
 */
public final class RemotePeer implements PeerSide {
    private static final long DEFAULT_TIMEOUT_NS = TimeUnit.SECONDS.toNanos(30);
    private static final String EOF = "\u0000eof";
    private static final java.util.Set<Process> LIVE = java.util.concurrent.ConcurrentHashMap.newKeySet();

    static {
        // Belt and braces: children also exit when their stdin closes, but a kill here is immediate.
        Runtime.getRuntime().addShutdownHook(new Thread(() -> LIVE.forEach(Process::destroyForcibly),
            "conformance-peer-reaper"));
    }

    private final Process process;
    private final Writer commands;
    private final LinkedBlockingQueue<String> answers = new LinkedBlockingQueue<>();
    private final Path stderrLog;
    private final String description;
    private long nextId = 1;
    private volatile boolean broken;

    private RemotePeer(Process process, Path stderrLog) {
        this.process = process;
        this.stderrLog = stderrLog;
        this.description = "peer JVM pid " + process.pid();
        commands = new OutputStreamWriter(process.getOutputStream(), StandardCharsets.UTF_8);
        Thread.ofPlatform().daemon().name("peer-reader-" + process.pid()).start(() -> {
            try (BufferedReader in = new BufferedReader(
                new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null) {
                    if (line.startsWith("@@ ")) {
                        answers.add(line.substring(3));
                    }
                }
            } catch (IOException ignored) {
                // the process died; the EOF marker below wakes the caller
            } finally {
                answers.add(EOF);
            }
        });
    }

    /**
     * Starts a peer JVM on {@code deviceName} and waits until it opened the device.
     *
     * @param extraJvmArguments arguments placed before the main class (the provider's
     *     {@code peerJvmArguments()}), after the flags inherited from this JVM
     */
    public static RemotePeer launch(String deviceName, List<String> extraJvmArguments) {
        return launch(deviceName, List.of(), extraJvmArguments);
    }

    /**
     * Starts a peer JVM through {@code commandPrefix} (for example {@code ip netns exec h2}, which execs the JVM in
     * another network namespace); otherwise as {@link #launch(String, List)}.
     */
    public static RemotePeer launch(String deviceName, List<String> commandPrefix, List<String> extraJvmArguments) {
        List<String> command = new ArrayList<>(commandPrefix);
        command.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        command.addAll(inheritedJvmArguments());
        command.addAll(extraJvmArguments);
        command.add("-cp");
        command.add(System.getProperty("java.class.path"));
        command.add(PeerProcess.class.getName());
        command.add(deviceName);
        Path log;
        Process process;
        try {
            log = Files.createTempFile("jccl-conformance-peer-", ".log");
            process = new ProcessBuilder(command).redirectError(log.toFile()).start();
        } catch (IOException e) {
            throw new UncheckedIOException("cannot start peer JVM: " + command, e);
        }
        LIVE.add(process);
        RemotePeer peer = new RemotePeer(process, log);
        try {
            String ready = peer.await(0, DEFAULT_TIMEOUT_NS);
            if (!ready.equals("0 OK ready")) {
                String[] t = ready.split(" ", -1);
                String why = t.length >= 4 && t[1].equals("ERR")
                    ? t[2] + ": " + new String(PeerProcess.unb64(t[3]), StandardCharsets.UTF_8) : ready;
                throw peer.failure("peer JVM did not start: " + why, null);
            }
        } catch (RuntimeException e) {
            peer.kill();
            throw e;
        }
        return peer;
    }

    /**
     * The flags of this JVM that a provider's peer needs too: native access, added modules, heap-independent
     * settings and {@code -Djccl.*} properties. A fast-starting configuration is added (serial GC, C1 only).
     */
    private static List<String> inheritedJvmArguments() {
        List<String> out = new ArrayList<>(List.of("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss1m"));
        List<String> input = ManagementFactory.getRuntimeMXBean().getInputArguments();
        for (int i = 0; i < input.size(); i++) {
            String arg = input.get(i);
            if (arg.startsWith("--enable-native-access") || arg.startsWith("--add-modules")
                || arg.startsWith("--add-opens") || arg.startsWith("--add-exports")
                || arg.startsWith("--enable-preview") || arg.startsWith("-Djccl.")) {
                out.add(arg);
                boolean separateValue = !arg.contains("=") && !arg.startsWith("-D") && !arg.equals("--enable-preview");
                if (separateValue && i + 1 < input.size()) {
                    out.add(input.get(++i));
                }
            }
        }
        if (out.stream().noneMatch(a -> a.startsWith("--enable-native-access"))) {
            out.add("--enable-native-access=ALL-UNNAMED");
        }
        return out;
    }

    @Override
    public String description() {
        return description;
    }

    /** Whether the child is alive and answered every call so far. */
    public boolean isHealthy() {
        return !broken && process.isAlive();
    }

    private synchronized String[] call(long timeoutNs, Object... parts) {
        if (broken) {
            throw new IllegalStateException(description + " is no longer usable (an earlier call failed)");
        }
        long id = nextId++;
        String line = id + " " + Arrays.stream(parts).map(String::valueOf).collect(Collectors.joining(" "));
        try {
            commands.write(line);
            commands.write('\n');
            commands.flush();
        } catch (IOException e) {
            throw failure("cannot send '" + abbreviate(line) + "'", e);
        }
        String answer = await(id, timeoutNs);
        String[] t = answer.split(" ", -1);
        if (t[1].equals("OK")) {
            return Arrays.copyOfRange(t, 2, t.length);
        }
        String message = new String(PeerProcess.unb64(t[3]), StandardCharsets.UTF_8);
        String text = description + ": " + parts[0] + " failed: " + message;
        try {
            throw new VerbsException(VerbsException.Reason.valueOf(t[2]), text);
        } catch (IllegalArgumentException notAReason) {
            throw new IllegalStateException(t[2] + ": " + text);
        }
    }

    private String await(long id, long timeoutNs) {
        long deadline = System.nanoTime() + timeoutNs;
        while (true) {
            String answer;
            try {
                answer = answers.poll(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw failure("interrupted waiting for answer " + id, e);
            }
            if (answer == null) {
                throw failure("no answer to request " + id + " within "
                    + TimeUnit.NANOSECONDS.toMillis(timeoutNs) + " ms", null);
            }
            if (answer.equals(EOF)) {
                answers.add(EOF);
                throw failure("peer JVM exited (status " + exitStatus() + ") before answering request " + id, null);
            }
            if (answer.startsWith(id + " ")) {
                return answer;
            }
            // an answer to an earlier request that timed out cannot happen (we kill on timeout); skip stray lines
        }
    }

    private String exitStatus() {
        try {
            return process.waitFor(1, TimeUnit.SECONDS) ? Integer.toString(process.exitValue()) : "still running";
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return "unknown";
        }
    }

    private IllegalStateException failure(String what, Throwable cause) {
        broken = true;
        kill();
        return new IllegalStateException(description + ": " + what + "\n--- peer stderr (tail) ---\n"
            + stderrTail(), cause);
    }

    private String stderrTail() {
        try {
            String text = Files.readString(stderrLog, StandardCharsets.UTF_8);
            return text.length() > 6000 ? "..." + text.substring(text.length() - 6000) : text;
        } catch (IOException | RuntimeException e) {
            return "(unreadable: " + e + ")";
        }
    }

    private static String abbreviate(String line) {
        return line.length() > 200 ? line.substring(0, 200) + "..." : line;
    }

    private void kill() {
        LIVE.remove(process);
        process.destroyForcibly();
        try {
            process.waitFor(5, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    @Override
    public long processId() {
        return Long.parseLong(call(DEFAULT_TIMEOUT_NS, "pid")[0]);
    }

    @Override
    public java.util.Map<io.jccl.verbs.Counter, Long> counters() {
        String token = call(DEFAULT_TIMEOUT_NS, "counters")[0];
        java.util.Map<io.jccl.verbs.Counter, Long> out = new java.util.EnumMap<>(io.jccl.verbs.Counter.class);
        if (!token.equals("-")) {
            for (String entry : token.split(",")) {
                String[] kv = entry.split("=");
                out.put(io.jccl.verbs.Counter.valueOf(kv[0]), Long.parseLong(kv[1]));
            }
        }
        return out;
    }

    /** Kills the child process at once, as a crash would (for tests of a peer that dies). */
    public void killProcess() {
        broken = true;
        kill();
    }

    @Override
    public PeerQueuePair createQueuePair(QueuePairSpec spec) {
        String[] r = call(DEFAULT_TIMEOUT_NS, "createQp", spec.encode());
        return new PeerQueuePair(Integer.parseInt(r[0]), Endpoint.decode(r[1]));
    }

    @Override
    public void connect(int queuePairNumber, Endpoint remote, ConnectionSpec spec) {
        call(DEFAULT_TIMEOUT_NS, "connect", queuePairNumber, remote.encode(), spec.encode());
    }

    @Override
    public QueuePairState state(int queuePairNumber) {
        return QueuePairState.valueOf(call(DEFAULT_TIMEOUT_NS, "state", queuePairNumber)[0]);
    }

    @Override
    public void modifyToError(int queuePairNumber) {
        call(DEFAULT_TIMEOUT_NS, "toError", queuePairNumber);
    }

    @Override
    public void destroyQueuePair(int queuePairNumber) {
        call(DEFAULT_TIMEOUT_NS, "destroyQp", queuePairNumber);
    }

    @Override
    public PeerRegion allocate(long length, int access) {
        String[] r = call(DEFAULT_TIMEOUT_NS, "alloc", length, access);
        return new PeerRegion(Integer.parseInt(r[0]), Long.parseLong(r[1]), Long.parseLong(r[2]),
            Integer.parseInt(r[3]), Integer.parseInt(r[4]));
    }

    @Override
    public PeerRegion allocateInOtherDomain(long length, int access) {
        String[] r = call(DEFAULT_TIMEOUT_NS, "alloc", length, access, "other");
        return new PeerRegion(Integer.parseInt(r[0]), Long.parseLong(r[1]), Long.parseLong(r[2]),
            Integer.parseInt(r[3]), Integer.parseInt(r[4]));
    }

    @Override
    public PeerRegion registerCallerOwned(long length, int access) {
        String[] r = call(DEFAULT_TIMEOUT_NS, "alloc", length, access, "owned");
        return new PeerRegion(Integer.parseInt(r[0]), Long.parseLong(r[1]), Long.parseLong(r[2]),
            Integer.parseInt(r[3]), Integer.parseInt(r[4]));
    }

    @Override
    public void deregister(int region) {
        call(DEFAULT_TIMEOUT_NS, "dereg", region);
    }

    @Override
    public void write(int region, long offset, byte[] data) {
        call(DEFAULT_TIMEOUT_NS, "write", region, offset, PeerProcess.b64(data));
    }

    @Override
    public byte[] read(int region, long offset, int length) {
        return PeerProcess.unb64(call(DEFAULT_TIMEOUT_NS, "read", region, offset, length)[0]);
    }

    @Override
    public void fillPattern(int region, long offset, long length, long seed) {
        call(DEFAULT_TIMEOUT_NS, "fill", region, offset, length, seed);
    }

    @Override
    public long firstPatternMismatch(int region, long offset, long length, long seed) {
        return Long.parseLong(call(DEFAULT_TIMEOUT_NS, "mismatch", region, offset, length, seed)[0]);
    }

    private static String sges(List<PeerSge> sges) {
        return sges.isEmpty() ? "-" : sges.stream().map(PeerSge::encode).collect(Collectors.joining(","));
    }

    @Override
    public void postReceive(int queuePairNumber, long wrId, List<PeerSge> sges) {
        call(DEFAULT_TIMEOUT_NS, "recv", queuePairNumber, wrId, sges(sges));
    }

    @Override
    public void postSend(int queuePairNumber, PeerSend s) {
        call(DEFAULT_TIMEOUT_NS, "send", queuePairNumber, s.wrId(), s.opcode().name(), s.flags(), s.remoteAddress(),
            s.rkey(), s.immediateData(), s.compareAdd(), s.swap(), sges(s.sges()));
    }

    @Override
    public List<Completion> poll(int queuePairNumber, int count, long timeoutNs) {
        String[] r = call(timeoutNs + DEFAULT_TIMEOUT_NS, "poll", queuePairNumber, count, timeoutNs);
        List<Completion> out = new ArrayList<>();
        if (!r[0].equals("-")) {
            for (String token : r[0].split(",")) {
                out.add(Completion.decode(token));
            }
        }
        return out;
    }

    @Override
    public long[] fetchAndAdd(int queuePairNumber, long remoteAddress, int rkey, long addend, int count) {
        byte[] bytes = PeerProcess.unb64(call(TimeUnit.SECONDS.toNanos(90), "fadd", queuePairNumber, remoteAddress,
            rkey, addend, count)[0]);
        long[] originals = new long[count];
        ByteBuffer.wrap(bytes).asLongBuffer().get(originals);
        return originals;
    }

    @Override
    public void reset() {
        call(DEFAULT_TIMEOUT_NS, "reset");
    }

    /** Asks the child to exit, then kills it whatever happened; deletes its stderr log. */
    @Override
    public void close() {
        try {
            if (!broken && process.isAlive()) {
                call(TimeUnit.SECONDS.toNanos(5), "exit");
                process.waitFor(5, TimeUnit.SECONDS);
            }
        } catch (RuntimeException | InterruptedException ignored) {
            // killed below
        } finally {
            kill();
            try {
                Files.deleteIfExists(stderrLog);
            } catch (IOException ignored) {
                // a temp file left behind is harmless
            }
        }
    }
}
