package io.jccl.tools.perftest;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;

/** Pins the calling thread to one CPU with Linux {@code sched_setaffinity} (through FFM), as perftest users do with taskset. */
final class CpuAffinity {
    private static final int MASK_BYTES = 128;

    private CpuAffinity() {
    }

    /**
     * Pins the calling thread to {@code cpu}.
     *
     * @throws PerfException when the call fails (no such CPU, not Linux)
     */
    static void pinCurrentThread(int cpu) {
        if (cpu < 0 || cpu >= MASK_BYTES * 8) {
            throw new PerfException("CPU " + cpu + " outside 0.." + (MASK_BYTES * 8 - 1));
        }
        try (Arena arena = Arena.ofConfined()) {
            Linker linker = Linker.nativeLinker();
            MethodHandle setAffinity = linker.downcallHandle(
                linker.defaultLookup().find("sched_setaffinity").orElseThrow(
                    () -> new PerfException("sched_setaffinity not found (CPU pinning needs Linux)")),
                FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.JAVA_LONG,
                    ValueLayout.ADDRESS));
            MemorySegment mask = arena.allocate(MASK_BYTES);
            mask.set(ValueLayout.JAVA_BYTE, cpu / 8, (byte) (1 << (cpu % 8)));
            int rc = (int) setAffinity.invokeExact(0, (long) MASK_BYTES, mask);
            if (rc != 0) {
                throw new PerfException("cannot pin to CPU " + cpu + " (sched_setaffinity failed; does the CPU "
                    + "exist and is it in this process's cpuset?)");
            }
        } catch (PerfException e) {
            throw e;
        } catch (Throwable t) {
            throw new PerfException("cannot pin to CPU " + cpu + ": " + t);
        }
    }
}
