package io.jccl.collectives.internal;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.util.ArrayList;
import java.util.List;

/**
 * Binds the calling thread to one CPU, the way {@code mpirun --bind-to core} binds a rank, but for one thread
 * only: {@code sched_setaffinity(0, …)} on Linux acts on the calling thread, so the JVM's compiler, GC and other
 * threads (created at start-up, before the binding) keep the whole machine. Threads the bound thread creates later
 * inherit its mask (as under mpirun).
 *
 * <p>Why: two ranks that spin-wait for each other on a 2-core host lose most of their time whenever the scheduler
 * puts both on one core (every wait then ends only when the spinner yields). Open MPI's ranks never meet this because
 * mpirun binds them to cores 0 and 1; binding only the thread that runs the collectives gives the same guarantee
 * without pinning the JIT and GC threads onto a spinning core (which made whole-JVM {@code taskset} worse).
 */
public final class CpuAffinity {
    /** Bytes of the CPU mask passed to the kernel (1024 CPUs, glibc's {@code cpu_set_t}). */
    private static final int MASK_BYTES = 128;

    private static final MethodHandle SET_AFFINITY;
    private static final MethodHandle GET_AFFINITY;
    private static final MethodHandle GET_CPU;

    static {
        MethodHandle set = null;
        MethodHandle get = null;
        MethodHandle cpu = null;
        try {
            Linker linker = Linker.nativeLinker();
            var libc = linker.defaultLookup();
            FunctionDescriptor affinity = FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT,
                ValueLayout.JAVA_LONG, ValueLayout.ADDRESS);
            set = libc.find("sched_setaffinity").map(a -> linker.downcallHandle(a, affinity)).orElse(null);
            get = libc.find("sched_getaffinity").map(a -> linker.downcallHandle(a, affinity)).orElse(null);
            cpu = libc.find("sched_getcpu").map(a -> linker.downcallHandle(a, FunctionDescriptor.of(
                ValueLayout.JAVA_INT), Linker.Option.critical(false))).orElse(null);
        } catch (Throwable e) {
            // no native access (--enable-native-access denied) or not Linux: binding is unavailable
        }
        SET_AFFINITY = set;
        GET_AFFINITY = get;
        GET_CPU = cpu;
    }

    private CpuAffinity() {
    }

    /** Whether this platform lets a thread bind itself. */
    public static boolean available() {
        return SET_AFFINITY != null && GET_AFFINITY != null;
    }

    /** The CPUs the calling thread may run on, ascending (empty when unknown). */
    public static List<Integer> allowedCpus() {
        List<Integer> cpus = new ArrayList<>();
        if (!available()) {
            return cpus;
        }
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment mask = arena.allocate(MASK_BYTES, 8);
            int rc = (int) GET_AFFINITY.invokeExact(0, (long) MASK_BYTES, mask);
            if (rc != 0) {
                return cpus;
            }
            for (int cpu = 0; cpu < MASK_BYTES * 8; cpu++) {
                if ((mask.get(ValueLayout.JAVA_BYTE, cpu >>> 3) & (1 << (cpu & 7))) != 0) {
                    cpus.add(cpu);
                }
            }
        } catch (Throwable e) {
            cpus.clear();
        }
        return cpus;
    }

    /**
     * Binds the calling thread to {@code cpu}.
     *
     * @return null when bound, otherwise why not (for the log)
     */
    public static String bindCurrentThread(int cpu) {
        if (!available()) {
            return "sched_setaffinity is not available (not Linux, or native access is not enabled)";
        }
        if (cpu < 0 || cpu >= MASK_BYTES * 8) {
            return "CPU " + cpu + " is outside 0.." + (MASK_BYTES * 8 - 1);
        }
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment mask = arena.allocate(MASK_BYTES, 8);
            mask.set(ValueLayout.JAVA_BYTE, cpu >>> 3, (byte) (1 << (cpu & 7)));
            int rc = (int) SET_AFFINITY.invokeExact(0, (long) MASK_BYTES, mask);
            return rc == 0 ? null : "sched_setaffinity(CPU " + cpu + ") failed";
        } catch (Throwable e) {
            return "sched_setaffinity(CPU " + cpu + ") failed: " + e;
        }
    }

    /** Restores the calling thread's mask to {@code cpus} (for example the list {@link #allowedCpus()} gave). */
    public static String bindCurrentThread(List<Integer> cpus) {
        if (!available()) {
            return "sched_setaffinity is not available";
        }
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment mask = arena.allocate(MASK_BYTES, 8);
            for (int cpu : cpus) {
                if (cpu >= 0 && cpu < MASK_BYTES * 8) {
                    mask.set(ValueLayout.JAVA_BYTE, cpu >>> 3,
                        (byte) (mask.get(ValueLayout.JAVA_BYTE, cpu >>> 3) | (1 << (cpu & 7))));
                }
            }
            int rc = (int) SET_AFFINITY.invokeExact(0, (long) MASK_BYTES, mask);
            return rc == 0 ? null : "sched_setaffinity(" + cpus + ") failed";
        } catch (Throwable e) {
            return "sched_setaffinity(" + cpus + ") failed: " + e;
        }
    }

    /** The CPU the calling thread runs on now, or -1 when unknown. */
    public static int currentCpu() {
        if (GET_CPU == null) {
            return -1;
        }
        try {
            return (int) GET_CPU.invokeExact();
        } catch (Throwable e) {
            return -1;
        }
    }
}
