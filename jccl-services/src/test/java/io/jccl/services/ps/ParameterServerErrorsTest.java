package io.jccl.services.ps;

import org.junit.jupiter.api.Test;

import java.time.Duration;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Bad input and broken protocol: a clear error at once or at the spec's deadline, never a hang. */
class ParameterServerErrorsTest {
    private static final OptimizerSpec SGD = OptimizerSpec.sgd(0.1f, 0f);

    @Test
    void shouldRefuseBadSpecs() {
        assertThrows(IllegalArgumentException.class, () -> ParameterServerSpec.synchronous("x", 0, 1, 8, SGD, 1f));
        assertThrows(IllegalArgumentException.class, () -> ParameterServerSpec.synchronous("x", 1, 0, 8, SGD, 1f));
        assertThrows(IllegalArgumentException.class, () -> ParameterServerSpec.synchronous("x", 4, 1, 3, SGD, 1f));
        assertThrows(IllegalArgumentException.class, () -> ParameterServerSpec.synchronous("a/b", 1, 1, 8, SGD, 1f));
        assertThrows(IllegalArgumentException.class, () -> ParameterServerSpec.synchronous("x", 1, 1, 8, SGD, 0f));
        assertThrows(IllegalArgumentException.class,
            () -> ParameterServerSpec.synchronous("x", 1, 1, 8, SGD, 1f).withStaleness(-1));
        assertThrows(IllegalArgumentException.class, () -> OptimizerSpec.sgd(0f, 0.9f));
        assertThrows(IllegalArgumentException.class, () -> OptimizerSpec.sgd(0.1f, 1f));
        assertThrows(IllegalArgumentException.class, () -> OptimizerSpec.adam(0.1f, 1f, 0.9f, 1e-8f));
    }

    @Test
    void shouldRefuseAJobOfAnotherSizeWrongRolesAndWrongLengths() {
        ParameterServerSpec three = ParameterServerSpec.synchronous("size", 1, 2, 8, SGD, 1f);
        ParameterServerSpec two = ParameterServerSpec.synchronous("roles", 1, 1, 8, SGD, 1f)
            .withTimeout(Duration.ofSeconds(20));
        Jobs.run(2, "shm0", engine -> {
            ParameterServerException e = assertThrows(ParameterServerException.class,
                () -> ParameterServer.start(engine, three, new float[8]));
            assertTrue(e.getMessage().contains("2 ranks") && e.getMessage().contains("= 3"), e.getMessage());
            if (engine.rank() == 0) {
                e = assertThrows(ParameterServerException.class, () -> ParameterWorker.connect(engine, two));
                assertTrue(e.getMessage().contains("is a server"), e.getMessage());
                assertThrows(IllegalArgumentException.class, () -> ParameterServer.start(engine, two, new float[7]));
                try (ParameterServer server = ParameterServer.start(engine, two, new float[8])) {
                    server.serve();
                }
            } else {
                e = assertThrows(ParameterServerException.class, () -> ParameterServer.start(engine, two,
                    new float[8]));
                assertTrue(e.getMessage().contains("is a worker"), e.getMessage());
                try (ParameterWorker worker = ParameterWorker.connect(engine, two)) {
                    assertThrows(IllegalArgumentException.class, () -> worker.pull(new float[9]));
                    assertThrows(IllegalArgumentException.class, () -> worker.push(new float[7]));
                    float[] p = new float[8];
                    worker.pull(p);
                    worker.push(p);
                }
            }
        });
    }

    @Test
    void shouldFailTheServerWhenASynchronousWorkerLeavesEarlyAndTheOtherAtItsDeadline() {
        ParameterServerSpec spec = ParameterServerSpec.synchronous("early", 1, 2, 8, SGD, 1f)
            .withTimeout(Duration.ofSeconds(3));
        Jobs.run(3, "shm0", engine -> {
            float[] p = new float[8];
            if (engine.rank() == 0) {
                try (ParameterServer server = ParameterServer.start(engine, spec, p)) {
                    ParameterServerException e = assertThrows(ParameterServerException.class, server::serve);
                    assertTrue(e.getMessage().contains("same number of steps"), e.getMessage());
                }
                return;
            }
            ParameterWorker worker = ParameterWorker.connect(engine, spec);
            int steps = engine.rank() == 1 ? 1 : 2;
            try {
                for (int step = 0; step < steps; step++) {
                    worker.pull(p);
                    worker.push(p);
                }
                worker.pull(p);
                worker.close();
            } catch (ParameterServerException expected) {
                // the worker that went on: its server failed (closed, or silent until the deadline)
                assertTrue(engine.rank() == 2, "worker " + (engine.rank() - 1) + ": " + expected.getMessage());
                worker.close();
            }
        });
    }

    @Test
    void shouldFailServeNamingTheWorkerItWaitsForAtTheDeadline() {
        ParameterServerSpec spec = ParameterServerSpec.synchronous("silent", 1, 1, 8, SGD, 1f)
            .withTimeout(Duration.ofSeconds(1));
        Jobs.run(2, "shm0", engine -> {
            if (engine.rank() == 0) {
                try (ParameterServer server = ParameterServer.start(engine, spec, new float[8])) {
                    ParameterServerException e = assertThrows(ParameterServerException.class, server::serve);
                    assertTrue(e.getMessage().contains("waiting for worker 0 (rank 1, gradient #1)"), e.getMessage());
                }
                return;
            }
            ParameterWorker worker = ParameterWorker.connect(engine, spec);
            float[] p = new float[8];
            worker.pull(p); // and never pushes
            Thread.sleep(1500);
            try {
                worker.close();
            } catch (ParameterServerException serverGone) {
                // the goodbye may find the server closed: either way nothing waits past the deadline
            }
        });
    }
}
