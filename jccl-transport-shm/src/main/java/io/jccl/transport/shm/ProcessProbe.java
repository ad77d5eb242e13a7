package io.jccl.transport.shm;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.StructLayout;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.VarHandle;

/**
 * A cheap "does this pid still exist" test: {@code kill(pid, 0)} through FFM (one syscall, no allocation),
 * used on the request path at most once per millisecond. It cannot tell a zombie from a live process; the
 * slower {@link ShmFiles#isAlive} (reads /proc) runs every 100 ms for that. One instance per queue pair.
 */
final class ProcessProbe {
    private static final int ESRCH = 3;
    private static final StructLayout CAPTURE = Linker.Option.captureStateLayout();
    private static final VarHandle ERRNO = CAPTURE.varHandle(MemoryLayout.PathElement.groupElement("errno"));

    private final MemorySegment callState;

    ProcessProbe(Arena arena) {
        callState = arena.allocate(CAPTURE);
    }

    /** Whether kill(2) is reachable (links the downcall on the first call). */
    static boolean isLinked() {
        return Kill.HANDLE != null;
    }

    /** False only when the pid is certainly gone (ESRCH); true when it exists, or when we cannot tell. */
    boolean exists(long pid) {
        MethodHandle kill = Kill.HANDLE;
        if (kill == null) {
            return ShmFiles.isAlive(pid);
        }
        try {
            int rc = (int) kill.invokeExact(callState, (int) pid, 0);
            return rc == 0 || (int) ERRNO.get(callState, 0L) != ESRCH;
        } catch (Throwable t) {
            return true;
        }
    }

    /** The {@code kill} downcall, linked on first use or by {@link NativeWarmup} (not at queue pair creation). */
    static final class Kill {
        static final MethodHandle HANDLE = link();

        private Kill() {
        }

        private static MethodHandle link() {
            try {
                Linker linker = Linker.nativeLinker();
                return linker.downcallHandle(linker.defaultLookup().findOrThrow("kill"),
                    FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.JAVA_INT),
                    Linker.Option.captureCallState("errno"));
            } catch (Throwable ignored) {
                return null; // no native access: fall back to the /proc check
            }
        }
    }
}
