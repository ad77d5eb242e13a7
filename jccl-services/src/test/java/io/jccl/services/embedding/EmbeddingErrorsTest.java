package io.jccl.services.embedding;

import io.jccl.services.transfer.LocalSegment;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Bad input: a clear error for that request, nothing hangs (every wait bounded by the tests' 20 s JCCL_TIMEOUT). */
class EmbeddingErrorsTest {
    @Test
    void shouldNameAnUnknownTableAndASegmentThatIsNoTable() {
        Tables.run(2, "shm0", (e, barrier) -> {
            if (e.rank() == 0) {
                LocalSegment plain = e.registerSegment(EmbeddingServer.segmentName("plain"), 4096);
                plain.memory().fill((byte) 0x5A);
                barrier.await();
                barrier.await();
                plain.close();
                return;
            }
            barrier.await();
            EmbeddingException unknown = assertThrows(EmbeddingException.class,
                () -> EmbeddingClient.open(e, "nope", Duration.ofMillis(100), 0));
            assertTrue(unknown.getMessage().contains("no embedding table 'nope'"), unknown.getMessage());
            EmbeddingException notTable = assertThrows(EmbeddingException.class,
                () -> EmbeddingClient.open(e, "plain", Duration.ofSeconds(5), 0));
            assertTrue(notTable.getMessage().contains("is not an embedding table"), notTable.getMessage());
            assertThrows(IllegalArgumentException.class, () -> EmbeddingServer.create(e, "bad", 10, 0));
            assertThrows(IllegalArgumentException.class, () -> EmbeddingServer.create(e, "bad", 0, 8));
            barrier.await();
        });
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "shm0/read", "tcp0"})
    void shouldFailRowsOutOfRangeAloneAndStaleKeysOfARecreatedTableWithTheReason(String transport) {
        Tables.run(2, transport, (e, barrier) -> {
            if (e.rank() == 0) {
                EmbeddingServer s = EmbeddingServer.create(e, "t", 100, 8, (r, out) -> {
                    for (int j = 0; j < out.length; j++) {
                        out[j] = Tables.value(r, TableLayout.INITIAL_VERSION, j);
                    }
                });
                barrier.await();
                barrier.await(); // out-of-range checked
                s.close(); // its keys are refused from now on
                try (EmbeddingServer again = EmbeddingServer.create(e, "t", 100, 8)) {
                    barrier.await();
                    barrier.await();
                }
                return;
            }
            barrier.await();
            try (EmbeddingClient c = Tables.open(e, "t", 16, transport);
                 EmbeddingLookup l = c.newLookup(4)) {
                l.add(5);
                l.add(-1);
                l.add(100);
                l.add(99);
                assertFalse(l.execute());
                assertEquals(2, l.failedCount());
                assertTrue(l.succeeded(0) && l.succeeded(3));
                assertNull(Tables.check(l, 0, 8));
                assertNull(Tables.check(l, 3, 8));
                assertTrue(l.error(1).contains("row -1 is outside table 't' (0..99)"), l.error(1));
                assertTrue(l.error(2).contains("row 100 is outside"), l.error(2));
                assertThrows(IllegalStateException.class, () -> l.get(1, 0));
                barrier.await();
                barrier.await(); // the table was closed and created again: this client holds the old key
                l.clear();
                l.add(7);
                assertFalse(l.execute());
                // READs are refused (the key is stale); a direct reader sees the table closed.
                assertTrue(l.error(0).contains(transport.equals("shm0") ? "was closed by its server" : "REM_ACCESS_ERR"),
                    l.error(0));
                // Reopening reads the new table.
                try (EmbeddingClient fresh = EmbeddingClient.open(e, "t", Duration.ofSeconds(20), 0);
                     EmbeddingLookup f = fresh.newLookup(1)) {
                    f.add(7);
                    assertTrue(f.execute(), () -> f.error(0));
                    assertEquals(0f, f.get(0, 3));
                }
                barrier.await();
            }
        });
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "shm0/read", "tcp0"})
    void shouldFailLookupsWhenTheServerIsGoneAndNeverHang(String transport) {
        Tables.run(2, transport, (e, barrier) -> {
            if (e.rank() == 0) {
                EmbeddingServer.create(e, "gone", 1000, 32);
                barrier.await();
                barrier.await();
                e.close(); // the server's engine closes under the client's lookups
                barrier.await();
                return;
            }
            barrier.await();
            try (EmbeddingClient c = Tables.open(e, "gone", 0, transport);
                 EmbeddingLookup l = c.newLookup(256)) {
                for (int i = 0; i < 256; i++) {
                    l.add(i);
                }
                assertTrue(l.execute());
                barrier.await();
                String error = null;
                for (int round = 0; round < 100_000 && error == null; round++) {
                    l.clear();
                    for (int i = 0; i < 256; i++) {
                        l.add(i);
                    }
                    if (!l.execute()) {
                        for (int i = 0; i < 256 && error == null; i++) {
                            error = l.error(i);
                        }
                    }
                    if (round == 0) {
                        barrier.await();
                    }
                }
                assertTrue(error != null && error.contains("rank 0"), "error: " + error);
                l.clear();
                l.add(1);
                assertFalse(l.execute()); // later lookups fail at once, the same way
                assertTrue(l.error(0).contains("rank 0"), l.error(0));
            }
        });
    }

    /**
     * The server dies while a row is mid-write (head odd, as after a kill inside the seqlock): the lookup names the
     * dead server, not a row that "kept changing", and does not wait out the retry limit (a minute here) first.
     */
    @ParameterizedTest
    @ValueSource(strings = {"shm0", "shm0/read", "tcp0"})
    void shouldNameTheDeadServerWhenItDiedInTheMiddleOfARow(String transport) {
        Tables.run(2, transport, (e, barrier) -> {
            if (e.rank() == 0) {
                EmbeddingServer server = EmbeddingServer.create(e, "midrow", 100, 16);
                MemorySegment m = server.tableMemory();
                long head = server.slotOffsetOf(7) + TableLayout.SLOT_HEAD;
                barrier.await();
                barrier.await();
                m.set(ValueLayout.JAVA_LONG_UNALIGNED, head,
                    m.get(ValueLayout.JAVA_LONG_UNALIGNED, head) + 1);
                e.close(); // killed inside the seqlock: the row stays odd
                barrier.await();
                return;
            }
            barrier.await();
            try (EmbeddingClient c = EmbeddingClient.open(e, "midrow", Duration.ofSeconds(20), 0,
                Duration.ofSeconds(60), !transport.endsWith("/read"));
                 EmbeddingLookup l = c.newLookup(4)) {
                l.add(7);
                assertTrue(l.execute(), () -> l.error(0));
                barrier.await();
                barrier.await();
                l.clear();
                l.add(7);
                l.add(8);
                assertFalse(l.execute());
                assertTrue(l.error(0).contains("rank 0") && !l.error(0).contains("kept changing"), l.error(0));
                assertTrue(l.error(1).contains("rank 0"), l.error(1));
            }
        });
    }

    @Test
    void cacheShouldEvictByClockAndIndexRowsAfterDeletions() {
        RowCache cache = new RowCache(4, 2);
        MemorySegment m = MemorySegment.ofArray(new float[] {1, 2});
        for (long r = 0; r < 4; r++) {
            cache.put(r, 2, m, 0);
        }
        MemorySegment out = MemorySegment.ofArray(new float[2]);
        assertEquals(2, cache.get(0, out, 0)); // row 0 referenced: second chance
        cache.put(10, 2, m, 0); // evicts row 1, the first without its bit
        assertTrue(cache.contains(0) && cache.contains(10) && !cache.contains(1));
        assertFalse(cache.invalidate(10, 2)); // not newer
        assertTrue(cache.invalidate(10, 4));
        assertFalse(cache.contains(10));
        assertTrue(cache.contains(2) && cache.contains(3) && cache.contains(0));
        cache.put(3, 6, m, 0);
        assertEquals(6, cache.get(3, out, 0));
        assertEquals(3, cache.size());
    }
}
