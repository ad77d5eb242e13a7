package io.jccl.common;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.util.ArrayList;
import java.util.List;
import java.util.Queue;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.locks.LockSupport;

/**
 * Tells listeners when a process of this host exits, within milliseconds: one daemon thread per JVM
 * ({@code jccl-exit-watch}) waits in {@code poll(2)} on a pidfd ({@code pidfd_open(2)}, Linux 5.3+) per watched
 * process, which the kernel makes readable when the process exits. Used to detect a {@code kill -9}'d peer on the same
 * host at once rather than at the next periodic health check (issue 17's recovery time).
 *
 * <p>Why not {@link ProcessHandle#onExit()}: for a process that is not a child of this one the JDK polls
 * {@code isAlive} with sleeps of 300 ms and more. Where pidfds are unavailable (another OS, an old kernel, native
 * access denied) nothing is reported and callers keep their periodic checks. Not on any hot path: the thread sleeps
 * in the kernel, and wakes every {@link #POLL_MS} ms only to take new registrations.
 */
public final class ProcessExits {
    /** How long one poll(2) waits before the thread looks for new or cancelled registrations, ms. */
    static final int POLL_MS = 50;
    private static final int SYS_PIDFD_OPEN = 434; // the same number on x86_64 and aarch64 (asm-generic)
    private static final short POLLIN = 0x1;
    private static final int POLLFD_BYTES = 8; // struct pollfd { int fd; short events; short revents; }
    /** errno of pidfd_open for a pid that names no process. */
    private static final int ESRCH = 3;

    private static final Queue<Watch> ADDED = new ConcurrentLinkedQueue<>();
    private static Thread thread;

    private ProcessExits() {
    }

    /** A registration: cancel it when the process no longer needs watching. */
    public static final class Watch implements AutoCloseable {
        final long pid;
        final Runnable onExit;
        volatile boolean cancelled;
        int fd = -1;

        Watch(long pid, Runnable onExit) {
            this.pid = pid;
            this.onExit = onExit;
        }

        /** Stops watching; the listener is not called after this returns (unless it was running). */
        @Override
        public void close() {
            cancelled = true;
        }
    }

    /** The downcalls, linked by the watch thread when this holder initialises (the first FFM link costs ms). */
    private static final class Calls {
        static final MethodHandle SYSCALL;
        static final MethodHandle POLL;
        static final MethodHandle CLOSE;

        static {
            MethodHandle syscall = null;
            MethodHandle poll = null;
            MethodHandle close = null;
            try {
                Linker linker = Linker.nativeLinker();
                var libc = linker.defaultLookup();
                syscall = libc.find("syscall").map(a -> linker.downcallHandle(a, FunctionDescriptor.of(
                    ValueLayout.JAVA_LONG, ValueLayout.JAVA_LONG, ValueLayout.JAVA_INT, ValueLayout.JAVA_INT),
                    Linker.Option.firstVariadicArg(1), Linker.Option.captureCallState("errno"))).orElse(null);
                poll = libc.find("poll").map(a -> linker.downcallHandle(a, FunctionDescriptor.of(ValueLayout.JAVA_INT,
                    ValueLayout.ADDRESS, ValueLayout.JAVA_LONG, ValueLayout.JAVA_INT))).orElse(null);
                close = libc.find("close").map(a -> linker.downcallHandle(a, FunctionDescriptor.of(
                    ValueLayout.JAVA_INT, ValueLayout.JAVA_INT))).orElse(null);
            } catch (Throwable e) {
                // no native access or not Linux: nothing is reported, callers keep their periodic checks
            }
            SYSCALL = System.getProperty("os.name", "").startsWith("Linux") ? syscall : null;
            POLL = poll;
            CLOSE = close;
        }

        private Calls() {
        }
    }

    /**
     * Calls {@code onExit} (on the watch thread: keep it short, never block) once process {@code pid} of this host
     * has exited, or at once if it is gone already.
     */
    public static Watch watch(long pid, Runnable onExit) {
        Watch w = new Watch(pid, onExit);
        ADDED.add(w);
        synchronized (ProcessExits.class) {
            if (thread == null) {
                thread = new Thread(ProcessExits::run, "jccl-exit-watch");
                thread.setDaemon(true);
                thread.start();
            }
            LockSupport.unpark(thread);
        }
        return w;
    }

    private static void run() {
        if (Calls.SYSCALL == null || Calls.POLL == null || Calls.CLOSE == null) {
            ADDED.clear();
            return; // unsupported here; later registrations queue up harmlessly (a few objects per communicator)
        }
        List<Watch> watched = new ArrayList<>();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment fds = MemorySegment.NULL;
            int capacity = 0;
            MemorySegment errno = arena.allocate(Linker.Option.captureStateLayout());
            long errnoOffset = Linker.Option.captureStateLayout().byteOffset(
                java.lang.foreign.MemoryLayout.PathElement.groupElement("errno"));
            while (true) {
                for (Watch w; (w = ADDED.poll()) != null; ) {
                    w.fd = (int) (long) Calls.SYSCALL.invokeExact(errno, (long) SYS_PIDFD_OPEN, (int) w.pid, 0);
                    if (w.fd >= 0) {
                        watched.add(w);
                    } else if (errno.get(ValueLayout.JAVA_INT, errnoOffset) == ESRCH) {
                        notify(w); // no such process: it is gone already (callers pass same-namespace pids only)
                    } // else (ENOSYS: an old kernel; EMFILE): not watched, the periodic checks remain
                }
                for (int i = watched.size() - 1; i >= 0; i--) {
                    if (watched.get(i).cancelled) {
                        close(watched.remove(i).fd);
                    }
                }
                if (watched.isEmpty()) {
                    LockSupport.parkNanos(1_000_000_000L); // until a registration unparks it
                    continue;
                }
                if (watched.size() > capacity) {
                    capacity = Math.max(16, 2 * watched.size());
                    fds = arena.allocate((long) capacity * POLLFD_BYTES, 8);
                }
                for (int i = 0; i < watched.size(); i++) {
                    fds.set(ValueLayout.JAVA_INT, (long) i * POLLFD_BYTES, watched.get(i).fd);
                    fds.set(ValueLayout.JAVA_SHORT, (long) i * POLLFD_BYTES + 4, POLLIN);
                    fds.set(ValueLayout.JAVA_SHORT, (long) i * POLLFD_BYTES + 6, (short) 0);
                }
                int ready = (int) Calls.POLL.invokeExact(fds, (long) watched.size(), POLL_MS);
                if (ready <= 0) {
                    continue; // timeout, or EINTR
                }
                for (int i = watched.size() - 1; i >= 0; i--) {
                    if (fds.get(ValueLayout.JAVA_SHORT, (long) i * POLLFD_BYTES + 6) != 0) {
                        Watch w = watched.remove(i);
                        close(w.fd);
                        notify(w);
                    }
                }
            }
        } catch (Throwable e) {
            Log.get().warn(-1, Log.Subsys.INIT, "process exit watch stopped (peers' exits are noticed by the"
                + " periodic health checks only): " + e);
        }
    }

    private static void notify(Watch w) {
        if (!w.cancelled) {
            try {
                w.onExit.run();
            } catch (RuntimeException e) {
                Log.get().warn(-1, Log.Subsys.INIT, "process exit listener for pid " + w.pid + " failed: " + e);
            }
        }
    }

    private static void close(int fd) {
        try {
            int ignored = (int) Calls.CLOSE.invokeExact(fd);
        } catch (Throwable e) {
            // nothing to do: the fd leaks at worst
        }
    }
}
