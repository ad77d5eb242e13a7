package io.jccl.services.ps;

import io.jccl.collectives.Communicator;
import io.jccl.collectives.ReduceOp;
import io.jccl.collectives.store.InMemoryStore;
import io.jccl.collectives.store.Store;
import io.jccl.common.testing.RankFutures;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

/**
 * Synchronous mode: N steps through 3 servers (shards of 333, 334, 334) and 3 workers give float bits identical to training with
 * jccl-collectives' allReduce (direct algorithm over shm0: sources reduced in rank order) and the same optimizer.
 */
class ParameterServerTest {
    private static final int SERVERS = 3;
    private static final int WORKERS = 3;
    private static final int COUNT = 1001; // uneven shards, of odd lengths
    private static final int STEPS = 12;
    private static final float SCALE = 1f / 96;

    private static OptimizerSpec optimizer(String name) {
        return name.equals("adam") ? OptimizerSpec.adam(0.01f) : OptimizerSpec.sgd(0.05f, 0.9f);
    }

    @ParameterizedTest
    @CsvSource({"shm0, sgd", "shm0, adam", "tcp0, sgd"})
    void shouldTrainBitIdenticallyToAllReduceTraining(String transport, String optimizerName) {
        ParameterServerSpec spec = ParameterServerSpec.synchronous("bits", SERVERS, WORKERS, COUNT,
            optimizer(optimizerName), SCALE).withTimeout(java.time.Duration.ofSeconds(20));
        float[][] trained = new float[WORKERS][];
        Jobs.run(spec.ranks(), transport, engine -> {
            if (engine.rank() < SERVERS) {
                try (ParameterServer server = ParameterServer.start(engine, spec, Jobs.initial(COUNT))) {
                    server.serve();
                    assertEquals(STEPS, server.version());
                }
                return;
            }
            float[] p = new float[COUNT];
            float[] g = new float[COUNT];
            try (ParameterWorker worker = ParameterWorker.connect(engine, spec)) {
                for (int step = 0; step < STEPS; step++) {
                    worker.pull(p);
                    Jobs.gradient(p, worker.worker(), step, g);
                    worker.push(g);
                }
                worker.pull(p);
                trained[worker.worker()] = p;
            }
        });
        float[] reference = allReduceTraining(optimizer(optimizerName));
        for (int w = 0; w < WORKERS; w++) {
            assertArrayEquals(bits(reference), bits(trained[w]), "worker " + w + " vs all-reduce training");
        }
        // The check can fail: summing the workers' gradients in another order gives other bits.
        assertFalse(java.util.Arrays.equals(bits(reference), bits(reversedOrderTraining(optimizer(optimizerName)))),
            "the synthetic gradients do not depend on the summation order: the test would prove nothing");
    }

    /** The same steps: every worker sums the gradients with Communicator.allReduce and applies the optimizer. */
    private static float[] allReduceTraining(OptimizerSpec optimizerSpec) {
        Store store = new InMemoryStore();
        float[][] out = new float[WORKERS][];
        List<CompletableFuture<Void>> futures = new ArrayList<>();
        for (int r = 0; r < WORKERS; r++) {
            int rank = r;
            CompletableFuture<Void> f = new CompletableFuture<>();
            Thread.ofPlatform().daemon().start(() -> {
                try (Communicator c = Communicator.create(store, rank, WORKERS,
                    Jobs.options("shm0").withAlgorithms("allreduce:direct"))) {
                    float[] p = Jobs.initial(COUNT);
                    float[] g = new float[COUNT];
                    Optimizer optimizer = new Optimizer(optimizerSpec, COUNT);
                    for (int step = 0; step < STEPS; step++) {
                        Jobs.gradient(p, rank, step, g);
                        c.allReduce(g, ReduceOp.SUM);
                        optimizer.step(p, g, SCALE);
                    }
                    out[rank] = p;
                    f.complete(null);
                } catch (Throwable e) {
                    f.completeExceptionally(e);
                }
            });
            futures.add(f);
        }
        RankFutures.awaitAll(futures, 100);
        for (int r = 1; r < WORKERS; r++) {
            assertArrayEquals(bits(out[0]), bits(out[r]), "all-reduce ranks disagree");
        }
        return out[0];
    }

    /** One process, gradients summed last worker first: what a different order would give. */
    private static float[] reversedOrderTraining(OptimizerSpec optimizerSpec) {
        float[] p = Jobs.initial(COUNT);
        float[] g = new float[COUNT];
        float[] sum = new float[COUNT];
        Optimizer optimizer = new Optimizer(optimizerSpec, COUNT);
        for (int step = 0; step < STEPS; step++) {
            for (int w = WORKERS - 1; w >= 0; w--) {
                Jobs.gradient(p, w, step, g);
                for (int i = 0; i < COUNT; i++) {
                    sum[i] = w == WORKERS - 1 ? g[i] : sum[i] + g[i];
                }
            }
            optimizer.step(p, sum, SCALE);
        }
        return p;
    }

    static int[] bits(float[] values) {
        int[] b = new int[values.length];
        for (int i = 0; i < values.length; i++) {
            b[i] = Float.floatToRawIntBits(values[i]);
        }
        return b;
    }

    @Test
    void shouldMatchTorchOptimFormulasOnAKnownSequence() {
        // SGD with momentum 0.9, lr 0.1: b1 = g1, p1 = p0 - 0.1 b1; b2 = 0.9 b1 + g2, p2 = p1 - 0.1 b2.
        float[] p = {1f};
        Optimizer sgd = new Optimizer(OptimizerSpec.sgd(0.1f, 0.9f), 1);
        sgd.step(p, new float[] {2f}, 1f);
        assertEquals(1f - 0.1f * 2f, p[0]);
        sgd.step(p, new float[] {1f}, 1f);
        assertEquals((1f - 0.1f * 2f) - 0.1f * (0.9f * 2f + 1f), p[0]);
        // Adam's first step moves every parameter by lr (m/sqrt(v) = sign(g) after bias correction), eps aside.
        float[] q = {0.5f, 0.5f};
        Optimizer adam = new Optimizer(OptimizerSpec.adam(0.01f), 2);
        adam.step(q, new float[] {3f, -0.25f}, 1f);
        assertEquals(0.49f, q[0], 1e-6f);
        assertEquals(0.51f, q[1], 1e-6f);
        assertEquals(1, adam.steps());
    }
}
