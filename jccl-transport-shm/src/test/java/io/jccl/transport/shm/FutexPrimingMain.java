package io.jccl.transport.shm;

import java.lang.invoke.MethodHandle;
import java.lang.management.ManagementFactory;

/**
 * A fresh JVM for {@link ShmDoorbellTest#shouldNotCustomizeTheFutexHandleOnASleepersThread}: links the futex
 * downcall, then calls it twice as often as the JDK's customization threshold (a harmless {@code getpid}), as a
 * sleeper's rare waits do, and prints "allocated N" for the bytes this thread allocated meanwhile.
 */
public final class FutexPrimingMain {
    private FutexPrimingMain() {
    }

    /** Runs the measurement; exit status 2 where the futex is not available. */
    public static void main(String[] args) throws Throwable {
        MethodHandle syscall = Doorbell.Futex.SYSCALL;
        if (syscall == null) {
            System.out.println("unavailable");
            System.exit(2);
        }
        com.sun.management.ThreadMXBean threads = (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
        long self = Thread.currentThread().threadId();
        long before = threads.getThreadAllocatedBytes(self);
        long pids = 0;
        for (int call = 0; call < 2 * io.jccl.common.NativeAccess.CUSTOMIZE_AFTER_CALLS; call++) {
            pids += (long) syscall.invokeExact(39L, 0L, 0L, 0L, 0L, 0L, 0L);
        }
        System.out.println("allocated " + (threads.getThreadAllocatedBytes(self) - before) + " (" + pids + ")");
    }
}
