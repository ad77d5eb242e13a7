package io.jccl.services.transfer;

import org.junit.jupiter.api.Test;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The engine additions services build on: a {@link NotificationListener} takes the notifications it consumes before
 * the queue does (the others still reach {@link TransferEngine#pollNotification}), and
 * {@link TransferEngine#peerFailure} answers null for a live peer and says why for a closed one.
 */
class NotificationListenerTest {
    @Test
    void shouldLetAListenerConsumeItsNotificationsAndAnswerNullForLivePeers() {
        Engines.run(2, Engines.options("shm0"), TransferSettings.defaults(), (engine, barrier) -> {
            if (engine.rank() == 1) {
                List<String> taken = new CopyOnWriteArrayList<>();
                engine.addNotificationListener(n -> n.text().startsWith("mine") && taken.add(n.text()));
                engine.registerSegment("target", 4096);
                barrier.await(30, TimeUnit.SECONDS);
                Notification other = engine.pollNotification(20, TimeUnit.SECONDS);
                assertEquals("other", other == null ? null : other.text());
                long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
                while (taken.isEmpty() && System.nanoTime() < until) {
                    Thread.sleep(1);
                }
                assertEquals(List.of("mine 1"), taken);
                assertNull(engine.pollNotification(), "the listener's notification reached the queue too");
                assertNull(engine.peerFailure(0));
                assertNull(engine.peerFailure(1));
                assertThrows(IllegalArgumentException.class, () -> engine.peerFailure(2));
                barrier.await(30, TimeUnit.SECONDS);
            } else {
                LocalSegment source = engine.registerSegment("source", 4096);
                barrier.await(30, TimeUnit.SECONDS);
                RemoteSegment target = engine.openSegment("target");
                try (TransferBatch b = engine.newBatch(1)) {
                    for (String text : new String[] {"mine 1", "other"}) {
                        b.clear();
                        b.write(source, 0, target, 0, 8);
                        b.notify(text.getBytes(StandardCharsets.UTF_8));
                        assertTrue(b.submit().await(), b.toString());
                    }
                }
                barrier.await(30, TimeUnit.SECONDS);
            }
        });
    }

    @Test
    void shouldNameAPeerThatClosedItsEngine() {
        Engines.run(2, Engines.options("shm0"), TransferSettings.defaults(), (engine, barrier) -> {
            barrier.await(30, TimeUnit.SECONDS);
            if (engine.rank() == 0) {
                engine.close(); // Engines closes it again: idempotent
            } else {
                long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
                String why = null;
                while (why == null && System.nanoTime() < until) {
                    why = engine.peerFailure(0);
                    Thread.sleep(1);
                }
                assertTrue(why != null && why.contains("rank 0") && why.contains("closed its transfer engine"),
                    "peerFailure(0): " + why);
            }
        });
    }
}
