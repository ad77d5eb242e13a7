package io.jccl.services.checkpoint;

import io.jccl.services.transfer.LocalSegment;
import io.jccl.services.transfer.RemoteSegment;
import io.jccl.services.transfer.TransferBatch;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Staging, verification, persistence, retention and re-sharded restore, ranks and agent as threads. */
class CheckpointStagingTest {
    /** 1 MiB + 12 B of floats over 4 ranks: shards of unequal length. */
    private static final ShardLayout FOUR = new ShardLayout((1 << 20) + 12, 4, 4);

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldStageVerifyPersistKeepTheNewestAndRestoreToTwoRanks(String transport, @TempDir Path dir)
        throws Exception {
        CheckpointSettings settings = CheckpointSettings.defaults(dir).withStagingBytes(2 << 20).withKeep(2);
        Jobs.run(transport, 4, settings, (agent, barrier) -> {
            barrier.await(60, TimeUnit.SECONDS); // every rank restored (nothing)
            barrier.await(60, TimeUnit.SECONDS); // three steps staged and durable
            assertEquals(3, agent.durableStep());
            assertEquals(3, agent.heldStep());
            barrier.await(60, TimeUnit.SECONDS); // restored from staging
        }, (engine, barrier) -> {
            int shard = engine.rank();
            try (CheckpointClient client = CheckpointClient.open(engine, "default", FOUR, shard, Jobs.TIMEOUT);
                 LocalSegment state = engine.registerSegment("state/" + shard, FOUR.length(shard))) {
                assertEquals(-1, client.restore(state, 0), "nothing saved yet");
                barrier.await(60, TimeUnit.SECONDS); // restore, then stage: as a resumed job must
                for (long step = 1; step <= 3; step++) {
                    Jobs.fill(state.memory(), 0, FOUR.offset(shard), FOUR.length(shard), step);
                    client.stage(step, state);
                    // Training goes on at once: the rank's memory changes while the agent persists.
                    Jobs.fill(state.memory(), 0, FOUR.offset(shard), FOUR.length(shard), 100 + step);
                }
                client.awaitDurable(3, Jobs.TIMEOUT);
                assertEquals(3, client.durableStep());
                barrier.await(60, TimeUnit.SECONDS);
                // Served from the agent's staging memory (it still holds step 3).
                assertEquals(3, client.restore(state, 0));
                assertEquals(-1, Jobs.mismatch(state.memory(), 0, FOUR.offset(shard), FOUR.length(shard), 3));
                barrier.await(60, TimeUnit.SECONDS);
            }
        });
        CheckpointDirectory disk = new CheckpointDirectory(dir);
        assertEquals(List.of(2L, 3L), disk.steps(), "keeps the newest 2");
        assertEquals(3, disk.latest().orElseThrow().step());
        assertEquals("step-0000000000000003", Files.readString(dir.resolve("latest")).trim());

        // A new job of 2 training ranks restores the 4-rank checkpoint: the agent loads it from disk.
        ShardLayout two = FOUR.withShards(2);
        Jobs.run(transport, 2, settings, (agent, barrier) -> {
            assertEquals(-1, agent.heldStep());
        }, (engine, barrier) -> {
            int shard = engine.rank();
            try (CheckpointClient client = CheckpointClient.open(engine, "default", two, shard, Jobs.TIMEOUT);
                 LocalSegment state = engine.registerSegment("state/" + shard, two.length(shard) + 7)) {
                assertEquals(3, client.restore(state, 7));
                assertEquals(-1, Jobs.mismatch(state.memory(), 7, two.offset(shard), two.length(shard), 3));
            }
        });
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldStageOffTheTrainingThreadAndPersistTheSnapshotWhenTheStateChangesAfterAwaitStaged(String transport,
        @TempDir Path dir) throws Exception {
        ShardLayout layout = new ShardLayout((9 << 20) + 12, 4, 2); // 3 pieces per shard: the pipelined WRITEs
        CheckpointSettings settings = CheckpointSettings.defaults(dir).withStagingBytes(10 << 20).withKeep(1);
        Jobs.run(transport, 2, settings, (agent, barrier) -> { }, (engine, barrier) -> {
            int shard = engine.rank();
            long from = layout.offset(shard);
            long length = layout.length(shard);
            try (CheckpointClient client = CheckpointClient.open(engine, "default", layout, shard, Jobs.TIMEOUT);
                 LocalSegment state = engine.registerSegment("state/" + shard, length)) {
                Thread trainer = Thread.currentThread();
                Set<Thread> stagers = ConcurrentHashMap.newKeySet();
                AtomicReference<CountDownLatch> go = new AtomicReference<>();
                client.onPieceCopied(() -> {
                    stagers.add(Thread.currentThread());
                    try {
                        go.get().await(); // the pieces wait until stageAsync returned
                    } catch (InterruptedException e) {
                        throw new IllegalStateException(e);
                    }
                });
                for (long step = 1; step <= 2; step++) {
                    Jobs.fill(state.memory(), 0, from, length, step);
                    go.set(new CountDownLatch(1));
                    StageHandle staging = client.stageAsync(step, state);
                    assertFalse(staging.isStaged(), "stageAsync returned before a piece was checksummed");
                    assertEquals(step, staging.step());
                    go.get().countDown();
                    // The next iteration's forward and backward passes read the state beside the staging.
                    assertEquals(-1, Jobs.mismatch(state.memory(), 0, from, length, step));
                    if (step == 1) {
                        staging.awaitStaged();
                    } else {
                        client.awaitStaged(); // the same through the client
                    }
                    // The optimizer step: the state changes only now.
                    Jobs.fill(state.memory(), 0, from, length, 100 + step);
                    client.awaitDurable(step, Jobs.TIMEOUT);
                }
                assertFalse(stagers.isEmpty());
                assertFalse(stagers.contains(trainer), "the copy and checksum ran on the training thread");
            }
        });
        CheckpointDirectory disk = new CheckpointDirectory(dir);
        CheckpointManifest m = disk.latest().orElseThrow();
        assertEquals(2, m.step());
        java.lang.foreign.MemorySegment restored = java.lang.foreign.Arena.ofAuto().allocate(layout.totalBytes());
        disk.read(m, 0, restored, layout.totalBytes());
        assertEquals(-1, Jobs.mismatch(restored, 0, 0, layout.totalBytes(), 2), "the checkpoint is the snapshot");
    }

    @Test
    void shouldNeverPersistAStepWhoseStateChangedBeforeAwaitStaged(@TempDir Path dir) throws Exception {
        ShardLayout layout = new ShardLayout(64 << 10, 4, 1); // one piece: on shm0 the post copies it
        CheckpointSettings settings = CheckpointSettings.defaults(dir).withStagingBytes(1 << 20);
        Jobs.run("shm0", 1, settings, (agent, barrier) -> { }, (engine, barrier) -> {
            try (CheckpointClient client = CheckpointClient.open(engine, "default", layout, 0, Jobs.TIMEOUT);
                 LocalSegment state = engine.registerSegment("state/0", layout.length(0))) {
                Jobs.fill(state.memory(), 0, 0, layout.length(0), 1);
                client.stageAsync(1, state).awaitStaged();
                client.awaitDurable(1, Jobs.TIMEOUT);
                // The caller's bug: the optimizer step runs while step 2 is staged, between the piece's copy and
                // its checksum.
                client.onPieceCopied(() -> Jobs.fill(state.memory(), 0, 0, layout.length(0), 99));
                Jobs.fill(state.memory(), 0, 0, layout.length(0), 2);
                client.stageAsync(2, state).awaitStaged(); // the rank cannot tell: the agent's CRC32C can
                CheckpointException e = assertThrows(CheckpointException.class,
                    () -> client.awaitDurable(2, Jobs.TIMEOUT));
                assertTrue(e.getMessage().contains("differs from the rank's") && e.getMessage().contains(
                    "step 2 is not persisted"), e.getMessage());
            }
        });
        CheckpointDirectory disk = new CheckpointDirectory(dir);
        assertEquals(List.of(1L), disk.steps());
        assertEquals(1, disk.latest().orElseThrow().step());
    }

    @Test
    void shouldDetectACorruptShardFileOnRestoreAndNameIt(@TempDir Path dir) throws Exception {
        ShardLayout layout = new ShardLayout(64 << 10, 4, 2);
        CheckpointSettings settings = CheckpointSettings.defaults(dir).withStagingBytes(1 << 20);
        Jobs.run("shm0", 2, settings, (agent, barrier) -> {
            barrier.await(60, TimeUnit.SECONDS);
            barrier.await(60, TimeUnit.SECONDS);
        }, (engine, barrier) -> {
            int shard = engine.rank();
            try (CheckpointClient client = CheckpointClient.open(engine, "default", layout, shard, Jobs.TIMEOUT);
                 LocalSegment state = engine.registerSegment("state/" + shard, layout.length(shard))) {
                Jobs.fill(state.memory(), 0, layout.offset(shard), layout.length(shard), 1);
                client.stage(1, state);
                client.awaitDurable(1, Jobs.TIMEOUT);
                barrier.await(60, TimeUnit.SECONDS);
                if (shard == 0) {
                    Path file = dir.resolve("step-0000000000000001").resolve("shard-00001-of-00002.bin");
                    byte[] bytes = Files.readAllBytes(file);
                    bytes[1234] ^= 0x10;
                    Files.write(file, bytes);
                }
                barrier.await(60, TimeUnit.SECONDS);
            }
        });
        // A new job: the agent must load from disk and finds the flipped bit.
        Jobs.run("shm0", 2, settings, (agent, barrier) -> { }, (engine, barrier) -> {
            int shard = engine.rank();
            try (CheckpointClient client = CheckpointClient.open(engine, "default", layout, shard, Jobs.TIMEOUT);
                 LocalSegment state = engine.registerSegment("state/" + shard, layout.length(shard))) {
                CheckpointException e = assertThrows(CheckpointException.class, () -> client.restore(state, 0));
                assertTrue(e.getMessage().contains("shard-00001-of-00002.bin") && e.getMessage().contains("corrupt"),
                    e.getMessage());
            }
        });
        CheckpointDirectory disk = new CheckpointDirectory(dir);
        CheckpointManifest m = disk.latest().orElseThrow();
        CheckpointException e = assertThrows(CheckpointException.class, () -> disk.read(m, 0,
            java.lang.foreign.Arena.ofAuto().allocate(layout.totalBytes()), layout.totalBytes()));
        assertTrue(e.getMessage().contains("shard-00001-of-00002.bin"), e.getMessage());
        // Shard 0 alone is intact and still readable.
        disk.read(m, 0, java.lang.foreign.Arena.ofAuto().allocate(layout.length(0)), layout.length(0));
    }

    @Test
    void shouldRefuseAnOversizedCheckpointAndMismatchedLayouts(@TempDir Path dir) throws Exception {
        CheckpointSettings settings = CheckpointSettings.defaults(dir).withStagingBytes(1 << 20);
        Jobs.run("shm0", 2, settings, (agent, barrier) -> barrier.await(60, TimeUnit.SECONDS), (engine, barrier) -> {
            int shard = engine.rank();
            ShardLayout big = new ShardLayout(2 << 20, 4, 2);
            try (CheckpointClient client = CheckpointClient.open(engine, "default", big, shard, Jobs.TIMEOUT);
                 LocalSegment state = engine.registerSegment("state/" + shard, big.length(shard))) {
                CheckpointException e = assertThrows(CheckpointException.class, () -> client.stage(1, state));
                assertTrue(e.getMessage().contains("exceeds the agent's staging memory of 1048576 B"),
                    e.getMessage());
            }
            // Two ranks that disagree on the layout of one step: the second is refused, naming both layouts.
            ShardLayout mine = new ShardLayout(shard == 0 ? 4096 : 8192, 4, 2);
            try (CheckpointClient client = CheckpointClient.open(engine, "default", mine, shard, Jobs.TIMEOUT);
                 LocalSegment state = engine.registerSegment("small/" + shard, mine.length(shard))) {
                if (shard == 0) {
                    client.stage(5, state);
                    client.verify();
                }
                barrier.await(60, TimeUnit.SECONDS);
                if (shard == 1) {
                    client.stage(5, state); // returns once in staging: the refusal comes with the digest
                    CheckpointException e = assertThrows(CheckpointException.class, client::verify);
                    assertTrue(e.getMessage().contains("started with"), e.getMessage());
                }
                assertThrows(IllegalArgumentException.class, () -> client.stage(6, state, 1));
            }
        });
        assertFalse(Files.exists(dir.resolve("step-0000000000000005")), "an incomplete step is never persisted");
    }

    @Test
    void shouldNeverPersistAStepWhoseStagedShardDiffersFromTheRanks(@TempDir Path dir) throws Exception {
        ShardLayout layout = new ShardLayout(64 << 10, 4, 2);
        CheckpointSettings settings = CheckpointSettings.defaults(dir).withStagingBytes(1 << 20);
        Jobs.run("shm0", 2, settings, (agent, barrier) -> barrier.await(60, TimeUnit.SECONDS), (engine, barrier) -> {
            int shard = engine.rank();
            try (CheckpointClient client = CheckpointClient.open(engine, "default", layout, shard, Jobs.TIMEOUT);
                 LocalSegment state = engine.registerSegment("state/" + shard, layout.length(shard))) {
                Jobs.fill(state.memory(), 0, layout.offset(shard), layout.length(shard), 1);
                client.stage(1, state);
                client.awaitDurable(1, Jobs.TIMEOUT);
                if (shard == 0) {
                    Jobs.fill(state.memory(), 0, layout.offset(shard), layout.length(shard), 2);
                    client.stage(2, state);
                    client.verify(); // shard 0 of step 2 is fine
                }
                barrier.await(60, TimeUnit.SECONDS);
                if (shard == 1) {
                    // What a transfer that lands other bytes than the rank holds looks like to the agent: the rank's
                    // CRC32C in the request differs from the agent's of the staged bytes.
                    RemoteSegment staging = engine.openSegment(CheckpointSettings.stagingSegment("default"));
                    try (TransferBatch b = engine.newBatch(1)) {
                        b.write(state, 0, staging, layout.offset(1), layout.length(1));
                        b.notify(ControlBlock.stage(77, 2, 1, layout,
                            CheckpointAgent.crc32c(state.memory(), 0, layout.length(1)) ^ 1));
                        assertTrue(b.submit().await(), b.toString());
                    }
                } else {
                    CheckpointException e = assertThrows(CheckpointException.class,
                        () -> client.awaitDurable(2, Jobs.TIMEOUT));
                    assertTrue(e.getMessage().contains("differs from the rank's") && e.getMessage().contains(
                        "step 2 is not persisted"), e.getMessage());
                }
            }
        });
        CheckpointDirectory disk = new CheckpointDirectory(dir);
        assertEquals(List.of(1L), disk.steps());
        assertEquals(1, disk.latest().orElseThrow().step());
    }

    @Test
    void shouldNotPublishAShardWhoseBytesDifferFromItsVerifiedCrc(@TempDir Path dir) throws Exception {
        ShardLayout layout = new ShardLayout(64 << 10, 4, 2);
        java.lang.foreign.MemorySegment state = java.lang.foreign.Arena.ofAuto().allocate(layout.totalBytes());
        Jobs.fill(state, 0, 0, layout.totalBytes(), 1);
        CheckpointDirectory disk = new CheckpointDirectory(dir);
        int[] crcs = {CheckpointAgent.crc32c(state, 0, layout.length(0)),
            CheckpointAgent.crc32c(state, layout.offset(1), layout.length(1))};
        disk.persist(1, layout, state, crcs, 0);
        // Staging changed after the ranks' digests were checked (shard 1's CRC no longer describes its bytes).
        Jobs.fill(state, 0, 0, layout.totalBytes(), 2);
        crcs[0] = CheckpointAgent.crc32c(state, 0, layout.length(0));
        CheckpointException e = assertThrows(CheckpointException.class, () -> disk.persist(2, layout, state, crcs, 0));
        assertTrue(e.getMessage().contains("shard 1 changed in staging"), e.getMessage());
        assertEquals(List.of(1L), disk.steps());
        assertFalse(Files.exists(disk.stepDirectory(2)));
        assertEquals(1, disk.latest().orElseThrow().step());
    }
}
