package io.jccl.services.batching;

import io.jccl.collectives.CommunicatorOptions;
import io.jccl.collectives.store.InMemoryStore;
import io.jccl.collectives.store.Store;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The batching ring end to end over each provider: batches as Triton forms them, rejections, routing, bad input. */
class InferenceBatchingTest {
    private static final long LONG_DELAY_NS = TimeUnit.SECONDS.toNanos(60);
    private static final long WAIT_NS = TimeUnit.SECONDS.toNanos(20);

    /** Row in: one int x. Row out: 2x and the batch size the model saw. */
    static final BatchModel DOUBLER = (inputs, batchSize, outputs) -> {
        for (int i = 0; i < batchSize; i++) {
            int x = inputs.get(ValueLayout.JAVA_INT_UNALIGNED, 4L * i);
            outputs.set(ValueLayout.JAVA_INT_UNALIGNED, 8L * i, 2 * x);
            outputs.set(ValueLayout.JAVA_INT_UNALIGNED, 8L * i + 4, batchSize);
        }
    };

    static CommunicatorOptions options(String device) {
        return CommunicatorOptions.defaults().withTransports(device).withTimeout(Duration.ofSeconds(20));
    }

    static BatchingConfig config(String device) {
        return BatchingConfig.of(4, 8).withDevice(device);
    }

    private static MemorySegment row(Arena arena, int x) {
        MemorySegment m = arena.allocate(4);
        m.set(ValueLayout.JAVA_INT_UNALIGNED, 0, x);
        return m;
    }

    private static int value(InferenceResponse r) {
        return r.output().get(ValueLayout.JAVA_INT_UNALIGNED, 0);
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldCloseABatchAtAPreferredSizeBeforeTheDelay(String device) {
        try (Store store = new InMemoryStore(); Arena arena = Arena.ofConfined();
             InferenceServer server = InferenceServer.create(store, "pref", config(device).withMaxBatchSize(8)
                 .withPreferredBatchSizes(4).withMaxQueueDelayNs(LONG_DELAY_NS), DOUBLER, options(device));
             InferenceClient client = InferenceClient.connect(store, "pref", options(device))) {
            for (int i = 0; i < 4; i++) {
                client.submit(row(arena, i));
            }
            long batchId = -1;
            for (int i = 0; i < 4; i++) {
                InferenceResponse r = client.poll(WAIT_NS);
                assertNotNull(r, "no answer: a preferred size must close the batch before the 60 s delay");
                assertEquals(InferenceStatus.OK, r.status(), r.toString());
                assertEquals(4, r.batchSize(), r.toString());
                assertEquals(CloseReason.PREFERRED_SIZE, r.closeReason());
                assertEquals(2 * (int) (r.requestId() - 1), value(r));
                batchId = batchId < 0 ? r.batchId() : batchId;
                assertEquals(batchId, r.batchId(), "one batch");
            }
            assertEquals(1, server.stats().batchesBySize()[4]);
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldCloseABatchAtTheMaximumSize(String device) {
        try (Store store = new InMemoryStore(); Arena arena = Arena.ofConfined();
             InferenceServer server = InferenceServer.create(store, "max", config(device).withMaxBatchSize(3)
                 .withMaxQueueDelayNs(LONG_DELAY_NS), DOUBLER, options(device));
             InferenceClient client = InferenceClient.connect(store, "max", options(device))) {
            for (int i = 0; i < 3; i++) {
                client.submit(row(arena, 10 + i));
            }
            for (int i = 0; i < 3; i++) {
                InferenceResponse r = client.poll(WAIT_NS);
                assertNotNull(r);
                assertEquals(3, r.batchSize(), r.toString());
                assertEquals(CloseReason.MAX_SIZE, r.closeReason());
                assertEquals(3, r.output().get(ValueLayout.JAVA_INT_UNALIGNED, 4), "the model saw the batch");
            }
            assertEquals(1, server.stats().batches());
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldSendAnIncompleteBatchOnceTheOldestRequestWaitedTheDelay(String device) {
        long delayNs = TimeUnit.MILLISECONDS.toNanos(30);
        try (Store store = new InMemoryStore(); Arena arena = Arena.ofConfined();
             InferenceServer server = InferenceServer.create(store, "delay", config(device).withMaxBatchSize(8)
                 .withPreferredBatchSizes(4, 8).withMaxQueueDelayNs(delayNs), DOUBLER, options(device));
             InferenceClient client = InferenceClient.connect(store, "delay", options(device))) {
            client.submit(row(arena, 1));
            client.submit(row(arena, 2));
            InferenceResponse first = client.poll(WAIT_NS);
            assertNotNull(first);
            assertEquals(CloseReason.DELAY, first.closeReason());
            assertEquals(2, first.batchSize(), first.toString());
            assertTrue(first.queueDelayNs() >= delayNs || client.poll(WAIT_NS).queueDelayNs() >= delayNs,
                "the oldest request waited the whole delay");
            assertEquals(1, server.stats().batchesByReason()[CloseReason.DELAY.ordinal()]);
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldRejectRequestsThatWaitPastTheirTimeout(String device) {
        try (Store store = new InMemoryStore(); Arena arena = Arena.ofConfined();
             InferenceServer server = InferenceServer.create(store, "timeout", config(device).withMaxBatchSize(8)
                 .withMaxQueueDelayNs(LONG_DELAY_NS).withDefaultTimeoutNs(LONG_DELAY_NS), DOUBLER, options(device));
             InferenceClient client = InferenceClient.connect(store, "timeout", options(device))) {
            long id = client.submit(row(arena, 7), TimeUnit.MILLISECONDS.toNanos(20));
            InferenceResponse r = client.poll(WAIT_NS);
            assertNotNull(r, "a request past its timeout is answered, not left waiting for the 60 s delay");
            assertEquals(id, r.requestId());
            assertEquals(InferenceStatus.TIMEOUT, r.status(), r.toString());
            assertEquals(0, r.batchSize());
            assertTrue(r.queueDelayNs() >= TimeUnit.MILLISECONDS.toNanos(20), r.toString());
            assertEquals(1, server.stats().timeouts());
            assertEquals(0, server.stats().batches(), "the model never saw it");
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldRouteEveryResultToItsRequester(String device) throws Exception {
        try (Store store = new InMemoryStore();
             InferenceServer server = InferenceServer.create(store, "route", config(device).withMaxBatchSize(4)
                 .withMaxQueueDelayNs(TimeUnit.MILLISECONDS.toNanos(1)).withSlotsPerProducer(4), DOUBLER,
                 options(device))) {
            List<CompletableFuture<Integer>> producers = new ArrayList<>();
            for (int p = 0; p < 3; p++) {
                int base = 1000 * (p + 1);
                producers.add(CompletableFuture.supplyAsync(() -> {
                    try (Arena arena = Arena.ofConfined();
                         InferenceClient client = InferenceClient.connect(store, "route", options(device))) {
                        int answered = 0;
                        long[] expected = new long[64];
                        for (int i = 0; i < 40; i++) {
                            long id = client.submit(row(arena, base + i));
                            expected[(int) (id % 64)] = 2L * (base + i);
                            if (client.inFlight() == client.slots()) {
                                InferenceResponse r = client.poll(WAIT_NS);
                                assertEquals(InferenceStatus.OK, r.status());
                                assertEquals(expected[(int) (r.requestId() % 64)], value(r), r.toString());
                                answered++;
                            }
                        }
                        while (client.inFlight() > 0) {
                            InferenceResponse r = client.poll(WAIT_NS);
                            assertEquals(expected[(int) (r.requestId() % 64)], value(r), r.toString());
                            answered++;
                        }
                        return answered;
                    }
                }, Thread::startVirtualThread));
            }
            for (CompletableFuture<Integer> f : producers) {
                assertEquals(40, f.get(60, TimeUnit.SECONDS));
            }
            assertEquals(120, server.stats().requests());
            assertEquals(3, server.stats().producers());
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldAnswerBadInputWithAStatusOrAClearError(String device) {
        try (Store store = new InMemoryStore(); Arena arena = Arena.ofConfined();
             InferenceServer server = InferenceServer.create(store, "bad", config(device).withMaxBatchSize(8),
                 DOUBLER, options(device));
             InferenceClient client = InferenceClient.connect(store, "bad", options(device))) {
            IllegalArgumentException big = assertThrows(IllegalArgumentException.class,
                () -> client.submit(arena.allocate(5)));
            assertTrue(big.getMessage().contains("exceeds the 4 B"), big.getMessage());
            // A hand-made header claiming more than a slot holds: the server refuses it with a status.
            MemorySegment header = arena.allocate(Wire.REQUEST_HEADER);
            header.set(ValueLayout.JAVA_LONG_UNALIGNED, Wire.REQ_ID, 77);
            header.set(ValueLayout.JAVA_INT_UNALIGNED, Wire.REQ_LENGTH, 1 << 20);
            header.set(ValueLayout.JAVA_INT_UNALIGNED, Wire.REQ_MAGIC, Wire.MAGIC);
            header.set(ValueLayout.JAVA_INT_UNALIGNED, Wire.REQ_SEQUENCE, 3);
            client.submitRaw(0, Wire.requestImmediate(0, 3), header);
            InferenceResponse r = client.poll(WAIT_NS);
            assertEquals(InferenceStatus.TOO_LARGE, r.status());
            assertEquals(77, r.requestId());
            // Bad magic, and a sequence that does not match the signal: malformed.
            header.set(ValueLayout.JAVA_INT_UNALIGNED, Wire.REQ_LENGTH, 4);
            header.set(ValueLayout.JAVA_INT_UNALIGNED, Wire.REQ_MAGIC, 0xBAD);
            client.submitRaw(1, Wire.requestImmediate(1, 3), header);
            assertEquals(InferenceStatus.MALFORMED, client.poll(WAIT_NS).status());
            header.set(ValueLayout.JAVA_INT_UNALIGNED, Wire.REQ_MAGIC, Wire.MAGIC);
            client.submitRaw(2, Wire.requestImmediate(2, 4), header);
            assertEquals(InferenceStatus.MALFORMED, client.poll(WAIT_NS).status());
            assertEquals(3, server.stats().malformed());
            // The lane still works (and infer waits for its own answer).
            InferenceResponse ok = client.infer(row(arena, 21), 0, WAIT_NS);
            assertEquals(42, value(ok), ok.toString());
            assertEquals(InferenceStatus.OK, ok.status());
            assertThrows(IllegalArgumentException.class, () -> InferenceClient.connect(store, "/x", options(device)));
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldDeliverEveryShutdownAnswerBeforeTheQueuePairsClose(String device) throws InterruptedException {
        // Three producers' full lanes queued behind a long delay (no batch is full), then close: every request is
        // answered SHUTDOWN, none lost to the queue pairs closing while answers were in flight (over tcp0 one was, in
        // CI: the producer saw its lane flushed instead). Then each producer's next request learns the server closed.
        int slots = 32;
        Store store = new InMemoryStore();
        InferenceServer server = InferenceServer.create(store, "drain", config(device).withMaxBatchSize(4 * slots)
            .withSlotsPerProducer(slots).withMaxQueueDelayNs(LONG_DELAY_NS), DOUBLER, options(device));
        try (Arena arena = Arena.ofConfined();
             InferenceClient a = InferenceClient.connect(store, "drain", options(device));
             InferenceClient b = InferenceClient.connect(store, "drain", options(device));
             InferenceClient c = InferenceClient.connect(store, "drain", options(device))) {
            InferenceClient[] clients = {a, b, c};
            for (InferenceClient client : clients) {
                for (int i = 0; i < slots; i++) {
                    client.submit(row(arena, i));
                }
            }
            long deadline = System.nanoTime() + WAIT_NS;
            while (server.stats().queued() < 3 * slots && System.nanoTime() < deadline) {
                Thread.sleep(1); // until every request is queued at the server (one still in flight may be lost)
            }
            assertEquals(3 * slots, server.stats().queued());
            server.close();
            // It waited for its answers' completions before releasing the queue pairs (a WRITE still queued in a
            // provider when its queue pair is destroyed is discarded, as ibv_destroy_qp does).
            assertEquals(0, server.responsesUnconfirmedAtClose());
            for (InferenceClient client : clients) {
                for (int i = 0; i < slots; i++) {
                    InferenceResponse r = client.poll(WAIT_NS);
                    assertEquals(InferenceStatus.SHUTDOWN, r.status(), "answer " + i);
                }
                BatchingException closed = assertThrows(BatchingException.class, () -> {
                    client.submit(row(arena, 0));
                    client.poll(WAIT_NS);
                });
                assertTrue(closed.getMessage().contains("'drain'"), closed.getMessage());
            }
        } finally {
            server.close();
            store.close();
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"shm0", "tcp0"})
    void shouldFailAFullRingAfterTheRingWaitAndAClosedServerAtOnce(String device) {
        Store store = new InMemoryStore();
        InferenceServer server = InferenceServer.create(store, "full", config(device).withMaxBatchSize(8)
            .withSlotsPerProducer(2).withMaxQueueDelayNs(LONG_DELAY_NS), DOUBLER, options(device));
        try (Arena arena = Arena.ofConfined();
             InferenceClient client = InferenceClient.connect(store, "full", options(device))) {
            client.submit(row(arena, 1));
            client.submit(row(arena, 2));
            client.ringWait(TimeUnit.MILLISECONDS.toNanos(100));
            BatchingException full = assertThrows(BatchingException.class, () -> client.submit(row(arena, 3)));
            assertTrue(full.getMessage().contains("ring full: all 2 slots"), full.getMessage());
            assertNull(client.poll(), "nothing answered yet: the delay is a minute");
            server.close();
            // Queued requests are answered SHUTDOWN, then the server is known closed.
            assertEquals(InferenceStatus.SHUTDOWN, client.poll(WAIT_NS).status());
            assertEquals(InferenceStatus.SHUTDOWN, client.poll(WAIT_NS).status());
            BatchingException closed = assertThrows(BatchingException.class, () -> {
                client.submit(row(arena, 4));
                client.poll(WAIT_NS);
            });
            assertTrue(closed.getMessage().contains("'full'") && (closed.getMessage().contains("closed")
                || closed.getMessage().contains("unreachable")), closed.getMessage());
        } finally {
            server.close();
            store.close();
        }
        BatchingException none = assertThrows(BatchingException.class, () -> InferenceClient.connect(
            new InMemoryStore(), "nobody", options(device).withTimeout(Duration.ofMillis(200))));
        assertTrue(none.getMessage().contains("no inference server named 'nobody'"), none.getMessage());
    }
}
