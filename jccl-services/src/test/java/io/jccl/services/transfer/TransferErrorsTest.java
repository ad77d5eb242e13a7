package io.jccl.services.transfer;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.charset.StandardCharsets;
import java.time.Duration;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Bad input gets a clear error for that request only; the batch's other transfers go ahead; nothing hangs. */
class TransferErrorsTest {
    @Test
    void shouldRefuseUnknownSegmentNamesAtOnceOrAfterTheWait() {
        Engines.run(2, Engines.options("shm0"), TransferSettings.defaults(), (engine, barrier) -> {
            TransferException e = assertThrows(TransferException.class, () -> engine.openSegment("no-such-segment"));
            assertTrue(e.getMessage().contains("no segment named 'no-such-segment'"), e.getMessage());
            e = assertThrows(TransferException.class, () -> engine.openSegment("late", Duration.ofMillis(50)));
            assertTrue(e.getMessage().contains("waited 50 ms"), e.getMessage());
            assertThrows(IllegalArgumentException.class, () -> engine.openSegment("bad name"));
            assertThrows(IllegalArgumentException.class, () -> engine.registerSegment("/x", 1));
            barrier.await();
            if (engine.rank() == 0) {
                engine.registerSegment("taken", 64);
            }
            barrier.await();
            if (engine.rank() == 1) {
                e = assertThrows(TransferException.class, () -> engine.registerSegment("taken", 64));
                assertTrue(e.getMessage().contains("already registered by rank 0"), e.getMessage());
            }
        });
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldFailOutOfRangeTransfersLocallyAndRunTheOthers(String transport) {
        Engines.run(2, Engines.options(transport), TransferSettings.defaults(), (engine, barrier) -> {
            if (engine.rank() == 1) {
                engine.registerSegment("small", 1000);
                barrier.await();
            } else {
                LocalSegment src = engine.registerSegment("src", 4096);
                LocalSegment back = engine.registerSegment("back", 4096);
                Engines.fill(src.memory(), 0, 4096, 9);
                barrier.await();
                RemoteSegment small = engine.openSegment("small");
                try (TransferBatch b = engine.newBatch(8)) {
                    int good = b.write(src, 0, small, 0, 500);
                    int pastRemoteEnd = b.write(src, 0, small, 600, 401);
                    int negative = b.write(src, -1, small, 0, 10);
                    int empty = b.write(src, 0, small, 0, 0);
                    int pastLocalEnd = b.read(src, 4000, small, 0, 100);
                    int overflow = b.write(src, 0, small, Long.MAX_VALUE - 2, 10);
                    int good2 = b.write(src, 500, small, 500, 500);
                    // failed before anything was posted
                    assertEquals(TransferStatus.FAILED, b.status(pastRemoteEnd));
                    assertTrue(b.error(pastRemoteEnd).contains("outside segment 'small' of rank 1"),
                        b.error(pastRemoteEnd));
                    assertTrue(b.error(negative).contains("local range [-1"), b.error(negative));
                    assertTrue(b.error(empty).contains("at least 1"), b.error(empty));
                    assertTrue(b.error(pastLocalEnd).contains("outside segment 'src'"), b.error(pastLocalEnd));
                    assertEquals(TransferStatus.FAILED, b.status(overflow));
                    assertEquals(TransferStatus.PENDING, b.status(good));
                    b.submit();
                    assertTrue(b.await(Duration.ofSeconds(30).toNanos()), "hung: " + b);
                    assertEquals(TransferStatus.SUCCEEDED, b.status(good), b.toString());
                    assertEquals(TransferStatus.SUCCEEDED, b.status(good2), b.toString());
                    assertEquals(5, b.failedCount());
                    b.clear();
                    b.read(back, 0, small, 0, 1000);
                    assertTrue(b.submit().await(), b.toString());
                }
                assertEquals(Engines.crc(src.memory(), 0, 1000), Engines.crc(back.memory(), 0, 1000));
            }
        });
    }

    @Test
    void shouldRefuseAnOversizedBatchWithoutTouchingWhatItHolds() {
        TransferSettings settings = TransferSettings.defaults().withMaxBatchTransfers(16);
        Engines.run(2, Engines.options("shm0"), settings, (engine, barrier) -> {
            if (engine.rank() == 1) {
                engine.registerSegment("dst", 1 << 12);
                barrier.await();
            } else {
                LocalSegment src = engine.registerSegment("src", 1 << 12);
                barrier.await();
                IllegalArgumentException tooBig = assertThrows(IllegalArgumentException.class,
                    () -> engine.newBatch(17));
                assertTrue(tooBig.getMessage().contains("JCCL_TRANSFER_BATCH_MAX"), tooBig.getMessage());
                RemoteSegment dst = engine.openSegment("dst");
                try (TransferBatch b = engine.newBatch(2)) {
                    b.write(src, 0, dst, 0, 100);
                    b.write(src, 100, dst, 100, 100);
                    TransferException full = assertThrows(TransferException.class,
                        () -> b.write(src, 200, dst, 200, 100));
                    assertTrue(full.getMessage().contains("at most 2 transfers"), full.getMessage());
                    assertEquals(2, b.size());
                    assertTrue(b.submit().await(), b.toString());
                }
            }
        });
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldFailOnlyTheTransferToAnUnregisteredSegmentAndRetryTheFlushedOnes(String transport) {
        TransferSettings settings = TransferSettings.defaults().withSliceBytes(256 * 1024);
        Engines.run(2, Engines.options(transport), settings, (engine, barrier) -> {
            if (engine.rank() == 1) {
                engine.registerSegment("keep", 8 << 20);
                LocalSegment gone = engine.registerSegment("gone", 1 << 20);
                barrier.await(); // rank 0 opened both
                gone.close();
                barrier.await();
                assertNotNull(engine.pollNotification(20, java.util.concurrent.TimeUnit.SECONDS),
                    "the notification of the batch after the reconnection");
            } else {
                LocalSegment src = engine.registerSegment("src", 8 << 20);
                LocalSegment back = engine.registerSegment("back", 8 << 20);
                Engines.fill(src.memory(), 0, 8 << 20, 77);
                RemoteSegment keep = engine.openSegment("keep", Duration.ofSeconds(10));
                RemoteSegment gone = engine.openSegment("gone", Duration.ofSeconds(10));
                barrier.await();
                barrier.await(); // "gone" is unregistered now; this handle still names its old key
                try (TransferBatch b = engine.newBatch(16)) {
                    // 4 slices each over 2 queue pairs: requests after the failing one are flushed and go again
                    for (int i = 0; i < 4; i++) {
                        b.write(src, (long) i << 20, keep, (long) i << 20, 1 << 20);
                    }
                    int revoked = b.write(src, 0, gone, 0, 1 << 20);
                    for (int i = 4; i < 8; i++) {
                        b.write(src, (long) i << 20, keep, (long) i << 20, 1 << 20);
                    }
                    b.notify("first".getBytes(StandardCharsets.UTF_8));
                    b.submit();
                    assertTrue(b.await(Duration.ofSeconds(30).toNanos()), "hung: " + b);
                    assertEquals(1, b.failedCount(), b.toString());
                    assertEquals(TransferStatus.FAILED, b.status(revoked));
                    assertTrue(b.error(revoked).contains("REM_ACCESS_ERR") && b.error(revoked).contains("'gone'"),
                        b.error(revoked));
                    assertNotNull(b.notificationError(), "no notification when a transfer failed");
                    // the link was rebuilt: the same queue pairs' peers keep working
                    b.clear();
                    b.read(back, 0, keep, 0, 8 << 20);
                    b.notify("second".getBytes(StandardCharsets.UTF_8));
                    assertTrue(b.submit().await(), b.toString());
                }
                assertEquals(Engines.crc(src.memory(), 0, 8 << 20), Engines.crc(back.memory(), 0, 8 << 20));
                assertTrue(engine.generationTo(1) >= 2, "generation " + engine.generationTo(1));
                TransferException e = assertThrows(TransferException.class, () -> engine.openSegment("gone"));
                assertTrue(e.getMessage().contains("no segment named 'gone'"), e.getMessage());
            }
        });
    }

    @Test
    void shouldRefuseANotificationForSeveralTargets() {
        Engines.run(3, Engines.options("shm0"), TransferSettings.defaults(), (engine, barrier) -> {
            engine.registerSegment("s" + engine.rank(), 128);
            barrier.await();
            if (engine.rank() == 0) {
                LocalSegment mine = engine.openSegment("s0").self;
                try (TransferBatch b = engine.newBatch(2)) {
                    b.write(mine, 0, engine.openSegment("s1"), 0, 8);
                    b.write(mine, 0, engine.openSegment("s2"), 0, 8);
                    b.notify(new byte[1]);
                    assertThrows(IllegalArgumentException.class, b::submit);
                    assertThrows(IllegalArgumentException.class, () -> b.notify(new byte[65]));
                }
            }
        });
    }

    @Test
    void shouldFailATransferThatNamesAnotherEnginesSegment() {
        Engines.run(2, Engines.options("shm0"), TransferSettings.defaults(), (engine, barrier) -> {
            LocalSegment mine = engine.registerSegment("mine-" + engine.rank(), 4096);
            barrier.await();
            // a second job in this process, with an engine of its own: its handles are not this engine's
            io.jccl.collectives.store.InMemoryStore other = new io.jccl.collectives.store.InMemoryStore();
            if (engine.rank() == 0) {
                try (TransferEngine second = TransferEngine.create(other, 0, 1, Engines.options("shm0"),
                    TransferSettings.defaults())) {
                    LocalSegment theirs = second.registerSegment("theirs", 4096);
                    RemoteSegment peer = engine.openSegment("mine-1");
                    try (TransferBatch b = engine.newBatch(3)) {
                        int foreignLocal = b.write(theirs, 0, peer, 0, 16);
                        int foreignRemote = b.write(mine, 0, second.openSegment("theirs"), 0, 16);
                        int good = b.write(mine, 0, peer, 0, 16);
                        assertTrue(b.submit().await(Duration.ofSeconds(30).toNanos()), "hung: " + b);
                        assertEquals(TransferStatus.FAILED, b.status(foreignLocal));
                        assertTrue(b.error(foreignLocal).contains("another transfer engine"), b.error(foreignLocal));
                        assertEquals(TransferStatus.FAILED, b.status(foreignRemote));
                        assertEquals(TransferStatus.SUCCEEDED, b.status(good), b.toString());
                    }
                }
            }
        });
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldFailTransfersToAPeerThatClosedItsEngineWithoutWaitingForTheDeadline(String transport) {
        Engines.run(2, Engines.options(transport), TransferSettings.defaults(), (engine, barrier) -> {
            if (engine.rank() == 1) {
                engine.registerSegment("closing", 1 << 20);
                barrier.await(); // rank 0 opened it and wrote once
                barrier.await();
                engine.close();
                barrier.await();
            } else {
                LocalSegment src = engine.registerSegment("src", 1 << 20);
                RemoteSegment closing = engine.openSegment("closing", Duration.ofSeconds(20));
                try (TransferBatch b = engine.newBatch(1)) {
                    b.write(src, 0, closing, 0, 1 << 20);
                    assertTrue(b.submit().await(), b.toString());
                    barrier.await();
                    barrier.await();
                    barrier.await(); // rank 1's engine is closed
                    // These fail naming the peer, the later ones because it closed its engine, not at the deadline
                    // (whose message says "no completion within"): the reconnection sees rank 1's closed mark.
                    for (int i = 0; i < 3; i++) {
                        b.clear();
                        b.write(src, 0, closing, 0, 1 << 20);
                        b.submit().await();
                        assertEquals(TransferStatus.FAILED, b.status(0));
                        assertTrue(b.error(0).contains("rank 1"), b.error(0));
                    }
                    assertTrue(b.error(0).contains("closed its transfer engine"), b.error(0));
                }
            }
        });
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldFailOnlyTheTransferWithAWrongKey(String transport) {
        Engines.run(2, Engines.options(transport), TransferSettings.defaults(), (engine, barrier) -> {
            if (engine.rank() == 1) {
                engine.registerSegment("keyed", 1 << 20);
                barrier.await();
            } else {
                LocalSegment src = engine.registerSegment("src", 1 << 20);
                LocalSegment back = engine.registerSegment("back", 1 << 20);
                Engines.fill(src.memory(), 0, 1 << 20, 3);
                RemoteSegment keyed = engine.openSegment("keyed", Duration.ofSeconds(20));
                // the same segment's address under a key its owner never issued (a forged or stale record)
                RemoteSegment forged = new RemoteSegment(engine, "keyed", 1, keyed.length(), keyed.address,
                    keyed.rkey ^ 0x5a5a5a5a, null);
                try (TransferBatch b = engine.newBatch(4)) {
                    int before = b.write(src, 0, keyed, 0, 256 << 10);
                    int wrong = b.write(src, 0, forged, 0, 4096);
                    int after = b.write(src, 256 << 10, keyed, 256 << 10, 768 << 10);
                    b.submit().await();
                    assertEquals(TransferStatus.SUCCEEDED, b.status(before), b.toString());
                    assertEquals(TransferStatus.FAILED, b.status(wrong), b.toString());
                    assertTrue(b.error(wrong).contains("REM_ACCESS_ERR"), b.error(wrong));
                    assertEquals(TransferStatus.SUCCEEDED, b.status(after), b.toString());
                    b.clear();
                    b.read(back, 0, keyed, 0, 1 << 20);
                    assertTrue(b.submit().await(), b.toString());
                }
                assertEquals(Engines.crc(src.memory(), 0, 1 << 20), Engines.crc(back.memory(), 0, 1 << 20));
                barrier.await();
            }
        });
    }
}
