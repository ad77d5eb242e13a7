package io.jccl.services.kvcache;

import io.jccl.services.transfer.TransferEngine;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.time.Duration;
import java.util.concurrent.CyclicBarrier;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Prefill (rank 0) to decode (rank 1) over shm0 and tcp0, two engines in this JVM: whole requests with one
 * notification, coalesced runs, blocks returned and reused, back-pressure, and every bad input of docs/services.md's
 * KV-cache table failing that request only, without hanging.
 */
class KvCacheTransferTest {
    private static final Duration WAIT = Duration.ofSeconds(20);
    private static final int BYTES = KvPair.LAYOUT.blockBytes();

    private static int[] fillRequest(KvBlockPool pool, long id, int[] table) {
        for (int i = 0; i < table.length; i++) {
            KvData.fill(pool.block(table[i]), id, i);
        }
        return table;
    }

    private static void expect(KvRequest r, long id, int blocks, int tokens) {
        assertEquals(id, r.requestId());
        assertEquals(blocks, r.blockCount());
        assertEquals(tokens, r.tokens());
        assertEquals(0, r.senderRank());
        assertTrue(KvData.verify(r, BYTES), "checksum mismatch in " + r);
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldSendWholeRequestsWithCoalescedRunsAndReuseReturnedBlocks(String transport) {
        KvPair.run(transport, (TransferEngine e, CyclicBarrier barrier) -> {
            try (KvBlockPool pool = KvBlockPool.register(e, "prefill", KvPair.LAYOUT, 32)) {
                KvPair.await(barrier); // the receiver exists
                try (KvCacheSender sender = KvCacheSender.open(e, "t", pool, WAIT)) {
                    assertEquals(16, sender.receiverBlockCount());
                    // Blocks 4,5,6 then 9 → receiver blocks 0..3: two runs, two block WRITEs.
                    KvCacheSender.Send s = sender.submit(1, fillRequest(pool, 1, new int[] {4, 5, 6, 9}), 4, 7,
                        Duration.ZERO);
                    s.await();
                    assertEquals(2, s.blockWrites());
                    assertArrayEquals(new int[] {0, 1, 2, 3}, s.receiverBlocks());
                    int[] table = new int[8];
                    pool.allocate(8, table);
                    KvCacheSender.Send s2 = sender.submit(2, fillRequest(pool, 2, table), 8, 16, Duration.ZERO);
                    s2.await();
                    assertEquals(1, s2.blockWrites());
                    // 12 of 16 receiver blocks are taken unless returned: 8 more wait for request 1's return.
                    int[] big = new int[8];
                    for (int i = 0; i < big.length; i++) {
                        big[i] = 31 - i; // descending: eight runs
                    }
                    KvCacheSender.Send s3 = sender.submit(3, fillRequest(pool, 3, big), 8, 15, WAIT);
                    s3.await();
                    assertEquals(8, s3.blockWrites());
                    KvPair.await(barrier); // the receiver verified and released everything
                    long until = System.nanoTime() + WAIT.toNanos();
                    while (sender.receiverFreeBlocks() < 16 && System.nanoTime() < until) {
                        Thread.sleep(1);
                    }
                    assertEquals(16, sender.receiverFreeBlocks());
                }
            }
        }, (TransferEngine e, CyclicBarrier barrier) -> {
            try (KvCacheReceiver receiver = KvCacheReceiver.create(e, "t", KvPair.LAYOUT, 16)) {
                KvPair.await(barrier);
                KvRequest r1 = receiver.await(1, WAIT);
                expect(r1, 1, 4, 7);
                KvRequest r2 = receiver.await(2, WAIT);
                expect(r2, 2, 8, 16);
                receiver.release(r1);
                KvRequest r3 = receiver.await(3, WAIT);
                expect(r3, 3, 8, 15);
                receiver.release(r2);
                receiver.release(r3);
                receiver.flushReturns();
                assertEquals(16, receiver.pool().freeCount());
                // The engine's own queue saw none of the KV messages: the receiver consumed them.
                assertNull(e.pollNotification());
                KvPair.await(barrier);
            }
        });
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldWaitForFreeBlocksOrFailClearlyAndNeverOverwriteHeldBlocks(String transport) {
        KvPair.run(transport, (TransferEngine e, CyclicBarrier barrier) -> {
            try (KvBlockPool pool = KvBlockPool.register(e, "prefill", KvPair.LAYOUT, 8)) {
                KvPair.await(barrier);
                try (KvCacheSender sender = KvCacheSender.open(e, "t", pool, WAIT)) {
                    sender.send(1, fillRequest(pool, 1, new int[] {0, 1, 2, 3}), 4, 8, Duration.ZERO);
                    KvPair.await(barrier); // the receiver holds request 1
                    int[] next = fillRequest(pool, 2, new int[] {4, 5});
                    KvCacheException full = assertThrows(KvCacheException.class,
                        () -> sender.submit(2, next, 2, 4, Duration.ZERO));
                    assertTrue(full.getMessage().contains("0 free blocks of 4")
                        && full.getMessage().contains("request 2"), full.getMessage());
                    KvPair.await(barrier); // the receiver checked request 1 is intact, then released it
                    sender.send(2, next, 2, 4, WAIT);
                    KvPair.await(barrier);
                }
            }
        }, (TransferEngine e, CyclicBarrier barrier) -> {
            try (KvCacheReceiver receiver = KvCacheReceiver.create(e, "t", KvPair.LAYOUT, 4)) {
                KvPair.await(barrier);
                KvRequest r1 = receiver.await(1, WAIT);
                expect(r1, 1, 4, 8);
                KvPair.await(barrier);
                KvPair.await(barrier);
                expect(r1, 1, 4, 8); // nothing overwrote the held blocks
                // A second sender for this receiver is refused.
                try (KvBlockPool other = KvBlockPool.register(e, "other", KvPair.LAYOUT, 2)) {
                    KvCacheException twice = assertThrows(KvCacheException.class,
                        () -> KvCacheSender.open(e, "t", other, WAIT));
                    assertTrue(twice.getMessage().contains("already has a sender"), twice.getMessage());
                }
                receiver.release(r1);
                expect(receiver.await(2, WAIT), 2, 2, 4);
                KvPair.await(barrier);
            }
        });
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldRefuseBadInputForThatRequestOnly(String transport) {
        KvPair.run(transport, (TransferEngine e, CyclicBarrier barrier) -> {
            try (KvBlockPool pool = KvBlockPool.register(e, "prefill", KvPair.LAYOUT, 8);
                 KvBlockPool wide = KvBlockPool.register(e, "wide", new KvCacheLayout(4, 2, 2, 16, 2), 8)) {
                KvPair.await(barrier);
                KvCacheException layout = assertThrows(KvCacheException.class,
                    () -> KvCacheSender.open(e, "t", wide, WAIT));
                assertTrue(layout.getMessage().contains("layout"), layout.getMessage());
                KvCacheException missing = assertThrows(KvCacheException.class,
                    () -> KvCacheSender.open(e, "nobody", pool, Duration.ZERO));
                assertTrue(missing.getMessage().contains("no segment named 'kv/nobody'"), missing.getMessage());
                try (KvCacheSender sender = KvCacheSender.open(e, "t", pool, WAIT)) {
                    KvCacheException range = assertThrows(KvCacheException.class,
                        () -> sender.submit(7, new int[] {0, 8}, 2, 3, WAIT));
                    assertTrue(range.getMessage().contains("entry 1 = 8 is outside 0..7"), range.getMessage());
                    KvCacheException tokens = assertThrows(KvCacheException.class,
                        () -> sender.submit(7, new int[] {0}, 1, 3, WAIT));
                    assertTrue(tokens.getMessage().contains("3 tokens do not fit 1 blocks"), tokens.getMessage());
                    assertThrows(KvCacheException.class, () -> sender.submit(7, new int[] {0}, 2, 1, WAIT));
                    assertEquals(16, sender.receiverFreeBlocks()); // nothing was taken by the refused requests
                    sender.send(5, fillRequest(pool, 5, new int[] {0, 1}), 2, 4, WAIT);
                    KvCacheException dup = assertThrows(KvCacheException.class,
                        () -> sender.submit(5, new int[] {2}, 1, 1, WAIT));
                    assertTrue(dup.getMessage().contains("in flight or held"), dup.getMessage());
                    KvPair.await(barrier); // the receiver holds request 5 until here
                    // The prefill pool's own checks.
                    int[] t = new int[2];
                    pool.allocate(2, t);
                    pool.free(t, 2);
                    KvCacheException twice = assertThrows(KvCacheException.class, () -> pool.free(t, 2));
                    assertTrue(twice.getMessage().contains("double free"), twice.getMessage());
                    KvCacheException out = assertThrows(KvCacheException.class, () -> pool.free(new int[] {-1}, 1));
                    assertTrue(out.getMessage().contains("outside 0..7"), out.getMessage());
                    assertEquals(8, pool.freeCount());
                    KvPair.await(barrier); // the receiver released request 5 and checked its bad input
                    sender.send(6, fillRequest(pool, 6, new int[] {3}), 1, 2, WAIT); // the next request goes ahead
                    KvPair.await(barrier);
                }
            }
        }, (TransferEngine e, CyclicBarrier barrier) -> {
            try (KvCacheReceiver receiver = KvCacheReceiver.create(e, "t", KvPair.LAYOUT, 16)) {
                KvPair.await(barrier);
                expect(receiver.await(5, WAIT), 5, 2, 4);
                KvPair.await(barrier);
                receiver.release(5);
                KvCacheException twice = assertThrows(KvCacheException.class, () -> receiver.release(5));
                assertTrue(twice.getMessage().contains("double release"), twice.getMessage());
                KvCacheException unknown = assertThrows(KvCacheException.class, () -> receiver.release(777));
                assertTrue(unknown.getMessage().contains("unknown request 777"), unknown.getMessage());
                assertThrows(IllegalStateException.class, () -> receiver.pool().allocate(1, new int[1]));
                KvCacheException late = assertThrows(KvCacheException.class,
                    () -> receiver.await(778, Duration.ofMillis(200)));
                assertTrue(late.getMessage().contains("did not arrive"), late.getMessage());
                KvPair.await(barrier);
                expect(receiver.await(6, WAIT), 6, 1, 2);
                receiver.release(6);
                receiver.flushReturns();
                KvPair.await(barrier);
            }
        });
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldFailRequestsOfAGoneReceiverOrSenderWithTheReasonAndNeverHang(String transport) {
        KvPair.run(transport, (TransferEngine e, CyclicBarrier barrier) -> {
            try (KvBlockPool pool = KvBlockPool.register(e, "prefill", KvPair.LAYOUT, 8)) {
                KvPair.await(barrier);
                KvCacheSender sender = KvCacheSender.open(e, "t", pool, WAIT);
                KvCacheSender.open(e, "u", pool, WAIT); // never sends: its receiver waits for request 42
                sender.send(1, fillRequest(pool, 1, new int[] {0}), 1, 1, WAIT);
                KvPair.await(barrier); // the receiver "t" is closed: its pool revoked
                KvCacheException gone = assertThrows(KvCacheException.class,
                    () -> sender.send(2, fillRequest(pool, 2, new int[] {1}), 1, 1, WAIT));
                assertTrue(gone.getMessage().contains("request 2") && gone.getMessage().contains("refused"),
                    gone.getMessage());
                KvPair.await(barrier); // the receiver of "u" waits for request 42; this engine closes now
            }
        }, (TransferEngine e, CyclicBarrier barrier) -> {
            KvCacheReceiver t = KvCacheReceiver.create(e, "t", KvPair.LAYOUT, 4);
            try (KvCacheReceiver u = KvCacheReceiver.create(e, "u", KvPair.LAYOUT, 4)) {
                KvPair.await(barrier);
                expect(t.await(1, WAIT), 1, 1, 1);
                t.close();
                KvPair.await(barrier);
                KvPair.await(barrier);
                KvCacheException gone = assertThrows(KvCacheException.class, () -> u.await(42, WAIT));
                assertTrue(gone.getMessage().contains("sender is gone") && gone.getMessage().contains("rank 0"),
                    gone.getMessage());
            }
        });
    }
}
