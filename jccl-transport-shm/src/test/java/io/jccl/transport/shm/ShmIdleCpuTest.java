package io.jccl.transport.shm;

import io.jccl.verbs.WorkCompletion;
import org.junit.jupiter.api.Test;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.file.Files;
import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * What an idle process costs: a thread blocked in {@code cq.poll(..., timeout)} on a connected QP with nothing
 * arriving. Prints the poller thread's and the whole process's CPU time. The duration is 2 s by default; the
 * figure in docs/transport-shm.md was taken with {@code -Djccl.test.idle.seconds=10}.
 */
class ShmIdleCpuTest {

    /** utime + stime of this process in clock ticks, from /proc/self/stat. */
    static long processTicks() throws Exception {
        String stat = Files.readString(Path.of("/proc/self/stat"));
        String[] fields = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
        return Long.parseLong(fields[11]) + Long.parseLong(fields[12]);
    }

    @Test
    void shouldCostAlmostNoCpuWhileBlockedInPoll() throws Exception {
        long seconds = Long.getLong("jccl.test.idle.seconds", 2);
        try (ShmTestSupport.Side a = new ShmTestSupport.Side(); ShmTestSupport.Side b = new ShmTestSupport.Side()) {
            ShmTestSupport.connect(a, b);
            WorkCompletion[] wc = WorkCompletion.array(4);
            a.cq.poll(wc, 4, 50_000_000L); // warm the path
            ThreadMXBean threads = ManagementFactory.getThreadMXBean();
            long threadCpu0 = threads.getCurrentThreadCpuTime();
            long ticks0 = processTicks();
            long wall0 = System.nanoTime();
            int n = a.cq.poll(wc, 4, seconds * 1_000_000_000L);
            long wallNs = System.nanoTime() - wall0;
            long threadCpuNs = threads.getCurrentThreadCpuTime() - threadCpu0;
            long processCpuNs = (processTicks() - ticks0) * 10_000_000L; // USER_HZ = 100
            assertEquals(0, n);
            double threadShare = 100.0 * threadCpuNs / wallNs;
            double processShare = 100.0 * processCpuNs / wallNs;
            System.out.printf("shm idle poll: %.1f s wall, poller thread %.1f ms CPU (%.2f%% of a core), "
                    + "process %.0f ms CPU (%.2f%%)%n", wallNs / 1e9, threadCpuNs / 1e6, threadShare,
                processCpuNs / 1e6, processShare);
            // Generous bound: a spinning poller would show ~100%. No tight timing assertion (shared, noisy cores).
            assertTrue(threadShare < 20, "idle poller used " + threadShare + "% of a core");
        }
    }
}
