package io.jccl.common;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.List;

/**
 * The CPU a thread runs on, and binding the calling thread to CPUs, through {@code sched_getcpu} and
 * {@code sched_setaffinity(0, …)} (which on Linux act on the calling thread only, so the JVM's compiler, GC and
 * other threads keep the whole machine; threads the bound thread creates later inherit its mask, as under mpirun).
 *
 * <p>Why: two ranks that spin-wait for each other on a 2-core host lose most of their time whenever the scheduler
 * puts both on one core (every wait then ends only when the spinner yields); measured here, that happened for whole
 * runs. Open MPI's ranks never meet this because mpirun binds them to cores 0 and 1. JCCL detects it instead (a
 * waiting rank publishes its CPU, the peer compares) and moves the higher rank off the shared CPU
 * ({@link #moveOff}), or binds the collective thread by local rank on request ({@code JCCL_CPU_BIND=core}).
 *
 * <p>Where the ranks of a host may run ({@link #threadCpus()}, {@link #onlineCpus()}) is read from {@code /proc}
 * and {@code /sys} instead: text files, no downcall to link at communicator creation, and the same answer under
 * mpirun's or Slurm's binding (the launcher sets the mask before the JVM starts).
 *
 * <p>The downcalls are linked lazily: the first FFM link in a JVM costs tens of milliseconds, so
 * {@link #prelink()} links them on a daemon thread, and the {@code *IfLinked} methods answer "unknown" until then.
 */
public final class CpuAffinity {
    /** Bytes of the CPU mask passed to the kernel (1024 CPUs, glibc's {@code cpu_set_t}). */
    private static final int MASK_BYTES = 128;

    private static volatile boolean linked;
    private static boolean prelinkStarted;

    private CpuAffinity() {
    }

    /** The downcalls, linked when this holder initialises. */
    private static final class Calls {
        static final MethodHandle SET_AFFINITY;
        static final MethodHandle GET_AFFINITY;
        static final MethodHandle GET_CPU;

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
                // no native access (--enable-native-access denied) or not Linux: everything answers "unknown"
            }
            SET_AFFINITY = set;
            GET_AFFINITY = get;
            GET_CPU = cpu;
        }

        private Calls() {
        }
    }

    /** Links the downcalls on a daemon thread, after a delay, once per JVM (returns at once). */
    public static synchronized void prelink() {
        if (prelinkStarted) {
            return;
        }
        prelinkStarted = true;
        BackgroundLinking.start("jccl-cpu-prelink", new Link());
    }

    /** Links the downcalls (a named class: a lambda would be spun into a class at start-up). */
    private static final class Link implements Runnable {
        @Override
        public void run() {
            MethodHandle h = Calls.GET_CPU;
            linked = h != null;
        }
    }

    /** Whether this platform lets a thread bind itself (links the downcalls on the calling thread if needed). */
    public static boolean available() {
        return Calls.SET_AFFINITY != null && Calls.GET_AFFINITY != null;
    }

    /** The CPUs the calling thread may run on, ascending (empty when unknown). */
    public static List<Integer> allowedCpus() {
        List<Integer> cpus = new ArrayList<>();
        if (!available()) {
            return cpus;
        }
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment mask = arena.allocate(MASK_BYTES, 8);
            int rc = (int) Calls.GET_AFFINITY.invokeExact(0, (long) MASK_BYTES, mask);
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
        if (cpu < 0 || cpu >= MASK_BYTES * 8) {
            return "CPU " + cpu + " is outside 0.." + (MASK_BYTES * 8 - 1);
        }
        return bindCurrentThread(List.of(cpu));
    }

    /** Sets the calling thread's mask to {@code cpus}; null when done, otherwise why not. */
    public static String bindCurrentThread(List<Integer> cpus) {
        if (!available()) {
            return "sched_setaffinity is not available (not Linux, or native access is not enabled)";
        }
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment mask = arena.allocate(MASK_BYTES, 8);
            for (int cpu : cpus) {
                if (cpu >= 0 && cpu < MASK_BYTES * 8) {
                    mask.set(ValueLayout.JAVA_BYTE, cpu >>> 3,
                        (byte) (mask.get(ValueLayout.JAVA_BYTE, cpu >>> 3) | (1 << (cpu & 7))));
                }
            }
            int rc = (int) Calls.SET_AFFINITY.invokeExact(0, (long) MASK_BYTES, mask);
            return rc == 0 ? null : "sched_setaffinity(" + cpus + ") failed";
        } catch (Throwable e) {
            return "sched_setaffinity(" + cpus + ") failed: " + e;
        }
    }

    /** The CPU the calling thread runs on now, or -1 when unknown (links the downcalls if needed). */
    public static int currentCpu() {
        if (Calls.GET_CPU == null) {
            return -1;
        }
        try {
            return (int) Calls.GET_CPU.invokeExact();
        } catch (Throwable e) {
            return -1;
        }
    }

    /**
     * The CPU the calling thread runs on now (a {@code sched_getcpu} downcall: nanoseconds, through the rseq area),
     * or -1 until {@link #prelink()} has linked it, or when it is unavailable. Never links on the caller's thread.
     */
    public static int currentCpuIfLinked() {
        return linked ? currentCpu() : -1;
    }

    /**
     * Moves the calling thread off {@code cpu} now, then gives it back its whole mask {@code allowed}: the kernel
     * migrates a thread at once when its mask stops including its CPU, and the restored mask keeps later choices
     * to the scheduler (the JIT and GC threads still run anywhere). A no-op until linked, or when {@code allowed}
     * holds nothing but {@code cpu}.
     *
     * @return whether the thread was moved
     */
    public static boolean moveOff(int cpu, List<Integer> allowed) {
        if (!linked || allowed.size() < 2 || !allowed.contains(cpu)) {
            return false;
        }
        List<Integer> others = new ArrayList<>(allowed);
        others.remove(Integer.valueOf(cpu));
        if (bindCurrentThread(others) != null) {
            return false;
        }
        return bindCurrentThread(allowed) == null;
    }

    /**
     * The CPUs the calling thread may run on, from {@code /proc/thread-self/status} ({@code Cpus_allowed_list}): no
     * downcall, so nothing to link. Empty when unknown (not Linux, or an unreadable {@code /proc}).
     */
    public static BitSet threadCpus() {
        return cpusAllowed(Path.of("/proc/thread-self/status"));
    }

    /** {@code Cpus_allowed_list} of a {@code /proc/.../status} file, or an empty set when unknown. */
    static BitSet cpusAllowed(Path status) {
        try {
            for (String line : Files.readAllLines(status)) {
                if (line.startsWith("Cpus_allowed_list:")) {
                    return parseCpuList(line.substring("Cpus_allowed_list:".length()));
                }
            }
        } catch (Exception e) {
            // not Linux, or /proc not mounted: unknown
        }
        return new BitSet();
    }

    /**
     * The number of CPUs the host has online ({@code /sys/devices/system/cpu/online}); when unknown, the JVM's
     * {@link Runtime#availableProcessors()} (which may be only this process's share).
     */
    public static int onlineCpus() {
        try {
            BitSet online = parseCpuList(Files.readString(Path.of("/sys/devices/system/cpu/online")));
            if (!online.isEmpty()) {
                return online.cardinality();
            }
        } catch (Exception e) {
            // not Linux: fall through
        }
        return Runtime.getRuntime().availableProcessors();
    }

    /**
     * Parses the kernel's CPU list format ({@code "0-3,8,10-11"}, as in {@code Cpus_allowed_list} and
     * {@code taskset -c}); blanks around it are ignored.
     *
     * @throws IllegalArgumentException naming the list when it is not in that format
     */
    public static BitSet parseCpuList(String list) {
        BitSet cpus = new BitSet();
        String text = list.strip();
        if (text.isEmpty()) {
            return cpus;
        }
        try {
            for (String part : text.split(",")) {
                int dash = part.indexOf('-');
                int first = Integer.parseInt(part.substring(0, dash < 0 ? part.length() : dash).strip());
                int last = dash < 0 ? first : Integer.parseInt(part.substring(dash + 1).strip());
                if (first < 0 || last < first || last >= MASK_BYTES * 8 * 64) {
                    throw new NumberFormatException(part);
                }
                cpus.set(first, last + 1);
            }
        } catch (RuntimeException e) {
            throw new IllegalArgumentException("not a CPU list (expected for example 0-3,8): '" + text + "'");
        }
        return cpus;
    }

    /** The kernel's CPU list format of {@code cpus} ({@code "0-3,8"}); empty for an empty set. */
    public static String formatCpuList(BitSet cpus) {
        StringBuilder b = new StringBuilder();
        for (int first = cpus.nextSetBit(0); first >= 0; ) {
            int end = cpus.nextClearBit(first);
            if (!b.isEmpty()) {
                b.append(',');
            }
            b.append(first);
            if (end - 1 > first) {
                b.append('-').append(end - 1);
            }
            first = cpus.nextSetBit(end);
        }
        return b.toString();
    }
}
