package io.jccl.collectives;

import io.jccl.common.CpuAffinity;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Ranks bound to distinct CPUs, as mpirun's default {@code --bind-to core} binds them, are not oversubscribed: each
 * rank's own mask holds one CPU, but together they fit the host (before, each rank compared the number of local
 * ranks with its own mask and yielded at once in every wait).
 */
class CpuPlacementCommunicatorTest {
    @Test
    void shouldNotYieldAtOnceWhenRanksAreBoundToCpusOfTheirOwn() {
        assumeTrue(CpuAffinity.available(), "sched_setaffinity not available (not Linux, or no native access)");
        List<Integer> cpus = CpuAffinity.allowedCpus();
        assumeTrue(cpus.size() >= 2, "needs two CPUs, has " + cpus);
        assumeTrue(System.getenv("JCCL_SPIN_US") == null, "JCCL_SPIN_US overrides the decision");
        AtomicBoolean anyYields = new AtomicBoolean();
        Ranks.runWith(2, (store, rank, size) -> {
            // the launcher's binding: the thread that creates the communicator (and runs its collectives)
            assertNull(CpuAffinity.bindCurrentThread(cpus.get(rank)));
            return Communicator.create(store, rank, size, Ranks.loop());
        }, c -> {
            assertEquals(1, CpuAffinity.threadCpus().cardinality());
            anyYields.compareAndSet(false, c.waits().yieldsAtOnce());
            c.barrier();
        });
        assertFalse(anyYields.get(), "ranks bound to CPUs of their own were taken for oversubscribed");
    }

    @Test
    void shouldYieldAtOnceWhenRanksAreBoundToOneCpu() {
        assumeTrue(CpuAffinity.available(), "sched_setaffinity not available (not Linux, or no native access)");
        assumeTrue(System.getenv("JCCL_SPIN_US") == null, "JCCL_SPIN_US overrides the decision");
        int cpu = CpuAffinity.allowedCpus().getFirst();
        AtomicBoolean allYield = new AtomicBoolean(true);
        Ranks.runWith(2, (store, rank, size) -> {
            assertNull(CpuAffinity.bindCurrentThread(cpu));
            return Communicator.create(store, rank, size, Ranks.loop());
        }, c -> {
            allYield.compareAndSet(true, c.waits().yieldsAtOnce());
            c.barrier();
        });
        assertEquals(true, allYield.get(), "two ranks bound to CPU " + cpu + " must yield at once");
    }
}
