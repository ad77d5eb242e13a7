package io.jccl.services.ps;

import org.junit.jupiter.api.Test;

import java.lang.management.ManagementFactory;
import java.time.Duration;

import static org.junit.jupiter.api.Assertions.assertTrue;

/** A worker's pull and push allocate nothing on its thread (reused batches, no per-step objects). */
class ParameterServerAllocationTest {
    @Test
    void shouldNotAllocatePerStepOnTheWorkersThread() {
        com.sun.management.ThreadMXBean threads = (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
        ParameterServerSpec spec = ParameterServerSpec.synchronous("alloc", 2, 1, 256, OptimizerSpec.adam(0.01f), 1f)
            .withTimeout(Duration.ofSeconds(20));
        Jobs.run(spec.ranks(), "shm0", engine -> {
            if (engine.rank() < spec.servers()) {
                try (ParameterServer server = ParameterServer.start(engine, spec, new float[256])) {
                    server.serve();
                }
                return;
            }
            float[] p = new float[256];
            float[] g = new float[256];
            try (ParameterWorker worker = ParameterWorker.connect(engine, spec)) {
                int rounds = 2_000;
                loop(worker, p, g, rounds); // warm-up: JIT
                long before = threads.getCurrentThreadAllocatedBytes();
                loop(worker, p, g, rounds);
                long allocated = threads.getCurrentThreadAllocatedBytes() - before;
                // one object per step would be ≥ 16 B per step
                assertTrue(allocated < 16L * rounds, allocated + " B allocated over " + rounds + " steps");
            }
        });
    }

    private static void loop(ParameterWorker worker, float[] p, float[] g, int rounds) {
        for (int r = 0; r < rounds; r++) {
            worker.pull(p);
            g[r & 255] = 1e-3f;
            worker.push(g);
        }
    }
}
