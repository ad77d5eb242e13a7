package io.jccl.services.transfer;

import io.jccl.collectives.store.FileStore;
import io.jccl.common.testing.ChildJvm;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Rank 0 here, rank 1 in a child JVM ({@link TransferChild}): transfers between processes, and a peer killed. */
class TransferMultiProcessTest {
    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldTransferBetweenProcessesAndNotifyAfterLanding(String transport, @TempDir Path dir) throws Exception {
        try (ChildJvm child = ChildJvm.start(TransferChild.class, dir.toString(), transport, "verify");
             FileStore store = new FileStore(dir);
             TransferEngine engine = TransferEngine.create(store, 0, 2, Engines.options(transport),
                 TransferSettings.defaults())) {
            child.awaitLine("READY");
            LocalSegment src = engine.registerSegment("parent", 16 << 20);
            LocalSegment back = engine.registerSegment("back", 16 << 20);
            RemoteSegment remote = engine.openSegment("child", Duration.ofSeconds(20));
            try (TransferBatch b = engine.newBatch(1)) {
                for (long size : new long[] {1, 4093, (1 << 20) + 5, 16 << 20}) {
                    long offset = size == 16 << 20 ? 0 : 11;
                    Engines.fill(src.memory(), offset, size, size);
                    b.clear();
                    b.write(src, offset, remote, offset, size);
                    b.notify((size + " " + offset + " " + Engines.crc(src.memory(), offset, size))
                        .getBytes(StandardCharsets.UTF_8));
                    assertTrue(b.submit().await(), b.toString());
                    child.awaitLine("VERIFIED " + size);
                    b.clear();
                    b.read(back, offset, remote, offset, size);
                    assertTrue(b.submit().await(), b.toString());
                    assertEquals(Engines.crc(src.memory(), offset, size), Engines.crc(back.memory(), offset, size));
                }
                b.clear();
                b.write(src, 0, remote, 0, 1);
                b.notify("bye".getBytes(StandardCharsets.UTF_8));
                assertTrue(b.submit().await(), b.toString());
            }
            child.awaitLine("BYE");
            assertTrue(child.process().waitFor(30, TimeUnit.SECONDS));
            assertFalse(child.lines().stream().anyMatch(l -> l.startsWith("MISMATCH")), child.lines().toString());
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldFailTransfersToAKilledPeerWithThePeerNamedAndNeverHang(String transport, @TempDir Path dir)
        throws Exception {
        try (ChildJvm child = ChildJvm.start(TransferChild.class, dir.toString(), transport, "idle");
             FileStore store = new FileStore(dir);
             TransferEngine engine = TransferEngine.create(store, 0, 2, Engines.options(transport),
                 TransferSettings.defaults())) {
            child.awaitLine("READY");
            LocalSegment src = engine.registerSegment("parent", 16 << 20);
            LocalSegment mine = engine.registerSegment("mine", 4096);
            RemoteSegment remote = engine.openSegment("child", Duration.ofSeconds(20));
            RemoteSegment self = engine.openSegment("mine");
            try (TransferBatch b = engine.newBatch(17)) {
                for (int i = 0; i < 16; i++) {
                    b.write(src, (long) i << 20, remote, (long) i << 20, 1 << 20);
                }
                assertTrue(b.submit().await(), b.toString());
                // Kill the peer while batches are in flight: every batch from then on fails its transfers to rank 1
                // with the peer named, within the deadline; the transfer to this rank's own segment still succeeds.
                Thread.ofVirtual().start(() -> child.process().destroyForcibly());
                String failure = null;
                for (int round = 0; round < 10_000 && failure == null; round++) {
                    b.clear();
                    for (int i = 0; i < 16; i++) {
                        b.write(src, (long) i << 20, remote, (long) i << 20, 1 << 20);
                    }
                    int local = b.write(src, 0, self, 0, 4096);
                    b.submit();
                    assertTrue(b.await(Duration.ofSeconds(60).toNanos()), "hung: " + b);
                    assertEquals(TransferStatus.SUCCEEDED, b.status(local), b.toString());
                    for (int t = 0; t < 16 && failure == null; t++) {
                        failure = b.error(t);
                    }
                }
                assertTrue(failure != null && failure.contains("rank 1"), "failure: " + failure);
                assertTrue(failure.contains("exited") || failure.contains("unreachable"), failure);
                // A later batch fails at once, the same way.
                try (TransferBatch again = engine.newBatch(1)) {
                    again.write(src, 0, remote, 0, 4096);
                    again.submit();
                    assertTrue(again.await(Duration.ofSeconds(60).toNanos()), "hung: " + again);
                    assertEquals(TransferStatus.FAILED, again.status(0));
                    assertTrue(again.error(0).contains("rank 1"), again.error(0));
                }
            }
        }
    }
}
