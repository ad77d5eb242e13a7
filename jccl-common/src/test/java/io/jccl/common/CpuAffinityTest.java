package io.jccl.common;

import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Binding one thread to a CPU (JCCL_CPU_BIND=core) binds that thread only. */
class CpuAffinityTest {
    @Test
    void bindsOnlyTheCallingThread() throws Exception {
        Assumptions.assumeTrue(CpuAffinity.available(), "sched_setaffinity not available");
        List<Integer> before = CpuAffinity.allowedCpus();
        assertFalse(before.isEmpty());
        int target = before.getLast();
        AtomicReference<Object> result = new AtomicReference<>();
        Thread t = new Thread(() -> {
            String why = CpuAffinity.bindCurrentThread(target);
            result.set(why != null ? why : List.of(CpuAffinity.allowedCpus(), CpuAffinity.currentCpu()));
        });
        t.start();
        t.join();
        assertEquals(List.of(List.of(target), target), result.get());
        // the test thread (and the process) keep their mask
        assertEquals(before, CpuAffinity.allowedCpus());
    }

    @Test
    void movesTheCallingThreadOffACpuAndRestoresItsMask() throws Exception {
        Assumptions.assumeTrue(CpuAffinity.available(), "sched_setaffinity not available");
        List<Integer> allowed = CpuAffinity.allowedCpus();
        Assumptions.assumeTrue(allowed.size() >= 2, "needs two CPUs");
        CpuAffinity.prelink();
        long deadline = System.nanoTime() + 10_000_000_000L;
        while (CpuAffinity.currentCpuIfLinked() < 0 && System.nanoTime() < deadline) {
            Thread.sleep(1);
        }
        AtomicReference<Object> result = new AtomicReference<>();
        Thread t = new Thread(() -> {
            // the scheduler may move the thread back at any time, so a move only has to be seen once in a few tries
            boolean moved = false;
            for (int i = 0; i < 5 && !moved; i++) {
                int before = CpuAffinity.currentCpuIfLinked();
                moved = CpuAffinity.moveOff(before, allowed) && CpuAffinity.currentCpu() != before;
            }
            result.set(List.of(moved, CpuAffinity.allowedCpus(), CpuAffinity.moveOff(-5, allowed)));
        });
        t.start();
        t.join();
        assertEquals(List.of(true, allowed, false), result.get());
    }

    @Test
    void restoresAMaskAndRejectsImpossibleCpus() throws Exception {
        Assumptions.assumeTrue(CpuAffinity.available(), "sched_setaffinity not available");
        List<Integer> before = CpuAffinity.allowedCpus();
        AtomicReference<Object> result = new AtomicReference<>();
        Thread t = new Thread(() -> {
            assertNull(CpuAffinity.bindCurrentThread(before.getFirst()));
            assertNull(CpuAffinity.bindCurrentThread(before));
            String bad = CpuAffinity.bindCurrentThread(100_000);
            result.set(List.of(CpuAffinity.allowedCpus(), bad));
        });
        t.start();
        t.join();
        List<?> r = (List<?>) result.get();
        assertEquals(before, r.get(0));
        assertNotNull(r.get(1));
        assertTrue(((String) r.get(1)).contains("100000"), (String) r.get(1));
    }

    @Test
    void shouldParseAndFormatTheKernelsCpuLists() {
        java.util.BitSet cpus = CpuAffinity.parseCpuList(" 0-3,8,10-11\n");
        assertEquals(7, cpus.cardinality());
        assertEquals("0-3,8,10-11", CpuAffinity.formatCpuList(cpus));
        assertEquals("5", CpuAffinity.formatCpuList(CpuAffinity.parseCpuList("5")));
        assertTrue(CpuAffinity.parseCpuList("").isEmpty());
        IllegalArgumentException e = org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class,
            () -> CpuAffinity.parseCpuList("3-1"));
        assertTrue(e.getMessage().contains("'3-1'"), e.getMessage());
    }

    @Test
    void shouldReadTheThreadsMaskFromProcWithoutADowncall() throws Exception {
        java.nio.file.Path status = java.nio.file.Files.createTempFile("status", "");
        try {
            java.nio.file.Files.writeString(status, "Name:\tjava\nCpus_allowed:\t3\nCpus_allowed_list:\t1\n");
            assertEquals(CpuAffinity.parseCpuList("1"), CpuAffinity.cpusAllowed(status));
        } finally {
            java.nio.file.Files.delete(status);
        }
        Assumptions.assumeTrue(CpuAffinity.available(), "sched_getaffinity not available");
        // the same answer as the kernel's call, for this thread
        List<Integer> kernel = CpuAffinity.allowedCpus();
        java.util.BitSet proc = CpuAffinity.threadCpus();
        assertEquals(kernel.size(), proc.cardinality());
        for (int cpu : kernel) {
            assertTrue(proc.get(cpu), "CPU " + cpu);
        }
    }
}
