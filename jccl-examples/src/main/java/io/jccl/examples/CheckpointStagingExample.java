package io.jccl.examples;

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
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * Checkpoint staging (jccl-services): four training ranks hold a float state split evenly
 * ({@link ShardLayout}), "train" it (every element += 1 per step) and checkpoint every few steps: at the end of a step
 * each rank's {@code stageAsync} WRITEs its shard into the checkpoint agent's staging memory (rank 4) with its CRC32C
 * on the client's staging thread, beside the next step's compute, and the next update waits for it (the training
 * loop's whole stall; the agent's digest is READ back and compared before the next checkpoint); the agent persists in
 * the background (shard files fsynced, manifest renamed atomically, then {@code latest}). Then the job ends, and a new job of two ranks and a new agent restores the newest checkpoint,
 * re-sharded 4 → 2, and checks every element.
 *
 * <pre>
 * ./jccl example CheckpointStagingExample [--device shm0|tcp0] [--mib 16] [--steps 6] [--every 2] [--step-ms 200]
 *     [--dir DIR]
 * </pre>
 * {@code --step-ms} pads each training step to that many milliseconds (the compute a real step has, during which the
 * agent persists); without {@code --dir} the checkpoints go to a temporary directory, removed at the end.
 */
public final class CheckpointStagingExample {
    private static final Duration TIMEOUT = Duration.ofSeconds(60);

    private CheckpointStagingExample() {
    }

    /** Entry point. */
    public static void main(String[] args) throws Exception {
        String device = ExampleSupport.option(args, "--device", "shm0");
        long mib = Long.parseLong(ExampleSupport.option(args, "--mib", "16"));
        int steps = Integer.parseInt(ExampleSupport.option(args, "--steps", "6"));
        int every = Integer.parseInt(ExampleSupport.option(args, "--every", "2"));
        long stepMs = Long.parseLong(ExampleSupport.option(args, "--step-ms", "200"));
        String dir = ExampleSupport.option(args, "--dir", null);
        Path root = dir != null ? Path.of(dir) : Files.createTempDirectory("jccl-checkpoints-");
        try {
            System.out.println(run(device, mib << 20, steps, every, stepMs, root));
        } finally {
            if (dir == null) {
                deleteTree(root);
            }
        }
    }

    /**
     * Trains and checkpoints with 4 ranks ({@code stepMs} per step at least), then restores with 2; returns the
     * report.
     */
    public static String run(String device, long stateBytes, int steps, int every, long stepMs, Path root)
        throws Exception {
        ShardLayout four = new ShardLayout(stateBytes, Float.BYTES, 4);
        CheckpointSettings settings = CheckpointSettings.defaults(root).withStagingBytes(stateBytes).withKeep(2);
        StringBuilder report = new StringBuilder();
        List<String> first = job(device, 4, settings, (engine, agentRank) -> train(engine, four, steps, every, stepMs));
        first.forEach(line -> report.append(line).append('\n'));
        long last = steps / every * every;
        ShardLayout two = four.withShards(2);
        List<String> second = job(device, 2, settings, (engine, agentRank) -> restore(engine, two, last));
        second.forEach(line -> report.append(line).append('\n'));
        try (Stream<Path> s = Files.list(root)) {
            report.append("on disk: ").append(s.map(p -> p.getFileName().toString()).sorted().toList());
        }
        return report.toString();
    }

    private interface RankBody {
        String run(TransferEngine engine, int agentRank) throws Exception;
    }

    /** A job of {@code trainers} ranks plus the agent (the last rank), as threads of this process. */
    private static List<String> job(String device, int trainers, CheckpointSettings settings, RankBody body)
        throws Exception {
        Store store = new InMemoryStore();
        int n = trainers + 1;
        CommunicatorOptions options = CommunicatorOptions.fromEnvironment().withTransports(device).withTimeout(TIMEOUT);
        List<CompletableFuture<String>> ranks = new ArrayList<>();
        CompletableFuture<Void> trainersDone = new CompletableFuture<>();
        for (int r = 0; r < n; r++) {
            int rank = r;
            CompletableFuture<String> result = new CompletableFuture<>();
            Thread.ofPlatform().daemon().name("rank-" + r).start(() -> {
                try (TransferEngine engine = TransferEngine.create(store, rank, n, options,
                    TransferSettings.fromEnvironment())) {
                    if (rank == trainers) {
                        try (CheckpointAgent agent = CheckpointAgent.start(engine, settings)) {
                            trainersDone.get(120, TimeUnit.SECONDS); // serve until the trainers are done
                            result.complete("agent (rank " + rank + "): newest durable step " + agent.durableStep()
                                + ", steps on disk " + agent.directory().steps());
                        }
                    } else {
                        result.complete(body.run(engine, trainers));
                    }
                } catch (Exception e) {
                    result.completeExceptionally(new IllegalStateException("rank " + rank + ": " + e.getMessage(), e));
                }
            });
            ranks.add(result);
        }
        List<String> lines = new ArrayList<>();
        try {
            for (int r = 0; r < trainers; r++) {
                lines.add(ranks.get(r).get(120, TimeUnit.SECONDS));
            }
        } finally {
            trainersDone.complete(null);
        }
        lines.add(ranks.get(trainers).get(120, TimeUnit.SECONDS));
        return lines;
    }

    private static String train(TransferEngine engine, ShardLayout layout, int steps, int every, long stepMs)
        throws InterruptedException {
        int shard = engine.rank();
        try (CheckpointClient ckpt = CheckpointClient.open(engine, "default", layout, shard, TIMEOUT);
             LocalSegment state = engine.registerSegment("state/" + shard, Math.max(1, layout.length(shard)))) {
            long restored = ckpt.restore(state, 0);
            long firstElement = layout.offset(shard) / Float.BYTES;
            if (restored < 0) {
                init(state.memory(), firstElement, layout.length(shard) / Float.BYTES);
            }
            double stallMs = 0;
            double waitMs = 0;
            int checkpoints = 0;
            long lastStaged = -1;
            StageHandle staging = null;
            for (long step = Math.max(1, restored + 1); step <= steps; step++) {
                long stepStartNs = System.nanoTime();
                // The forward and backward passes (here a sleep): they only read the state, so the checkpoint staged
                // at the end of the previous step is copied beside them.
                long restNs = stepMs * 1_000_000 - (System.nanoTime() - stepStartNs);
                if (restNs > 0) {
                    Thread.sleep(restNs / 1_000_000);
                }
                if (staging != null) {
                    long t0 = System.nanoTime();
                    staging.awaitStaged(); // the stall: the update below modifies the state
                    stallMs += (System.nanoTime() - t0) / 1e6;
                    waitMs += staging.releaseWaitNs() / 1e6;
                    staging = null;
                }
                trainStep(state.memory(), layout.length(shard) / Float.BYTES); // the update
                if (step % every == 0) {
                    long t0 = System.nanoTime();
                    staging = ckpt.stageAsync(step, state); // returns at once: staged on the client's thread
                    stallMs += (System.nanoTime() - t0) / 1e6;
                    checkpoints++;
                    lastStaged = step;
                }
            }
            if (staging != null) {
                long t0 = System.nanoTime();
                staging.awaitStaged();
                stallMs += (System.nanoTime() - t0) / 1e6;
                waitMs += staging.releaseWaitNs() / 1e6;
            }
            long t0 = System.nanoTime();
            if (lastStaged >= 0) {
                ckpt.awaitDurable(lastStaged, TIMEOUT);
            }
            int n = Math.max(1, checkpoints);
            return String.format("rank %d: shard of %d B, %d checkpoints, stall %.2f ms per checkpoint (of which %.2f "
                    + "ms waiting for the previous one to be persisted); step %d durable %.1f ms after the loop ended",
                shard, layout.length(shard), checkpoints, stallMs / n, waitMs / n, lastStaged,
                (System.nanoTime() - t0) / 1e6);
        }
    }

    private static String restore(TransferEngine engine, ShardLayout layout, long expectedStep) {
        int shard = engine.rank();
        try (CheckpointClient ckpt = CheckpointClient.open(engine, "default", layout, shard, TIMEOUT);
             LocalSegment state = engine.registerSegment("state/" + shard, Math.max(1, layout.length(shard)))) {
            long step = ckpt.restore(state, 0);
            long firstElement = layout.offset(shard) / Float.BYTES;
            long count = layout.length(shard) / Float.BYTES;
            // The expected state: the initial values trained for `step` steps, computed the same way.
            MemorySegment expected = MemorySegment.ofArray(new float[(int) count]);
            init(expected, firstElement, count);
            for (long s = 0; s < step; s++) {
                trainStep(expected, count);
            }
            long bad = expected.mismatch(state.memory().asSlice(0, layout.length(shard)));
            return String.format("restored rank %d of 2: step %d (expected %d), elements %d..%d from the 4-rank "
                    + "checkpoint: %s", shard, step, expectedStep, firstElement, firstElement + count - 1,
                bad < 0 && step == expectedStep ? "all identical" : "DIFFER at byte " + bad);
        }
    }

    private static void init(MemorySegment m, long firstElement, long count) {
        for (long i = 0; i < count; i++) {
            m.setAtIndex(ValueLayout.JAVA_FLOAT_UNALIGNED, i, (firstElement + i) * 1e-6f);
        }
    }

    /** The "training": every element += 1. */
    private static void trainStep(MemorySegment m, long count) {
        for (long i = 0; i < count; i++) {
            m.setAtIndex(ValueLayout.JAVA_FLOAT_UNALIGNED, i, m.getAtIndex(ValueLayout.JAVA_FLOAT_UNALIGNED, i) + 1f);
        }
    }

    private static void deleteTree(Path root) throws IOException {
        try (Stream<Path> s = Files.walk(root)) {
            for (Path p : s.sorted(Comparator.reverseOrder()).toList()) {
                Files.deleteIfExists(p);
            }
        }
    }
}
