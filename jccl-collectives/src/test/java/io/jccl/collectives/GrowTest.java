package io.jccl.collectives;

import io.jccl.collectives.store.InMemoryStore;
import io.jccl.collectives.store.Store;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@link Communicator#grow} and {@link Communicator#join}: after a rank is lost and the survivors shrank, a new
 * process joins the running job, pulls the model state from a survivor's window with one-sided READs
 * ({@link Window#get}) and all-reduces with the others. Ranks are threads of this JVM (the elastic demo's test runs
 * processes).
 */
class GrowTest {
    /** Floats of "model state" the joiner reads. */
    private static final int MODEL_FLOATS = 10_000;

    static Stream<org.junit.jupiter.params.provider.Arguments> transports() {
        return RevokeTest.transports().skip(1); // shm and tcp message paths
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("transports")
    void shouldLetAReplacementJoinTheSurvivorsAndReadTheModel(String what, CommunicatorOptions options)
        throws Exception {
        int n = 4;
        int victim = 3;
        Store store = new InMemoryStore();
        List<CompletableFuture<Throwable>> outcomes = new ArrayList<>();
        for (int r = 0; r < n; r++) {
            int rank = r;
            outcomes.add(thread("rank-" + r, () -> {
                try (Communicator c = Communicator.create(store, rank, n, options)) {
                    assertEquals(10f, ShrinkTest.sum(c, rank + 1));
                    if (rank == victim) {
                        c.abort("killed by the test");
                        return;
                    }
                    assertThrows(CollectiveException.class, () -> FailureTest.allReduceOnce(c, 100_000));
                    try (Communicator s = c.shrink(); Communicator g = s.grow(1)) {
                        assertEquals(n, g.size());
                        assertEquals(rank, g.rank(), "survivors keep their numbers");
                        assertTrue(g.options().name().endsWith(".shrink1.grow1"), g.options().name());
                        try (Window w = g.window(MODEL_FLOATS * 4L)) {
                            if (g.rank() == 0) {
                                for (int i = 0; i < MODEL_FLOATS; i++) {
                                    w.segment().setAtIndex(ValueLayout.JAVA_FLOAT, i, i * 0.5f);
                                }
                            }
                            g.barrier(); // the model is in place
                            g.barrier(); // the joiner has read it
                        }
                        assertEquals(1 + 2 + 3 + 10f, ShrinkTest.sum(g, rank + 1), what);
                    }
                }
            }));
        }
        outcomes.add(thread("joiner", () -> {
            try (Communicator j = Communicator.join(store, options); Arena arena = Arena.ofConfined()) {
                assertEquals(n, j.size());
                assertEquals(3, j.rank());
                try (Window w = j.window(MODEL_FLOATS * 4L)) {
                    j.barrier();
                    int half = MODEL_FLOATS / 2;
                    MemorySegment nativeHalf = arena.allocate(half * 4L);
                    float[] heapHalf = new float[MODEL_FLOATS - half];
                    w.get(0, 0, nativeHalf, 0, half * 4L);
                    w.get(0, half * 4L, MemorySegment.ofArray(heapHalf), 0, heapHalf.length * 4L);
                    for (int i = 0; i < MODEL_FLOATS; i++) {
                        float got = i < half ? nativeHalf.getAtIndex(ValueLayout.JAVA_FLOAT, i) : heapHalf[i - half];
                        assertEquals(i * 0.5f, got, "float " + i);
                    }
                    j.barrier();
                }
                assertEquals(1 + 2 + 3 + 10f, ShrinkTest.sum(j, 10), what);
            }
        }));
        for (CompletableFuture<Throwable> f : outcomes) {
            Throwable t = f.get(90, TimeUnit.SECONDS);
            if (t != null) {
                throw new AssertionError(what, t);
            }
        }
    }

    @Test
    void aJoinerWithoutAnOfferTimesOutWithAClearError() {
        CommunicatorOptions o = CommunicatorOptions.defaults().withTimeout(Duration.ofMillis(300));
        CollectiveException.Timeout e = assertThrows(CollectiveException.Timeout.class,
            () -> Communicator.join(new InMemoryStore(), o));
        assertTrue(e.getMessage().contains("no grow offer"), e.getMessage());
    }

    @Test
    void growNeedsAtLeastOneJoiner() throws Exception {
        Ranks.run(1, Ranks.loop(), c -> {
            assertThrows(IllegalArgumentException.class, () -> c.grow(0));
            assertNull(c.joinAddress(), "an in-memory store has no address");
        });
    }

    private static CompletableFuture<Throwable> thread(String name, ThrowingRunnable body) {
        CompletableFuture<Throwable> f = new CompletableFuture<>();
        Thread.ofPlatform().daemon().name(name).start(() -> {
            try {
                body.run();
                f.complete(null);
            } catch (Throwable t) {
                f.complete(t);
            }
        });
        return f;
    }

    private interface ThrowingRunnable {
        void run() throws Exception;
    }
}
