package io.jccl.transport.shm;

import io.jccl.common.NativeAccess;

import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.VarHandle;
import java.util.concurrent.locks.LockSupport;

/**
 * A cross-process wake-up in a context's control file: a sequence word that sleepers {@code FUTEX_WAIT} on (a
 * shared futex: the kernel keys it by file and offset, so every process mapping the file reaches the same one)
 * and a count of sleepers. Whoever makes a completion available to the context (a peer publishing a receive
 * result, a local thread pushing a completion) calls {@link #ring()}, which costs one fence and one load unless
 * someone sleeps. This lets a blocked poll sleep for long stretches instead of waking every millisecond to look.
 *
 * <p>Lost wake-ups are excluded Dekker-style: a sleeper raises the count, fences, reads the sequence, then checks
 * for work once more before waiting on that sequence value; a ringer publishes its work, fences, reads the count,
 * and bumps the sequence before waking. Either the sleeper sees the work, or the ringer sees the sleeper.
 */
final class Doorbell {
    /** Offset of the sequence word in the context file header. */
    static final long SEQUENCE = 64;
    /** Offset of the sleeper count (another cache line half, written only by sleepers). */
    static final long SLEEPERS = 96;

    private static final VarHandle INT = ShmKeyTable.INT;
    private static final long SYS_FUTEX = 202;
    /** x86-64 {@code getpid}: a system call that does nothing, to prime the handle with. */
    private static final long SYS_GETPID = 39;

    private static final long FUTEX_WAIT = 0;
    private static final long FUTEX_WAKE = 1;
    private final MemorySegment file;
    private final long sequenceAddress;

    /** A doorbell in the header of {@code contextFile} (ours or a peer's mapping). */
    Doorbell(MemorySegment contextFile) {
        this.file = contextFile;
        this.sequenceAddress = contextFile.address() + SEQUENCE;
    }

    /** Whether sleepers really sleep until rung (futex available), rather than parking in short slices. */
    static boolean isFutexAvailable() {
        return Futex.SYSCALL != null;
    }

    /**
     * The {@code syscall} downcall, linked when first needed: linking the first FFM downcall of a JVM costs tens of
     * milliseconds (linker start-up, generated stub classes), which a communicator that never sleeps should not pay
     * at creation. {@link NativeWarmup} links it ahead of time on a background thread.
     */
    static final class Futex {
        static final MethodHandle SYSCALL = link();

        private Futex() {
        }

        private static MethodHandle link() {
            try {
                if (System.getProperty("os.arch").equals("amd64")) {
                    Linker linker = Linker.nativeLinker();
                    MethodHandle syscall = linker.downcallHandle(linker.defaultLookup().findOrThrow("syscall"),
                        FunctionDescriptor.of(ValueLayout.JAVA_LONG, ValueLayout.JAVA_LONG, ValueLayout.JAVA_LONG,
                            ValueLayout.JAVA_LONG, ValueLayout.JAVA_LONG, ValueLayout.JAVA_LONG,
                            ValueLayout.JAVA_LONG, ValueLayout.JAVA_LONG),
                        Linker.Option.firstVariadicArg(1));
                    // customized here, not on a sleeper's 128th rare wait (NativeAccess.CUSTOMIZE_AFTER_CALLS)
                    for (int call = 0; call <= NativeAccess.CUSTOMIZE_AFTER_CALLS; call++) {
                        long pid = (long) syscall.invokeExact(SYS_GETPID, 0L, 0L, 0L, 0L, 0L, 0L);
                    }
                    return syscall;
                }
            } catch (Throwable ignored) {
                // no native access or another architecture: sleepers fall back to bounded parking
            }
            return null;
        }
    }

    /** Wakes every sleeper of the context, if there is one. Call after the work is published. */
    void ring() {
        VarHandle.fullFence();
        if ((int) INT.getVolatile(file, SLEEPERS) > 0) {
            INT.getAndAdd(file, SEQUENCE, 1);
            MethodHandle syscall = Futex.SYSCALL;
            if (syscall != null) {
                try {
                    long ignored = (long) syscall.invokeExact(SYS_FUTEX, sequenceAddress, FUTEX_WAKE,
                        (long) Integer.MAX_VALUE, 0L, 0L, 0L);
                } catch (Throwable t) {
                    // nothing to do: sleepers wake at their timeout
                }
            }
        }
    }

    /** Announces a sleeper; returns the sequence value to pass to {@link #await}. Pair with {@link #leave()}. */
    int enter() {
        INT.getAndAdd(file, SLEEPERS, 1);
        VarHandle.fullFence();
        return (int) INT.getVolatile(file, SEQUENCE);
    }

    /** Withdraws a sleeper announced with {@link #enter()}. */
    void leave() {
        INT.getAndAdd(file, SLEEPERS, -1);
    }

    /**
     * Sleeps until rung (the sequence moves past {@code sequence}) or {@code timeoutNs} passed. {@code timespec}
     * is 16 bytes of native memory owned by the calling thread.
     */
    void await(int sequence, long timeoutNs, MemorySegment timespec) {
        MethodHandle syscall = Futex.SYSCALL;
        if (syscall == null) {
            LockSupport.parkNanos(Math.min(timeoutNs, 1_000_000L));
            return;
        }
        timespec.set(ValueLayout.JAVA_LONG, 0, timeoutNs / 1_000_000_000L);
        timespec.set(ValueLayout.JAVA_LONG, 8, timeoutNs % 1_000_000_000L);
        try {
            long ignored = (long) syscall.invokeExact(SYS_FUTEX, sequenceAddress, FUTEX_WAIT,
                (long) sequence, timespec.address(), 0L, 0L);
        } catch (Throwable t) {
            LockSupport.parkNanos(Math.min(timeoutNs, 1_000_000L));
        }
    }
}
