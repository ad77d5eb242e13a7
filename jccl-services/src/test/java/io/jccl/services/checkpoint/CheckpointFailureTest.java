package io.jccl.services.checkpoint;

import io.jccl.collectives.store.FileStore;
import io.jccl.common.testing.ChildJvm;
import io.jccl.services.transfer.LocalSegment;
import io.jccl.services.transfer.TransferEngine;
import io.jccl.services.transfer.TransferSettings;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Failures: the agent process killed (kill -9) mid-persist, the agent gone under a rank, a full disk (a small
 * tmpfs, when this runs as root).
 */
class CheckpointFailureTest {
    private static final ShardLayout LAYOUT = new ShardLayout(2 << 20, 4, 1);

    /** The checkpoint agent in a child JVM, persisting at most {@code bytesPerSecond} (0: no limit). */
    private static ChildJvm agent(Path store, String transport, Path checkpoints, long bytesPerSecond)
        throws IOException {
        return ChildJvm.start(CheckpointAgentChild.class, store.toString(), transport, checkpoints.toString(),
            Long.toString(bytesPerSecond));
    }

    /** Writes step {@code step}'s state durably as the agent would, without an agent. */
    private static void persist(Path dir, long step) throws IOException {
        MemorySegment state = Arena.ofAuto().allocate(LAYOUT.totalBytes());
        Jobs.fill(state, 0, 0, LAYOUT.totalBytes(), step);
        new CheckpointDirectory(dir).persist(step, LAYOUT, state,
            new int[] {CheckpointAgent.crc32c(state, 0, LAYOUT.totalBytes())}, 0);
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldKeepThePreviousCheckpointWhenTheAgentIsKilledMidPersistAndFailTheRankClearly(String transport,
        @TempDir Path tmp) throws Exception {
        Path checkpoints = tmp.resolve("checkpoints");
        persist(checkpoints, 1);
        Path stepTwo = checkpoints.resolve("step-0000000000000002");
        Files.createDirectories(tmp.resolve("store1"));
        // 2 MiB at 256 KiB/s: the agent is killed seconds before it could finish step 2.
        try (ChildJvm agent = agent(tmp.resolve("store1"), transport, checkpoints, 256 << 10);
             FileStore store = new FileStore(tmp.resolve("store1"));
             TransferEngine engine = TransferEngine.create(store, 0, 2, Jobs.options(transport),
                 TransferSettings.defaults());
             CheckpointClient client = CheckpointClient.open(engine, "default", LAYOUT, 0, Jobs.TIMEOUT);
             LocalSegment state = engine.registerSegment("state", LAYOUT.totalBytes())) {
            agent.awaitLine(l -> l.startsWith("READY"), "READY", 60);
            assertTrue(agent.lines().contains("READY durable=1"), agent.lines().toString());
            Jobs.fill(state.memory(), 0, 0, LAYOUT.totalBytes(), 2);
            client.stage(2, state);
            Path shard = stepTwo.resolve("shard-00000-of-00001.bin");
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (!Files.exists(shard) || Files.size(shard) == 0) {
                assertTrue(System.nanoTime() < until, "the agent never started persisting step 2");
                Thread.sleep(5);
            }
            agent.process().destroyForcibly(); // SIGKILL
            assertTrue(agent.process().waitFor(30, TimeUnit.SECONDS));
            assertFalse(Files.exists(stepTwo.resolve(CheckpointDirectory.MANIFEST)), "killed too late: step 2 "
                + "completed");
            // The rank's next call fails with the agent named, within the job's timeout (never a hang).
            CheckpointException e = assertThrows(CheckpointException.class, () -> client.stage(3, state));
            assertTrue(e.getMessage().contains("rank 1"), e.getMessage());
        }
        CheckpointDirectory disk = new CheckpointDirectory(checkpoints);
        assertEquals(List.of(1L), disk.steps(), "the partial step 2 is ignored");
        CheckpointManifest latest = disk.latest().orElseThrow();
        assertEquals(1, latest.step());
        MemorySegment back = Arena.ofAuto().allocate(LAYOUT.totalBytes());
        disk.read(latest, 0, back, LAYOUT.totalBytes());
        assertEquals(-1, Jobs.mismatch(back, 0, 0, LAYOUT.totalBytes(), 1));

        // A restarted agent (a new job) removes the partial directory and serves step 1.
        Files.createDirectories(tmp.resolve("store2"));
        try (ChildJvm agent = agent(tmp.resolve("store2"), transport, checkpoints, 0);
             FileStore store = new FileStore(tmp.resolve("store2"));
             TransferEngine engine = TransferEngine.create(store, 0, 2, Jobs.options(transport),
                 TransferSettings.defaults());
             CheckpointClient client = CheckpointClient.open(engine, "default", LAYOUT, 0, Jobs.TIMEOUT);
             LocalSegment state = engine.registerSegment("state", LAYOUT.totalBytes())) {
            agent.awaitLine(l -> l.startsWith("READY"), "READY", 60);
            assertFalse(Files.exists(stepTwo), "partial step 2 removed at start");
            assertEquals(1, client.restore(state, 0));
            assertEquals(-1, Jobs.mismatch(state.memory(), 0, 0, LAYOUT.totalBytes(), 1));
        }
    }

    @Test
    void shouldReportAFullDiskAndKeepThePreviousCheckpoint(@TempDir Path tmp) throws Exception {
        Path mount = Files.createDirectories(tmp.resolve("tmpfs"));
        Assumptions.assumeTrue(run("mount", "-t", "tmpfs", "-o", "size=1536k", "tmpfs", mount.toString()),
            "needs root to mount a small tmpfs");
        try {
            ShardLayout layout = new ShardLayout(768 << 10, 4, 2);
            CheckpointSettings settings = CheckpointSettings.defaults(mount).withStagingBytes(1 << 20).withKeep(1);
            Jobs.run("shm0", 2, settings, (agent, barrier) -> { }, (engine, barrier) -> {
                int shard = engine.rank();
                try (CheckpointClient client = CheckpointClient.open(engine, "default", layout, shard, Jobs.TIMEOUT);
                     LocalSegment state = engine.registerSegment("state/" + shard, layout.length(shard))) {
                    Jobs.fill(state.memory(), 0, layout.offset(shard), layout.length(shard), 1);
                    client.stage(1, state);
                    client.awaitDurable(1, Jobs.TIMEOUT);
                    Jobs.fill(state.memory(), 0, layout.offset(shard), layout.length(shard), 2);
                    client.stage(2, state); // staging takes it: the disk is the agent's business
                    CheckpointException e = assertThrows(CheckpointException.class,
                        () -> client.awaitDurable(2, Jobs.TIMEOUT));
                    assertTrue(e.getMessage().contains("No space left on device")
                        && e.getMessage().contains("step 1, stays"), e.getMessage());
                    assertEquals(1, client.durableStep());
                }
            });
            CheckpointDirectory disk = new CheckpointDirectory(mount);
            assertEquals(List.of(1L), disk.steps());
            assertFalse(Files.exists(disk.stepDirectory(2)), "the partial step 2 is removed");
            MemorySegment back = Arena.ofAuto().allocate(layout.totalBytes());
            disk.read(disk.latest().orElseThrow(), 0, back, layout.totalBytes());
            assertEquals(-1, Jobs.mismatch(back, 0, 0, layout.totalBytes(), 1));
        } finally {
            run("umount", mount.toString());
        }
    }

    private static boolean run(String... command) throws Exception {
        try {
            Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
            return p.waitFor(30, TimeUnit.SECONDS) && p.exitValue() == 0;
        } catch (IOException e) {
            return false;
        }
    }
}
