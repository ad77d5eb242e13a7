package io.jccl.services.ps;

import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Bounded-staleness asynchronous mode: the bound holds and is not stricter; no pull returns torn weights. */
class ParameterServerAsyncTest {
    private static final int STALENESS = 2;
    private static final int STEPS = 6;

    @Test
    void shouldLetAWorkerRunAtMostStalenessStepsAheadOfTheSlowest() {
        ParameterServerSpec spec = ParameterServerSpec.synchronous("ssp", 1, 2, 64, OptimizerSpec.sgd(0.1f, 0f),
            1f).withStaleness(STALENESS).withTimeout(Duration.ofSeconds(20));
        AtomicReference<ParameterServer> serverRef = new AtomicReference<>();
        CountDownLatch serverUp = new CountDownLatch(1);
        CountDownLatch ranAhead = new CountDownLatch(1);
        AtomicBoolean slowPushing = new AtomicBoolean();
        Jobs.run(spec.ranks(), "shm0", engine -> {
            if (engine.rank() == 0) {
                try (ParameterServer server = ParameterServer.start(engine, spec, Jobs.initial(64))) {
                    serverRef.set(server);
                    serverUp.countDown();
                    server.serve();
                    assertEquals(STEPS, server.applied(0));
                    assertEquals(STEPS, server.applied(1));
                    assertEquals(2 * STEPS, server.version());
                }
                return;
            }
            assertTrue(serverUp.await(30, TimeUnit.SECONDS));
            ParameterServer server = serverRef.get();
            float[] p = new float[64];
            float[] g = new float[64];
            try (ParameterWorker worker = ParameterWorker.connect(engine, spec)) {
                boolean fast = worker.worker() == 0;
                if (!fast) {
                    // The slow worker starts only once the fast one ran ahead, and takes its time.
                    assertTrue(ranAhead.await(60, TimeUnit.SECONDS));
                    Thread.sleep(200);
                    slowPushing.set(true);
                }
                for (int step = 0; step < STEPS; step++) {
                    if (fast && step == STALENESS + 1) {
                        ranAhead.countDown();
                    }
                    worker.pull(p);
                    // The bound, on what the worker saw and on the server's own counts (never lower than seen).
                    long slowest = Math.min(server.applied(0), server.applied(1));
                    assertTrue(worker.steps() - worker.slowestApplied() <= STALENESS, "saw " + worker.slowestApplied()
                        + " at step " + worker.steps());
                    assertTrue(worker.steps() - slowest <= STALENESS, "slowest " + slowest + " at step "
                        + worker.steps());
                    if (fast && step == STALENESS + 1) {
                        // Steps 0..S went ahead without the slow worker (not stricter than S); step S + 1 had to
                        // wait for its first gradient.
                        assertTrue(slowPushing.get(), "step " + step + " started before the slow worker pushed");
                        assertTrue(server.applied(1) >= 1);
                    }
                    Jobs.gradient(p, worker.worker(), step, g);
                    worker.push(g);
                }
            }
        });
    }

    @Test
    void shouldNeverReturnHalfUpdatedWeights() {
        int count = 1 << 18; // 1 MiB per shard update: long enough to race with the reads
        ParameterServerSpec spec = ParameterServerSpec.synchronous("torn", 1, 2, count, OptimizerSpec.sgd(1f, 0f),
            1f).withStaleness(ParameterServerSpec.MAX_STALENESS).withTimeout(Duration.ofSeconds(20));
        AtomicBoolean pushing = new AtomicBoolean(true);
        Jobs.run(spec.ranks(), "shm0", engine -> {
            if (engine.rank() == 0) {
                try (ParameterServer server = ParameterServer.start(engine, spec, new float[count])) {
                    server.serve();
                }
                return;
            }
            try (ParameterWorker worker = ParameterWorker.connect(engine, spec)) {
                float[] p = new float[count];
                if (worker.worker() == 1) {
                    float[] ones = new float[count];
                    java.util.Arrays.fill(ones, 1f);
                    for (int step = 0; step < 150; step++) {
                        worker.pull(p);
                        worker.push(ones);
                    }
                    pushing.set(false);
                    return;
                }
                // Every consistent version has all parameters equal (-k after k updates of p -= 1).
                int pulls = 0;
                while (pushing.get() || pulls == 0) {
                    worker.pull(p);
                    pulls++;
                    for (int i = 1; i < count; i++) {
                        if (p[i] != p[0]) {
                            throw new AssertionError("torn read: p[0] = " + p[0] + ", p[" + i + "] = " + p[i]);
                        }
                    }
                }
            }
        });
    }
}
