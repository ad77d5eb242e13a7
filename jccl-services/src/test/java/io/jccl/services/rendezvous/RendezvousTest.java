package io.jccl.services.rendezvous;

import io.jccl.collectives.store.InMemoryStore;
import io.jccl.collectives.store.Store;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Readiness, waits that name the missing ranks, and control messages, over each provider. */
class RendezvousTest {
    private static final long WAIT_NS = TimeUnit.SECONDS.toNanos(20);

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldSeeEveryRankReadyAndRelayMessagesInOrder(String device) {
        try (Store store = new InMemoryStore()) {
            Ranks.run(store, 4, Ranks.options(device), (r, barrier) -> {
                r.publish(1);
                r.await(1, WAIT_NS);
                assertArrayEquals(new int[] {0, 1, 2, 3}, r.readyRanks(1));
                // 150 messages from rank 1 to rank 3 (relayed by the hub): more than a mailbox holds, so credits
                // must come back; they arrive in order.
                if (r.rank() == 1) {
                    for (int i = 0; i < 150; i++) {
                        r.send(3, ("m" + i).getBytes(StandardCharsets.UTF_8));
                    }
                    r.send(0, new byte[0]);
                }
                if (r.rank() == 3) {
                    for (int i = 0; i < 150; i++) {
                        Message m = r.receive(WAIT_NS);
                        assertNotNull(m, "message " + i);
                        assertEquals(1, m.from());
                        assertEquals("m" + i, new String(m.payload(), StandardCharsets.UTF_8));
                    }
                    r.send(2, new byte[Rendezvous.MESSAGE_MAX_BYTES]);
                }
                if (r.rank() == 2) {
                    Message m = r.receive(WAIT_NS);
                    assertEquals(3, m.from());
                    assertEquals(Rendezvous.MESSAGE_MAX_BYTES, m.payload().length);
                }
                if (r.rank() == 0) {
                    Message m = r.receive(WAIT_NS);
                    assertEquals(1, m.from());
                    assertEquals(0, m.payload().length);
                }
                // A second topic, a count of ranks rather than all.
                if (r.rank() % 2 == 0) {
                    r.publish(7);
                }
                r.await(7, 2, WAIT_NS);
            });
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldNameTheRanksNotReadyWhenAWaitTimesOut(String device) {
        try (Store store = new InMemoryStore()) {
            Ranks.run(store, 3, Ranks.options(device), (r, barrier) -> {
                if (r.rank() != 2) {
                    r.publish(5);
                }
                if (r.rank() == 1) {
                    r.await(5, 2, WAIT_NS); // ranks 0 and 1 seen ready: only rank 2 can be missing below
                    RendezvousException e = assertThrows(RendezvousException.class,
                        () -> r.await(5, TimeUnit.MILLISECONDS.toNanos(100)));
                    assertTrue(e.getMessage().contains("topic 5: 2 of 3 ranks ready")
                        && e.getMessage().endsWith("not ready: ranks 2"), e.getMessage());
                }
                barrier.await(20, TimeUnit.SECONDS);
                if (r.rank() == 2) {
                    r.publish(5);
                }
                r.await(5, WAIT_NS);
            });
        }
    }

    @Test
    void shouldNameTheRanksThatNeverJoined() {
        try (Store store = new InMemoryStore()) {
            RendezvousException e = assertThrows(RendezvousException.class, () -> Rendezvous.join(store, 0, 3,
                Ranks.options("shm0").withTimeout(Duration.ofMillis(300))));
            assertTrue(e.getMessage().contains("rank 1 did not join the rendezvous"), e.getMessage());
        }
    }

    @Test
    void shouldRefuseBadInput() {
        try (Store store = new InMemoryStore()) {
            assertThrows(IllegalArgumentException.class, () -> Rendezvous.join(store, 2, 2, Ranks.options("shm0")));
            Ranks.run(store, 2, Ranks.options("shm0"), (r, barrier) -> {
                IllegalArgumentException big = assertThrows(IllegalArgumentException.class,
                    () -> r.send(1 - r.rank(), new byte[Rendezvous.MESSAGE_MAX_BYTES + 1]));
                assertTrue(big.getMessage().contains("exceeds 96 B"), big.getMessage());
                assertThrows(IllegalArgumentException.class, () -> r.send(2, new byte[1]));
                assertThrows(IllegalArgumentException.class, () -> r.publish(-1));
                assertThrows(IllegalArgumentException.class, () -> r.await(0, 3, 1));
            });
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldDeliverWhatWasQueuedBeforeAClose(String device) {
        // Rank 1 sends ten mailboxes of records and closes at once: most still wait for credits then. The close sends
        // them, in order, and then its goodbye (it dropped them without a word, and the goodbye with them).
        int count = 10 * Rendezvous.MAILBOX_SLOTS;
        try (Store store = new InMemoryStore()) {
            Ranks.run(store, 2, Ranks.options(device), (r, barrier) -> {
                if (r.rank() == 1) {
                    for (int i = 0; i < count; i++) {
                        r.send(0, ("m" + i).getBytes(StandardCharsets.UTF_8));
                    }
                    r.close();
                    return;
                }
                for (int i = 0; i < count; i++) {
                    Message m = r.receive(TimeUnit.SECONDS.toNanos(5));
                    assertNotNull(m, "message " + i);
                    assertEquals("m" + i, new String(m.payload(), StandardCharsets.UTF_8));
                }
                RendezvousException e = assertThrows(RendezvousException.class, () -> r.await(9, WAIT_NS));
                assertTrue(e.getMessage().contains("left the rendezvous"), e.getMessage());
            });
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldFailWaitsAtOnceWhenTheHubCloses(String device) {
        try (Store store = new InMemoryStore()) {
            Ranks.run(store, 2, Ranks.options(device), (r, barrier) -> {
                if (r.rank() == 0) {
                    r.close();
                    barrier.await(20, TimeUnit.SECONDS);
                } else {
                    barrier.await(20, TimeUnit.SECONDS);
                    // Thrown, not timed out: the hub's goodbye (or its link's failure) ends the wait.
                    RendezvousException e = assertThrows(RendezvousException.class, () -> r.await(9, WAIT_NS));
                    assertTrue(e.getMessage().contains("rank 0 (the rendezvous hub"), e.getMessage());
                }
            });
        }
    }
}
