package io.jccl.benchmarks;

import io.jccl.collectives.CommunicatorOptions;
import io.jccl.collectives.store.InMemoryStore;
import io.jccl.collectives.store.Store;
import io.jccl.services.checkpoint.CheckpointAgent;
import io.jccl.services.checkpoint.CheckpointClient;
import io.jccl.services.checkpoint.CheckpointSettings;
import io.jccl.services.checkpoint.ShardLayout;
import io.jccl.services.checkpoint.StageHandle;
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
 * Checkpoint staging (issue 19 part 4) in a training loop: per state size and compute per step, the loop's stall per
 * checkpoint with {@link CheckpointClient#stageAsync} (CheckFreq's pipelined snapshot: staged while the next step's
 * compute reads the state, waited for with {@link StageHandle#awaitStaged()} before the update modifies it), with the
 * blocking {@link CheckpointClient#stage} (copy and CRC32C on the training thread), and against a synchronous save of
 * the same state to the same disk (write + fsync of the file + fsync of its directory).
 *
 * <p>A step is {@code passes} compute passes that read every parameter (a gradient-like reduction: what a forward
 * and backward pass does to the state, it reads it) and one update pass that modifies every parameter (the optimizer
 * step). Per round: two steps without a checkpoint (the step time), a pipelined checkpoint ({@code stageAsync} at the
 * end of a step, then a step whose update first awaits staging: the stall is the {@code stageAsync} call plus the
 * wait), then steps until the agent made it durable; a blocking {@code stage}, then steps until durable; then the
 * synchronous save. "Added" is the time those steps took beyond as many plain steps: the stall plus the compute
 * slowed by the staging thread and the agent (its checksum and persist share the CPU). Each checkpoint is durable
 * before the next (no back-pressure in these numbers). The training rank and the agent run as threads of this JVM, each with
 * its own engine; one shard holds the whole state. Median of the rounds after a warm-up round.
 *
 * <pre>
 * java -cp ... io.jccl.benchmarks.CheckpointBench [--device shm0|tcp0] [--sizes-mib 64,256] [--passes 1,4]
 *     [--rounds 5] [--dir DIR]
 * </pre>
 */
public final class CheckpointBench {
    private static final float LEARNING_RATE = 1e-3f;
    /** Keeps the compute from being optimized away. */
    private static volatile float sink;

    private CheckpointBench() {
    }

    /** Entry point. */
    public static void main(String[] args) throws Exception {
        String device = option(args, "--device", "shm0");
        long[] sizesMib = Arrays.stream(option(args, "--sizes-mib", "64,256").split(",")).mapToLong(Long::parseLong)
            .toArray();
        int[] passes = Arrays.stream(option(args, "--passes", "1,4").split(",")).mapToInt(Integer::parseInt)
            .toArray();
        int rounds = Integer.parseInt(option(args, "--rounds", "5"));
        Path dir = Path.of(option(args, "--dir", System.getProperty("java.io.tmpdir") + "/jccl-checkpoint-bench"));
        long largest = Arrays.stream(sizesMib).max().orElse(64) << 20;
        Files.createDirectories(dir);
        try {
            System.out.printf("checkpoint staging in a training loop on %s, directory %s; median of %d rounds (ms)%n",
                device, dir.toAbsolutePath(), rounds);
            System.out.printf("%-8s %6s %8s %9s | %8s %6s %8s %6s | %8s %6s %8s %6s | %5s%n", "state", "passes", "step",
                "sync save", "blocking", "÷sync", "added", "÷sync", "pipelin.", "÷sync", "added", "÷sync", "steps");
            run(device, sizesMib, passes, rounds, dir, largest);
            System.out.println("step: a step without checkpointing; blocking: the stall in stage() (training thread);"
                + " pipelined: the stall in stageAsync() + awaitStaged() before the update; added: the time the loop"
                + " lost from the checkpoint until it was durable (the steps then - as many plain steps: the stall"
                + " plus the compute slowed by staging and the agent's checksum and persist); steps: steps until"
                + " durable");
        } finally {
            deleteTree(dir);
        }
    }

    private static void run(String device, long[] sizesMib, int[] passes, int rounds, Path dir, long largest)
        throws Exception {
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
            for (long i = 0; i < largest / Float.BYTES; i++) {
                m.setAtIndex(ValueLayout.JAVA_FLOAT, i, (i % 1000) * 1e-3f);
            }
            long step = 0;
            for (long mib : sizesMib) {
                ShardLayout layout = new ShardLayout(mib << 20, 4, 1);
                long floats = layout.totalBytes() / Float.BYTES;
                try (CheckpointClient client = CheckpointClient.open(engine, "default", layout, 0,
                    Duration.ofMinutes(5))) {
                    for (int p : passes) {
                        double[] plain = new double[rounds];
                        double[] sync = new double[rounds];
                        double[] blocking = new double[rounds];
                        double[] blockingAdded = new double[rounds];
                        double[] pipelined = new double[rounds];
                        double[] pipelinedAdded = new double[rounds];
                        double[] stepsToDurable = new double[rounds];
                        for (int r = -1; r < rounds; r++) { // round -1 warms up
                            long t0 = System.nanoTime();
                            trainStep(m, floats, p);
                            long t1 = System.nanoTime();
                            trainStep(m, floats, p);
                            long t2 = System.nanoTime();
                            long plainNs = Math.min(t1 - t0, t2 - t1);
                            // Pipelined: staged at the end of a step, awaited before the next step's update; then
                            // training goes on until the agent made the step durable (its CPU work competes).
                            step++;
                            long s0 = System.nanoTime();
                            StageHandle staging = client.stageAsync(step, state);
                            long s1 = System.nanoTime();
                            float g = compute(m, floats, p);
                            long s2 = System.nanoTime();
                            staging.awaitStaged();
                            long s3 = System.nanoTime();
                            update(m, floats, g);
                            int pipelinedSteps = 1 + stepsUntilDurable(client, step, m, floats, p);
                            long s4 = System.nanoTime();
                            client.awaitDurable(step, Duration.ofMinutes(5));
                            // Blocking: the copy and the CRC32C on the training thread, then the same.
                            step++;
                            long b0 = System.nanoTime();
                            client.stage(step, state);
                            long b1 = System.nanoTime();
                            trainStep(m, floats, p);
                            int blockingSteps = 1 + stepsUntilDurable(client, step, m, floats, p);
                            long b2 = System.nanoTime();
                            client.awaitDurable(step, Duration.ofMinutes(5));
                            double syncMs = syncSave(m, layout.totalBytes(), dir.resolve("sync"));
                            if (r >= 0) {
                                plain[r] = plainNs / 1e6;
                                pipelined[r] = ((s1 - s0) + (s3 - s2)) / 1e6;
                                pipelinedAdded[r] = (s4 - s0 - pipelinedSteps * plainNs) / 1e6;
                                blocking[r] = (b1 - b0) / 1e6;
                                blockingAdded[r] = (b2 - b0 - blockingSteps * plainNs) / 1e6;
                                stepsToDurable[r] = pipelinedSteps;
                                sync[r] = syncMs;
                            }
                        }
                        double y = median(sync);
                        System.out.printf("%5d MiB %6d %8.1f %9.1f | %8.1f %6.3f %8.1f %6.3f | %8.1f %6.3f %8.1f %6.3f "
                                + "| %5.0f   (pipelined stall %.1f-%.1f, added %.1f-%.1f; sync %.1f-%.1f; load %s)%n",
                            mib, p, median(plain), y, median(blocking), median(blocking) / y, median(blockingAdded),
                            median(blockingAdded) / y, median(pipelined), median(pipelined) / y,
                            median(pipelinedAdded), median(pipelinedAdded) / y, median(stepsToDurable),
                            min(pipelined), max(pipelined), min(pipelinedAdded), max(pipelinedAdded), min(sync),
                            max(sync), load());
                    }
                }
            }
        } finally {
            done.complete(null);
        }
        agentSide.get(5, TimeUnit.MINUTES);
    }

    /**
     * Trains on until the agent made {@code step} durable (one READ of its header per step): the steps during which
     * the agent's checksum and persist compete with training for the CPU. Returns how many.
     */
    private static int stepsUntilDurable(CheckpointClient client, long step, MemorySegment m, long floats,
                                         int passes) {
        int n = 0;
        while (client.durableStep() < step && n < 10_000) {
            trainStep(m, floats, passes);
            n++;
        }
        return n;
    }

    /** One training step: {@code passes} passes that read every parameter, then the update that modifies them. */
    private static void trainStep(MemorySegment m, long floats, int passes) {
        update(m, floats, compute(m, floats, passes));
    }

    /** What the forward and backward passes do to the state: read every parameter, {@code passes} times. */
    private static float compute(MemorySegment m, long floats, int passes) {
        float g = 0;
        for (int p = 0; p < passes; p++) {
            float a0 = 0;
            float a1 = 0;
            float a2 = 0;
            float a3 = 0;
            long i = 0;
            for (; i + 4 <= floats; i += 4) {
                float x0 = m.getAtIndex(ValueLayout.JAVA_FLOAT, i);
                float x1 = m.getAtIndex(ValueLayout.JAVA_FLOAT, i + 1);
                float x2 = m.getAtIndex(ValueLayout.JAVA_FLOAT, i + 2);
                float x3 = m.getAtIndex(ValueLayout.JAVA_FLOAT, i + 3);
                a0 += x0 * x0 - g * x0;
                a1 += x1 * x1 - g * x1;
                a2 += x2 * x2 - g * x2;
                a3 += x3 * x3 - g * x3;
            }
            g = (a0 + a1 + a2 + a3) / floats;
        }
        sink = g;
        return g;
    }

    /** The optimizer step: modifies every parameter. */
    private static void update(MemorySegment m, long floats, float g) {
        float keep = 1 - LEARNING_RATE;
        float add = LEARNING_RATE * g;
        for (long i = 0; i < floats; i++) {
            m.setAtIndex(ValueLayout.JAVA_FLOAT, i, m.getAtIndex(ValueLayout.JAVA_FLOAT, i) * keep + add);
        }
    }

    private static String load() {
        try {
            return Files.readString(Path.of("/proc/loadavg")).split(" ")[0];
        } catch (IOException | RuntimeException e) {
            return "?";
        }
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
