package io.jccl.benchmarks;

import io.jccl.collectives.CommunicatorOptions;
import io.jccl.collectives.store.InMemoryStore;
import io.jccl.collectives.store.Store;
import io.jccl.services.checkpoint.CheckpointAgent;
import io.jccl.services.checkpoint.CheckpointClient;
import io.jccl.services.checkpoint.CheckpointSettings;
import io.jccl.services.checkpoint.ShardLayout;
import io.jccl.services.transfer.LocalSegment;
import io.jccl.services.transfer.TransferEngine;
import io.jccl.services.transfer.TransferSettings;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * Checkpoint staging (issue 19 part 4): the training loop's stall per checkpoint, {@link CheckpointClient#stage}
 * (WRITE into the agent's staging memory beside the rank's CRC32C), against a synchronous save of
 * the same state to the same disk (write + fsync of the file + fsync of its directory), for each state size. The
 * training rank and the agent run as threads of this JVM, each with its own engine; staged and synchronous rounds
 * alternate so both see the same machine. It also reports when the agent's digest was READ back and matched
 * ({@link CheckpointClient#verify}, from the start of {@code stage}) and how long after {@code stage} returned the
 * step was durable (the background persist), waiting for both before the synchronous round.
 *
 * <pre>
 * java -cp ... io.jccl.benchmarks.CheckpointBench [--device shm0|tcp0] [--sizes-mib 64,256] [--rounds 7] [--dir DIR]
 * </pre>
 */
public final class CheckpointBench {
    private CheckpointBench() {
    }

    /** Entry point. */
    public static void main(String[] args) throws Exception {
        String device = option(args, "--device", "shm0");
        long[] sizesMib = Arrays.stream(option(args, "--sizes-mib", "64,256").split(",")).mapToLong(Long::parseLong)
            .toArray();
        int rounds = Integer.parseInt(option(args, "--rounds", "7"));
        Path dir = Path.of(option(args, "--dir", System.getProperty("java.io.tmpdir") + "/jccl-checkpoint-bench"));
        long largest = Arrays.stream(sizesMib).max().orElse(64) << 20;
        Files.createDirectories(dir);
        try {
            System.out.printf("checkpoint staging vs synchronous save on %s, directory %s; median of %d rounds%n",
                device, dir.toAbsolutePath(), rounds);
            System.out.printf("%-9s %14s %16s %8s %14s %18s%n", "state", "stall (stage)", "sync write+fsync", "ratio",
                "digest checked", "durable after");
            run(device, sizesMib, rounds, dir, largest);
        } finally {
            deleteTree(dir);
        }
    }

    private static void run(String device, long[] sizesMib, int rounds, Path dir, long largest) throws Exception {
        Store store = new InMemoryStore();
        CommunicatorOptions options = CommunicatorOptions.fromEnvironment().withTransports(device)
            .withTimeout(Duration.ofMinutes(5));
        CheckpointSettings settings = CheckpointSettings.defaults(dir.resolve("staged")).withStagingBytes(largest)
            .withKeep(1);
        CompletableFuture<Void> done = new CompletableFuture<>();
        CompletableFuture<Void> agentSide = new CompletableFuture<>();
        Thread.ofPlatform().daemon().name("agent").start(() -> {
            try (TransferEngine engine = TransferEngine.create(store, 1, 2, options, TransferSettings.fromEnvironment());
                 CheckpointAgent agent = CheckpointAgent.start(engine, settings)) {
                done.get(60, TimeUnit.MINUTES);
                agentSide.complete(null);
            } catch (Exception e) {
                agentSide.completeExceptionally(e);
            }
        });
        try (TransferEngine engine = TransferEngine.create(store, 0, 2, options, TransferSettings.fromEnvironment());
             LocalSegment state = engine.registerSegment("state", largest)) {
            MemorySegment m = state.memory();
            for (long i = 0; i < largest / 8; i++) {
                m.setAtIndex(ValueLayout.JAVA_LONG, i, i * 0x9E3779B97F4A7C15L);
            }
            long step = 0;
            for (long mib : sizesMib) {
                ShardLayout layout = new ShardLayout(mib << 20, 4, 1);
                double[] stall = new double[rounds];
                double[] sync = new double[rounds];
                double[] persist = new double[rounds];
                double[] verified = new double[rounds];
                try (CheckpointClient client = CheckpointClient.open(engine, "default", layout, 0,
                    Duration.ofMinutes(5))) {
                    for (int r = -2; r < rounds; r++) { // rounds -2 and -1 warm up
                        step++;
                        m.set(ValueLayout.JAVA_LONG, 0, step); // the state changes between checkpoints
                        long t0 = System.nanoTime();
                        client.stage(step, state);
                        long t1 = System.nanoTime();
                        client.verify(); // the agent's digest READ back (not a stall: training could run)
                        long t2 = System.nanoTime();
                        client.awaitDurable(step, Duration.ofMinutes(5));
                        long t3 = System.nanoTime();
                        double syncMs = syncSave(m, layout.totalBytes(), dir.resolve("sync"));
                        if (r >= 0) {
                            stall[r] = (t1 - t0) / 1e6;
                            verified[r] = (t2 - t0) / 1e6;
                            persist[r] = (t3 - t1) / 1e6;
                            sync[r] = syncMs;
                        }
                    }
                }
                double s = median(stall);
                double y = median(sync);
                System.out.printf("%5d MiB %11.1f ms %13.1f ms %8.3f %11.1f ms %15.1f ms   (stall %.1f-%.1f, sync "
                    + "%.1f-%.1f)%n", mib, s, y, s / y, median(verified), median(persist), min(stall), max(stall),
                    min(sync), max(sync));
            }
        } finally {
            done.complete(null);
        }
        agentSide.get(5, TimeUnit.MINUTES);
    }

    /** A synchronous save: write the state to a new file, fsync it and its directory; returns milliseconds. */
    private static double syncSave(MemorySegment state, long length, Path dir) throws IOException {
        Files.createDirectories(dir);
        Path file = dir.resolve("state.bin");
        Files.deleteIfExists(file);
        long t0 = System.nanoTime();
        try (FileChannel ch = FileChannel.open(file, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE)) {
            for (long pos = 0; pos < length; pos += 4 << 20) {
                ByteBuffer b = state.asSlice(pos, Math.min(4 << 20, length - pos)).asByteBuffer();
                while (b.hasRemaining()) {
                    ch.write(b, pos + b.position());
                }
            }
            ch.force(true);
        }
        try (FileChannel d = FileChannel.open(dir, StandardOpenOption.READ)) {
            d.force(true);
        }
        double ms = (System.nanoTime() - t0) / 1e6;
        Files.delete(file);
        return ms;
    }

    private static double median(double[] v) {
        double[] s = v.clone();
        Arrays.sort(s);
        return s.length % 2 == 1 ? s[s.length / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
    }

    private static double min(double[] v) {
        return Arrays.stream(v).min().orElse(0);
    }

    private static double max(double[] v) {
        return Arrays.stream(v).max().orElse(0);
    }

    private static String option(String[] args, String name, String fallback) {
        for (int i = 0; i + 1 < args.length; i++) {
            if (args[i].equals(name)) {
                return args[i + 1];
            }
        }
        return fallback;
    }

    private static void deleteTree(Path root) throws IOException {
        if (!Files.exists(root)) {
            return;
        }
        List<Path> paths = new ArrayList<>();
        try (Stream<Path> s = Files.walk(root)) {
            s.sorted(Comparator.reverseOrder()).forEach(paths::add);
        }
        for (Path p : paths) {
            Files.deleteIfExists(p);
        }
    }
}
