package io.jccl.services.kvcache;

import io.jccl.collectives.store.FileStore;
import io.jccl.common.testing.ChildJvm;
import io.jccl.services.transfer.TransferEngine;
import io.jccl.services.transfer.TransferSettings;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.file.Path;
import java.time.Duration;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Rank 0 here, rank 1 in a child JVM ({@link KvCacheChild}), over shm0 and tcp0: requests between processes with
 * checksums, then the peer killed mid-request: the prefill side's request fails with the receiver named, the decode
 * side's wait stops with the sender named; nothing hangs.
 */
class KvCacheMultiProcessTest {
    private static final Duration WAIT = Duration.ofSeconds(20);

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldSendBetweenProcessesAndFailRequestsToAKilledReceiver(String transport, @TempDir Path dir)
        throws Exception {
        try (ChildJvm child = ChildJvm.start(KvCacheChild.class, dir.toString(), transport, "decode");
             FileStore store = new FileStore(dir);
             TransferEngine engine = TransferEngine.create(store, 0, 2, KvPair.options(transport),
                 TransferSettings.defaults());
             KvBlockPool pool = KvBlockPool.register(engine, "parent", KvPair.LAYOUT, 16)) {
            child.awaitLine("READY");
            try (KvCacheSender sender = KvCacheSender.open(engine, "mp", pool, WAIT)) {
                // 6 requests of 3 blocks through a receiver of 8: the later ones reuse returned blocks.
                for (int id = 1; id <= 6; id++) {
                    int[] table = {id, id + 8, 15 - id};
                    for (int i = 0; i < 3; i++) {
                        KvData.fill(pool.block(table[i]), id, i);
                    }
                    sender.send(id, table, 3, 6, WAIT);
                }
                child.awaitLine("OK 6");
                assertFalse(child.lines().stream().anyMatch(l -> l.startsWith("BAD")), child.lines().toString());
                child.kill();
                // Every request from now on fails with the receiver named, at submit (no blocks come back from a
                // dead receiver) or when awaited; none hangs.
                String failure = null;
                for (long id = 7; id < 10_000 && failure == null; id++) {
                    try {
                        sender.send(id, new int[] {0, 1, 2}, 3, 6, WAIT);
                    } catch (KvCacheException e) {
                        failure = e.getMessage();
                    }
                }
                assertNotNull(failure);
                assertTrue(failure.contains("rank 1"), failure);
                assertTrue(failure.contains("exited") || failure.contains("unreachable") || failure.contains("gone"),
                    failure);
            }
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldStopWaitingForARequestWhenItsSenderIsKilled(String transport, @TempDir Path dir) throws Exception {
        try (FileStore store = new FileStore(dir);
             ChildJvm child = ChildJvm.start(KvCacheChild.class, dir.toString(), transport, "prefill");
             TransferEngine engine = TransferEngine.create(store, 0, 2, KvPair.options(transport),
                 TransferSettings.defaults());
             KvCacheReceiver receiver = KvCacheReceiver.create(engine, "mp", KvPair.LAYOUT, 8)) {
            KvRequest r = receiver.await(1, WAIT);
            assertEquals(1, r.senderRank());
            assertEquals(5, r.tokens());
            assertTrue(KvData.verify(r, KvPair.LAYOUT.blockBytes()));
            child.awaitLine("SENT 1");
            child.kill();
            KvCacheException gone = assertThrows(KvCacheException.class, () -> receiver.await(2, WAIT));
            assertTrue(gone.getMessage().contains("sender is gone") && gone.getMessage().contains("rank 1"),
                gone.getMessage());
            // The released request's return fails (the sender is dead): reported, not hung.
            receiver.release(r);
            assertThrows(KvCacheException.class, receiver::flushReturns);
        }
    }
}
