package io.jccl.services.embedding;

import io.jccl.services.transfer.TransferEngine;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.time.Duration;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Lookups, the cache, updates under the seqlock and invalidations, ranks as threads over shm0 and tcp0. */
class EmbeddingCacheTest {
    private static final int ROWS = 1000;

    private static EmbeddingServer server(TransferEngine e, String name, int dim) {
        return EmbeddingServer.create(e, name, ROWS, dim, (r, out) -> {
            for (int j = 0; j < out.length; j++) {
                out[j] = Tables.value(r, TableLayout.INITIAL_VERSION, j);
            }
        });
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "shm0/read", "tcp0"})
    void shouldLookUpBatchesOneSidedAndServeHotRowsFromTheCache(String transport) {
        Tables.run(2, transport, (e, barrier) -> {
            if (e.rank() == 0) {
                try (EmbeddingServer s = server(e, "t", 63)) {
                    barrier.await();
                    barrier.await();
                }
                return;
            }
            barrier.await();
            try (EmbeddingClient c = Tables.open(e, "t", 64, transport);
                 EmbeddingLookup l = c.newLookup(256)) {
                assertEquals(ROWS, c.rows());
                assertEquals(63, c.dim());
                SplittableRandom rnd = new SplittableRandom(7);
                for (int round = 0; round < 4; round++) {
                    l.clear();
                    for (int i = 0; i < 256; i++) {
                        // duplicates; rounds 0-2: 52 distinct rows (they fit the 64-row cache), round 3: a scan
                        l.add(round == 3 ? 100 + i : i < 16 ? i % 4 : 4 + rnd.nextInt(48));
                    }
                    assertTrue(l.execute(), () -> l.error(0));
                    for (int i = 0; i < 256; i++) {
                        assertNull(Tables.check(l, i, 63));
                        assertEquals(TableLayout.INITIAL_VERSION, l.version(i));
                        assertEquals(round == 3 ? 100 + i : l.row(i), l.row(i));
                    }
                }
                assertEquals(2 * 256, c.cacheHits(), "rounds 1 and 2 hit");
                assertEquals(2 * 256, c.cacheMisses(), "rounds 0 and 3 miss (duplicates in a batch too)");
                assertTrue(c.cachedRows() <= 64, "bounded: " + c.cachedRows());
                float[] out = new float[63];
                l.copyTo(0, out, 0);
                assertEquals(Tables.value(l.row(0), 2, 62), out[62]);
            }
            barrier.await();
        });
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldDropACachedRowWhenItsInvalidationArrives(String transport) {
        Tables.run(3, transport, (e, barrier) -> {
            int dim = 16;
            if (e.rank() == 0) {
                try (EmbeddingServer s = server(e, "inv", dim)) {
                    barrier.await(); // clients open and cache row 5 and 6
                    barrier.await();
                    assertEquals(2, s.subscribers());
                    long v = s.update(5, Tables.row(5, 4, dim)); // the server's own update
                    assertEquals(4, v);
                    barrier.await(); // clients see row 5 dropped and read it again
                    barrier.await(); // rank 2 updates row 6 remotely, rank 1 sees it dropped
                    barrier.await();
                    assertEquals(4, s.version(6));
                    barrier.await();
                }
                return;
            }
            barrier.await();
            try (EmbeddingClient c = EmbeddingClient.open(e, "inv", Duration.ofSeconds(20), 32);
                 EmbeddingLookup l = c.newLookup(2)) {
                l.add(5);
                l.add(6);
                assertTrue(l.execute());
                assertTrue(c.isCached(5) && c.isCached(6));
                barrier.await();
                barrier.await();
                awaitDropped(c, 5);
                l.clear();
                l.add(5);
                assertTrue(l.execute());
                assertEquals(4, l.version(0));
                assertNull(Tables.check(l, 0, dim));
                barrier.await();
                if (e.rank() == 2) {
                    assertEquals(4, c.update(6, Tables.row(6, 4, dim)));
                    assertFalse(c.isCached(6), "the writer's own cache drops the row at once");
                } else {
                    awaitDropped(c, 6);
                }
                barrier.await();
                l.clear();
                l.add(6);
                assertTrue(l.execute());
                assertEquals(4, l.version(0));
                assertNull(Tables.check(l, 0, dim));
                barrier.await();
            }
        });
    }

    private static void awaitDropped(EmbeddingClient c, long row) throws InterruptedException {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (c.isCached(row)) {
            c.processInvalidations();
            assertTrue(System.nanoTime() < until, "row " + row + " never invalidated");
            Thread.sleep(1);
        }
        assertTrue(c.invalidationsReceived() >= 1);
    }

    /**
     * A writer rewrites 8 hot rows as fast as it can (content derived from row and version) while a reader looks
     * them up: every row a lookup returns holds exactly its version's content, and some reads found a writer in the
     * row (so the seqlock was exercised).
     */
    @ParameterizedTest
    @ValueSource(strings = {"shm0", "shm0/read", "tcp0"})
    void shouldNeverReturnATornRowDuringConcurrentRemoteUpdates(String transport) {
        int dim = 256;
        int hot = 8;
        Tables.run(3, transport, (e, barrier) -> {
            if (e.rank() == 0) {
                try (EmbeddingServer s = server(e, "hammer", dim)) {
                    barrier.await();
                    barrier.await();
                }
                return;
            }
            barrier.await();
            try (EmbeddingClient c = Tables.open(e, "hammer", 0, transport)) {
                assertEquals(transport.equals("shm0"), c.isDirect());
                if (e.rank() == 1) {
                    long[] version = new long[hot];
                    long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(transport.equals("shm0") ? 1500
                        : 3000);
                    int n = 0;
                    while (System.nanoTime() < until) {
                        int r = n++ % hot;
                        long next = version[r] == 0 ? 4 : version[r] + 2;
                        version[r] = c.update(r, Tables.row(r, next, dim));
                        assertEquals(next, version[r]);
                    }
                } else {
                    try (EmbeddingLookup l = c.newLookup(64)) {
                        long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(transport.equals("shm0")
                            ? 1500 : 3000);
                        long rowsChecked = 0;
                        long[] last = new long[hot];
                        while (System.nanoTime() < until) {
                            l.clear();
                            for (int i = 0; i < 64; i++) {
                                l.add(i % hot);
                            }
                            assertTrue(l.execute(), () -> l.error(0));
                            for (int i = 0; i < 64; i++) {
                                String bad = Tables.check(l, i, dim);
                                assertNull(bad, bad);
                                int r = (int) l.row(i);
                                assertTrue(l.version(i) >= last[r] || i >= hot, "version went back");
                                last[r] = Math.max(last[r], l.version(i));
                            }
                            rowsChecked += 64;
                        }
                        assertTrue(rowsChecked > 64);
                        System.out.println(transport + ": " + rowsChecked + " rows checked, " + c.tornReads()
                            + " reads found a writer and were retried");
                    }
                }
            }
            barrier.await();
        });
    }

    @Test
    void shouldNeverReturnATornRowWhileTheServerUpdatesLocally() {
        int dim = 64;
        Tables.run(2, "shm0", (e, barrier) -> {
            if (e.rank() == 0) {
                try (EmbeddingServer s = server(e, "local", dim)) {
                    barrier.await();
                    AtomicBoolean stop = new AtomicBoolean();
                    long v = TableLayout.INITIAL_VERSION;
                    barrier.await(); // reader starts
                    long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(1000);
                    while (System.nanoTime() < until && !stop.get()) {
                        v += 2;
                        for (int r = 0; r < 4; r++) {
                            s.update(r, Tables.row(r, v, dim));
                        }
                    }
                    barrier.await();
                }
                return;
            }
            barrier.await();
            try (EmbeddingClient c = Tables.open(e, "local", 0, "shm0");
                 EmbeddingLookup l = c.newLookup(32)) {
                barrier.await();
                long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(1000);
                while (System.nanoTime() < until) {
                    l.clear();
                    for (int i = 0; i < 32; i++) {
                        l.add(i % 4);
                    }
                    assertTrue(l.execute(), () -> l.error(0));
                    for (int i = 0; i < 32; i++) {
                        String bad = Tables.check(l, i, dim);
                        assertNull(bad, bad);
                    }
                }
                barrier.await();
            }
        });
    }
}
