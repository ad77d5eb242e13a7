package io.jccl.services.ingest;

import io.jccl.common.testing.ChildJvm;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLongArray;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The consumer in a child JVM, killed with SIGKILL while two producers (threads here) append, and restarted on the
 * same directory and port. Afterwards the snapshots hold every producer's records 1..N exactly once,
 * in order, with their payloads: nothing acknowledged lost (everything was acknowledged at the end), nothing twice.
 */
class IngestKillTest {
    /** One thread per producer (the common pool may have a single thread on a 2-core machine). */
    static final java.util.concurrent.Executor THREADS = java.util.concurrent.Executors.newThreadPerTaskExecutor(
        Thread.ofPlatform().daemon().factory());

    /** The consumer in a child JVM (C1 only: it starts sooner, and the test measures nothing). */
    private static ChildJvm consumer(Path dir, String device, int port) throws java.io.IOException {
        return ChildJvm.start(List.of("-XX:TieredStopAtLevel=1"), IngestConsumerChild.class, dir.toString(), device,
            Integer.toString(port));
    }

    /** Waits for the consumer's "READY port" line; returns the port. */
    private static int awaitReady(ChildJvm child) throws InterruptedException {
        return Integer.parseInt(child.awaitLine(l -> l.startsWith("READY "), "READY", 60).substring(6));
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldLoseNoAcknowledgedRecordAndDuplicateNoneAcrossKills(String device, @TempDir Path dir)
        throws Exception {
        int producers = 2;
        long step = 60;
        int kills = 1;
        ChildJvm child = consumer(dir, device, 0);
        try {
            int port = awaitReady(child);
            IngestSettings s = IngestRingTest.settings(device, dir).withTimes(10, 2000, 30_000);
            InetSocketAddress address = new InetSocketAddress(InetAddress.getLoopbackAddress(), port);
            AtomicLongArray acknowledged = new AtomicLongArray(producers);
            AtomicBoolean stop = new AtomicBoolean();
            List<CompletableFuture<long[]>> running = new ArrayList<>();
            for (int id = 0; id < producers; id++) {
                int producerId = id;
                running.add(CompletableFuture.supplyAsync(() -> {
                    try (IngestProducer p = IngestProducer.connect(address, producerId, s)) {
                        long seq = 0;
                        while (!stop.get()) {
                            byte[] payload = ConsumerLoop.payload(producerId, ++seq, 200);
                            // producer 1 sends batches: a kill cuts some of them, and they are resent whole
                            assertEquals(seq, producerId == 0 ? p.append(payload)
                                : p.offer(java.lang.foreign.MemorySegment.ofArray(payload), 0, payload.length));
                            acknowledged.set(producerId, p.acknowledgedSequence());
                        }
                        p.flush(Duration.ofSeconds(30));
                        return new long[] {seq, p.acknowledgedSequence(), p.reconnects()};
                    }
                }, THREADS));
            }
            long[] ackedAtKill = new long[producers];
            for (int kill = 1; kill <= kills + 1; kill++) {
                awaitAcknowledged(acknowledged, ackedAtKill, step, running);
                if (kill == kills + 1) {
                    break;
                }
                child.kill();
                for (int id = 0; id < producers; id++) {
                    ackedAtKill[id] = acknowledged.get(id);
                }
                child = consumer(dir, device, port);
                awaitReady(child);
            }
            stop.set(true);
            long[] appended = new long[producers];
            for (int id = 0; id < producers; id++) {
                long[] result = running.get(id).get(120, TimeUnit.SECONDS);
                appended[id] = result[0];
                assertEquals(result[0], result[1], "producer " + id + ": everything acknowledged after flush");
                assertTrue(result[2] >= kills, "producer " + id + " reconnected after each kill: " + result[2]);
            }
            child.kill(); // everything is acknowledged: a kill now loses nothing either
            long[] next = new long[producers];
            long[] last = IngestLog.replay(dir, (producer, sequence, ts, buffer, offset, length) -> {
                assertEquals(++next[producer], sequence, "producer " + producer + ": in order, once each");
                byte[] expected = ConsumerLoop.payload(producer, sequence, 200);
                byte[] actual = buffer.asSlice(offset, length).toArray(java.lang.foreign.ValueLayout.JAVA_BYTE);
                assertTrue(Arrays.equals(expected, actual), "payload of " + producer + "/" + sequence);
            });
            for (int id = 0; id < producers; id++) {
                assertEquals(appended[id], next[id], "producer " + id + " records in the snapshots");
                assertEquals(appended[id], last[id]);
            }
        } finally {
            child.close();
        }
    }

    /** Waits until every producer has {@code step} more records acknowledged than at the last kill. */
    private static void awaitAcknowledged(AtomicLongArray acknowledged, long[] base, long step,
                                          List<CompletableFuture<long[]>> running) throws Exception {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        for (int id = 0; id < base.length; id++) {
            while (acknowledged.get(id) < base[id] + step) {
                assertTrue(System.nanoTime() < until, "no progress: acknowledged " + acknowledged);
                if (running.get(id).isDone()) {
                    running.get(id).get(); // a producer that failed: its exception, not a timeout
                }
                Thread.sleep(5);
            }
        }
    }
}
