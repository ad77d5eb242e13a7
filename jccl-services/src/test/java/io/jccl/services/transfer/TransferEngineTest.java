package io.jccl.services.transfer;

import io.jccl.collectives.CommunicatorOptions;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** WRITE/READ correctness, slicing over several queue pairs and notifications, over shm0 and tcp0. */
class TransferEngineTest {
    private static final long[] SIZES = {1, 7, 4096, 65_536 + 3, (1 << 20) + 1, 5 * (1 << 20) + 17, 64L << 20};
    private static final long MAX = 64L << 20;

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldWriteAndReadEverySizeWithChecksumsAndNotifyAfterLanding(String transport) {
        Engines.run(2, Engines.options(transport), TransferSettings.defaults(), (engine, barrier) -> {
            if (engine.rank() == 1) {
                LocalSegment target = engine.registerSegment("target", MAX + 64);
                barrier.await();
                for (long size : SIZES) {
                    Notification n = engine.pollNotification(20, TimeUnit.SECONDS);
                    assertNotNull(n, "notification for " + size + " B");
                    assertEquals(0, n.fromRank());
                    String[] f = n.text().split(" ");
                    long offset = Long.parseLong(f[1]);
                    // The notification comes after the batch's bytes landed: they must be there now.
                    assertEquals(size, Long.parseLong(f[0]), n.text());
                    assertEquals(Long.parseLong(f[2]), Engines.crc(target.memory(), offset, size), size + " B");
                    barrier.await(); // checked: the next size may overwrite these bytes
                }
                barrier.await(); // rank 0 reads back
            } else {
                LocalSegment source = engine.registerSegment("source", MAX + 64);
                LocalSegment back = engine.registerSegment("back", MAX + 64);
                barrier.await();
                RemoteSegment target = engine.openSegment("target");
                assertEquals(1, target.rank());
                assertEquals(transport, engine.deviceFor(1));
                try (TransferBatch batch = engine.newBatch(4)) {
                    for (long size : SIZES) {
                        long offset = size % 61; // unaligned offsets too
                        Engines.fill(source.memory(), offset, size, size);
                        long crc = Engines.crc(source.memory(), offset, size);
                        batch.clear();
                        batch.write(source, offset, target, offset, size);
                        batch.notify((size + " " + offset + " " + crc).getBytes(StandardCharsets.UTF_8));
                        assertTrue(batch.submit().await(), batch.toString());
                        barrier.await();
                    }
                    barrier.await();
                    for (long size : SIZES) {
                        long offset = size % 61;
                        batch.clear();
                        batch.read(back, offset + 1, target, offset, size);
                        assertTrue(batch.submit().await(), batch.toString());
                        // the last size overwrote the first bytes of the smaller ones: compare with the source
                        if (size == MAX) {
                            assertEquals(Engines.crc(source.memory(), offset, size),
                                Engines.crc(back.memory(), offset + 1, size));
                        }
                    }
                    // Reads of every size after the largest write: the target holds the 64 MiB pattern.
                    long offset = MAX % 61;
                    for (long size : SIZES) {
                        batch.clear();
                        batch.read(back, 3, target, offset, size);
                        assertTrue(batch.submit().await(), batch.toString());
                        assertEquals(Engines.crc(source.memory(), offset, size), Engines.crc(back.memory(), 3, size),
                            "READ of " + size + " B");
                    }
                }
            }
        });
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldDeliverImmediateDataNotificationsAfterTheBatchLanded(String transport) {
        Engines.run(2, Engines.options(transport), TransferSettings.defaults(), (engine, barrier) -> {
            if (engine.rank() == 1) {
                LocalSegment target = engine.registerSegment("imm-target", 3 << 20);
                barrier.await();
                for (int round = 0; round < 3; round++) {
                    Notification n = engine.pollNotification(20, TimeUnit.SECONDS);
                    assertNotNull(n, "notification of round " + round);
                    assertEquals(0, n.fromRank());
                    int imm = n.immediateData();
                    assertEquals(0xCAFE0000 | round, imm);
                    // WRITE_WITH_IMM comes after the batch's bytes: they are here now.
                    assertEquals(Engines.crc(target.memory(), 0, 3 << 20), crcOf(round));
                    barrier.await();
                }
            } else {
                LocalSegment source = engine.registerSegment("imm-source", 3 << 20);
                barrier.await();
                RemoteSegment target = engine.openSegment("imm-target");
                try (TransferBatch batch = engine.newBatch(3)) {
                    for (int round = 0; round < 3; round++) {
                        Engines.fill(source.memory(), 0, 3 << 20, round);
                        batch.clear();
                        for (int part = 0; part < 3; part++) {
                            batch.write(source, (long) part << 20, target, (long) part << 20, 1 << 20);
                        }
                        batch.notifyImmediate(0xCAFE0000 | round);
                        assertTrue(batch.submit().await(), batch.toString());
                        barrier.await();
                    }
                }
            }
        });
    }

    private static long crcOf(long seed) {
        java.lang.foreign.MemorySegment m = java.lang.foreign.Arena.ofAuto().allocate(3 << 20);
        Engines.fill(m, 0, 3 << 20, seed);
        return Engines.crc(m, 0, 3 << 20);
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldSpreadSlicesOverEveryQueuePairAndCompleteThroughTheFuture(String transport) {
        TransferSettings settings = TransferSettings.defaults().withQueuePairsPerPeer(4).withSliceBytes(64 * 1024);
        Engines.run(2, Engines.options(transport), settings, (engine, barrier) -> {
            if (engine.rank() == 1) {
                engine.registerSegment("wide", 8 << 20);
                barrier.await();
                barrier.await();
            } else {
                LocalSegment source = engine.registerSegment("src", 8 << 20);
                LocalSegment back = engine.registerSegment("back", 8 << 20);
                barrier.await();
                RemoteSegment wide = engine.openSegment("wide");
                Engines.fill(source.memory(), 0, 8 << 20, 42);
                try (TransferBatch batch = engine.newBatch(64)) {
                    // 8 transfers of 1 MiB: 16 slices each, 128 in all over 4 queue pairs
                    for (int i = 0; i < 8; i++) {
                        batch.write(source, i << 20, wide, i << 20, 1 << 20);
                    }
                    TransferBatch done = batch.submit().future().get(30, TimeUnit.SECONDS);
                    assertTrue(done.succeeded(), done.toString());
                    batch.clear();
                    batch.read(back, 0, wide, 0, 8 << 20);
                    assertTrue(batch.submit().await(), batch.toString());
                }
                assertEquals(Engines.crc(source.memory(), 0, 8 << 20), Engines.crc(back.memory(), 0, 8 << 20));
                long[] perQueuePair = engine.slicesPostedTo(1);
                assertEquals(4, perQueuePair.length);
                long total = 0;
                for (long n : perQueuePair) {
                    assertEquals(64, n, "slices per queue pair: " + java.util.Arrays.toString(perQueuePair));
                    total += n;
                }
                assertEquals(256, total);
                // READs in flight per queue pair: the device's limit (tcp0 128, shm0 16), not the verbs default 16
                assertEquals(transport.equals("tcp0") ? 128 : 16, engine.readDepthTo(1));
                barrier.await();
            }
        });
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldCompleteABatchOfSmallReadsWithFewSignaledCompletions(String transport) {
        // One completion per READ was a CQ entry, a poll and a dispatch per row of a lookup; an RC queue pair
        // completes in order, so a signaled completion covers the unsignaled requests posted before it.
        Engines.run(2, Engines.options(transport), TransferSettings.defaults(), (engine, barrier) -> {
            if (engine.rank() == 1) {
                serveRows(engine, barrier, 3);
            } else {
                LocalSegment sink = engine.registerSegment("sink", 256 * 280);
                barrier.await();
                RemoteSegment rows = engine.openSegment("rows");
                try (TransferBatch batch = engine.newBatch(256)) {
                    batch.read(sink, 0, rows, 0, 280);
                    assertTrue(batch.submit().await(), batch.toString()); // connects
                    long[] before = engine.completionsFrom(1);
                    for (int round = 0; round < 3; round++) {
                        batch.clear();
                        for (int i = 0; i < 256; i++) {
                            batch.read(sink, i * 280L, rows, (255 - i) * 280L, 280);
                        }
                        assertTrue(batch.submit().await(), batch.toString());
                        for (int i = 0; i < 256; i++) {
                            assertEquals(TransferStatus.SUCCEEDED, batch.status(i));
                        }
                    }
                    long[] after = engine.completionsFrom(1);
                    long completions = after[0] - before[0];
                    long covered = after[1] - before[1];
                    // 128 READs per queue pair, one signaled in 32: 8 per batch (a post list split by the pump
                    // may add a few); 256 before.
                    assertTrue(completions <= 3 * 16, "3 batches of 256 READs took " + completions + " completions");
                    assertEquals(3 * 256, completions + covered, "every READ completed once");
                }
                java.lang.foreign.MemorySegment expected = java.lang.foreign.Arena.ofAuto().allocate(256 * 280);
                Engines.fill(expected, 0, 256 * 280, 3);
                for (int i = 0; i < 256; i++) {
                    assertEquals(-1, sink.memory().asSlice(i * 280L, 280).mismatch(expected.asSlice((255 - i) * 280L,
                        280)), "row " + i);
                }
                barrier.await();
            }
        });
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldKeepASmallBatchOnOneQueuePairAndSpreadOnlyBeyondItsDepth(String transport) {
        // Small transfers cost system calls and wake-ups, not bandwidth: round robin put a 16-row lookup on both
        // queue pairs (two request writes, two response writes, two sockets for the target to serve over tcp0).
        Engines.run(2, Engines.options(transport), TransferSettings.defaults(), (engine, barrier) -> {
            if (engine.rank() == 1) {
                serveRows(engine, barrier, 7);
            } else {
                LocalSegment sink = engine.registerSegment("sink", 256 * 280);
                barrier.await();
                RemoteSegment rows = engine.openSegment("rows");
                try (TransferBatch batch = engine.newBatch(256)) {
                    for (int i = 0; i < 16; i++) {
                        batch.read(sink, i * 280L, rows, (i * 7 % 256) * 280L, 280);
                    }
                    assertTrue(batch.submit().await(), batch.toString());
                    long[] perQueuePair = engine.slicesPostedTo(1);
                    assertEquals(2, perQueuePair.length);
                    assertEquals(16, Math.max(perQueuePair[0], perQueuePair[1]),
                        "a batch of 16 small READs on one queue pair: " + java.util.Arrays.toString(perQueuePair));
                    assertEquals(0, Math.min(perQueuePair[0], perQueuePair[1]));
                    batch.clear();
                    for (int i = 0; i < 256; i++) {
                        batch.read(sink, i * 280L, rows, i * 280L, 280);
                    }
                    assertTrue(batch.submit().await(), batch.toString());
                    long[] after = engine.slicesPostedTo(1);
                    assertEquals(128, after[0] - perQueuePair[0], "beyond one queue pair's depth the batch spreads: "
                        + java.util.Arrays.toString(after));
                    assertEquals(128, after[1] - perQueuePair[1]);
                }
                java.lang.foreign.MemorySegment expected = java.lang.foreign.Arena.ofAuto().allocate(256 * 280);
                Engines.fill(expected, 0, 256 * 280, 7);
                assertEquals(-1, sink.memory().asSlice(0, 256 * 280).mismatch(expected), "every row read back");
                barrier.await();
            }
        });
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldSealSegmentRecordsWithTheJobSecretAndStillTransfer(String transport) {
        CommunicatorOptions options = Engines.options(transport).withAuthSecret("s3cret").withJobId("sealed");
        Engines.run(2, options, TransferSettings.defaults(), (engine, barrier) -> {
            if (engine.rank() == 1) {
                LocalSegment s = engine.registerSegment("secret-target", 4096);
                barrier.await();
                Notification n = engine.pollNotification(20, TimeUnit.SECONDS);
                assertNotNull(n);
                assertArrayEquals("hi".getBytes(StandardCharsets.UTF_8), n.message());
                assertEquals(0x5A, s.memory().get(java.lang.foreign.ValueLayout.JAVA_BYTE, 100));
            } else {
                LocalSegment src = engine.registerSegment("secret-source", 4096);
                src.memory().fill((byte) 0x5A);
                barrier.await();
                try (TransferBatch b = engine.newBatch(1)) {
                    b.write(src, 0, engine.openSegment("secret-target"), 0, 4096);
                    b.notify("hi".getBytes(StandardCharsets.UTF_8));
                    assertTrue(b.submit().await(), b.toString());
                }
            }
        });
    }

    @ParameterizedTest
    @ValueSource(ints = {1, 3})
    void shouldCopyWithinOneRankAndAcrossThreeRanks(int n) {
        Engines.run(n, Engines.options("shm0"), TransferSettings.defaults(), (engine, barrier) -> {
            LocalSegment mine = engine.registerSegment("seg-" + engine.rank(), 1 << 16);
            LocalSegment in = engine.registerSegment("in-" + engine.rank(), (long) n << 16);
            Engines.fill(mine.memory(), 0, 1 << 16, engine.rank());
            barrier.await();
            try (TransferBatch b = engine.newBatch(n)) {
                for (int j = 0; j < n; j++) {
                    b.read(in, (long) j << 16, engine.openSegment("seg-" + j), 0, 1 << 16);
                }
                assertTrue(b.submit().await(), b.toString());
            }
            for (int j = 0; j < n; j++) {
                java.lang.foreign.MemorySegment expected = java.lang.foreign.Arena.ofAuto().allocate(1 << 16);
                Engines.fill(expected, 0, 1 << 16, j);
                assertEquals(Engines.crc(expected, 0, 1 << 16), Engines.crc(in.memory(), (long) j << 16, 1 << 16));
            }
            barrier.await();
        });
    }

    @org.junit.jupiter.api.Test
    void shouldCopyTransfersLargerThanASliceToThisRanksOwnSegment() {
        Engines.run(1, Engines.options("shm0"), TransferSettings.defaults().withSliceBytes(1 << 20),
            (engine, barrier) -> {
                LocalSegment a = engine.registerSegment("self-a", 8 << 20);
                LocalSegment b = engine.registerSegment("self-b", 8 << 20);
                Engines.fill(b.memory(), 0, 8 << 20, 5);
                RemoteSegment self = engine.openSegment("self-a");
                try (TransferBatch batch = engine.newBatch(2)) {
                    batch.write(b, 3, self, 1, (5 << 20) + 3); // 6 slices of 1 MiB if it went to a peer
                    assertTrue(batch.submit().await(java.time.Duration.ofSeconds(10).toNanos()), batch.toString());
                    assertTrue(batch.succeeded(), batch.toString());
                }
                assertEquals(Engines.crc(b.memory(), 3, (5 << 20) + 3), Engines.crc(a.memory(), 1, (5 << 20) + 3));
            });
    }

    @org.junit.jupiter.api.Test
    void shouldReachPeersOnTwoDevicesInOneBatch() {
        // ranks 0 and 1 share a host (shm0), rank 2 is elsewhere (tcp0): rank 0 uses both devices at once
        Engines.run(3, rank -> Engines.options("shm0,tcp0").withHostId(rank < 2 ? "host-a" : "host-b"),
            TransferSettings.defaults(), (engine, barrier) -> {
                LocalSegment mine = engine.registerSegment("two-" + engine.rank(), 2 << 20);
                Engines.fill(mine.memory(), 0, 2 << 20, engine.rank() + 100);
                barrier.await();
                if (engine.rank() == 0) {
                    assertEquals("shm0", engine.deviceFor(1));
                    assertEquals("tcp0", engine.deviceFor(2));
                    try (TransferBatch b = engine.newBatch(2)) {
                        b.read(mine, 0, engine.openSegment("two-1"), 0, 1 << 20);
                        b.read(mine, 1 << 20, engine.openSegment("two-2"), 0, 1 << 20);
                        assertTrue(b.submit().await(), b.toString());
                    }
                    java.lang.foreign.MemorySegment expected = java.lang.foreign.Arena.ofAuto().allocate(1 << 20);
                    for (int j = 1; j <= 2; j++) {
                        Engines.fill(expected, 0, 1 << 20, j + 100);
                        assertEquals(Engines.crc(expected, 0, 1 << 20),
                            Engines.crc(mine.memory(), (long) (j - 1) << 20, 1 << 20), "from rank " + j);
                    }
                }
                barrier.await();
            });
    }

    /**
     * Rank 1's side of the row tests: 256 rows of 280 bytes (an embedding row of D = 64) in segment "rows", filled
     * from {@code seed}, served until rank 0 has read them.
     */
    private static void serveRows(TransferEngine engine, java.util.concurrent.CyclicBarrier barrier, int seed)
        throws Exception {
        LocalSegment table = engine.registerSegment("rows", 256 * 280);
        Engines.fill(table.memory(), 0, 256 * 280, seed);
        barrier.await();
        barrier.await();
    }
}
