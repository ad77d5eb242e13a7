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
import java.nio.file.Path;

/**
 * Whether a peer process still holds its lock file ({@link OwnerLock}): the liveness of a connected peer, true in
 * every PID namespace alike (a pid probe such as {@code kill(pid, 0)} or {@code /proc/<pid>} asks about whatever
 * process has that number here, or none). Keeps a read-only descriptor of the peer's lock file, opened at the first
 * probe, and asks the kernel with {@code fcntl(F_OFD_GETLK)} whether a read lock would conflict: one syscall and no
 * allocation, so the request path may ask every millisecond. An open-file-description query sees the owner's POSIX
 * lock even when the owner is this very process (another copy of the provider); then the descriptor is never
 * closed, since closing it would drop that lock.
 *
 * <p>Answers {@link #UNKNOWN} when the downcalls are unavailable (no native access, another architecture) or the
 * kernel lacks OFD locks; callers then ask {@link OwnerLock#check} (Java, allocates) at their slower period. Used
 * under the owning queue pair's lock.
 */
final class LockProbe {
    /** The owner holds its lock. */
    static final int ALIVE = 1;
    /** The lock file is gone or nobody holds its lock: the owner is dead. */
    static final int DEAD = 0;
    /** Cannot tell here. */
    static final int UNKNOWN = -1;

    private static final int O_RDONLY = 0;
    private static final int O_CLOEXEC = 0x80000;
    private static final int ENOENT = 2;
    private static final int F_OFD_GETLK = 36;
    private static final short F_RDLCK = 0;
    private static final short F_UNLCK = 2;
    /** {@code struct flock} (64-bit Linux): l_type s16, l_whence s16, l_start s64 @8, l_len s64 @16, l_pid s32 @24. */
    private static final long FLOCK_SIZE = 32;
    private static final long L_PID = 24;
    private static final StructLayout CAPTURE = Linker.Option.captureStateLayout();
    private static final VarHandle ERRNO = CAPTURE.varHandle(MemoryLayout.PathElement.groupElement("errno"));

    private final Path lockFile;
    private final boolean self;
    private final Arena arena;
    private MemorySegment flock;
    private MemorySegment callState;
    private int fd = -1;
    /** The open failed for a reason other than ENOENT (permission, no descriptors): do not retry every probe. */
    private boolean unusable;
    /** The lock was seen held by this very process: the descriptor must stay open (see the class comment). */
    private boolean heldHere;

    /**
     * A probe of {@code lockFile}, the lock file of owner {@code ownerId}; nothing native happens before the first
     * {@link #probe}.
     *
     * @param arena where the probe's small native buffers go (the peer link's)
     */
    LockProbe(Path lockFile, long ownerId, Arena arena) {
        this.lockFile = lockFile;
        this.self = ownerId == OwnerLock.selfIdIfCreated();
        this.arena = arena;
    }

    /** Whether the downcalls are linked (links them on the first call). */
    static boolean isLinked() {
        return Calls.FCNTL != null;
    }

    /** {@link #ALIVE}, {@link #DEAD} or {@link #UNKNOWN}. */
    int probe() {
        if (self) {
            return ALIVE; // never open our own lock file: closing it would drop our lock
        }
        if (Calls.FCNTL == null || unusable) {
            return UNKNOWN;
        }
        try {
            if (fd < 0) {
                int opened = open();
                if (opened != ALIVE) {
                    return opened;
                }
            }
            flock.fill((byte) 0);
            flock.set(ValueLayout.JAVA_SHORT, 0, F_RDLCK);
            int rc = (int) Calls.FCNTL.invokeExact(callState, fd, F_OFD_GETLK, flock);
            if (rc != 0) {
                unusable = true; // EINVAL: a kernel without OFD locks (before 3.15)
                return UNKNOWN;
            }
            if (flock.get(ValueLayout.JAVA_SHORT, 0) == F_UNLCK) {
                return DEAD;
            }
            if (flock.get(ValueLayout.JAVA_INT, L_PID) == (int) ShmFiles.selfPid()) {
                heldHere = true;
            }
            return ALIVE;
        } catch (Throwable t) {
            unusable = true;
            return UNKNOWN;
        }
    }

    /** Opens the descriptor: ALIVE when open, DEAD when the lock file is gone, UNKNOWN otherwise. */
    private int open() throws Throwable {
        if (callState == null) {
            callState = arena.allocate(CAPTURE);
            flock = arena.allocate(FLOCK_SIZE, 8);
        }
        int rc;
        try (Arena scratch = Arena.ofConfined()) {
            rc = (int) Calls.OPEN.invokeExact(callState, scratch.allocateFrom(lockFile.toString()),
                O_RDONLY | O_CLOEXEC, 0);
        }
        if (rc >= 0) {
            fd = rc;
            return ALIVE;
        }
        if ((int) ERRNO.get(callState, 0L) == ENOENT) {
            return DEAD; // the lock file goes only after its owner (shutdown hook) or with a reaper that held it
        }
        unusable = true;
        return UNKNOWN;
    }

    /** Closes the descriptor (unless this process holds the lock through another one). */
    void close() {
        int f = fd;
        fd = -1;
        if (f >= 0 && !heldHere) {
            try {
                int rc = (int) Calls.CLOSE.invokeExact(f);
                assert rc == 0 || rc == -1;
            } catch (Throwable t) {
                // nothing to do: the descriptor goes with the process
            }
        }
    }

    /** The downcalls, linked on first use or by {@link NativeWarmup} (not at queue pair creation). */
    static final class Calls {
        static final MethodHandle OPEN;
        static final MethodHandle FCNTL;
        static final MethodHandle CLOSE;

        static {
            MethodHandle open = null;
            MethodHandle fcntl = null;
            MethodHandle close = null;
            String arch = System.getProperty("os.arch", "");
            // The flag values and struct flock layout above are those of 64-bit Linux on these architectures.
            if (System.getProperty("os.name", "").equals("Linux")
                && (arch.equals("amd64") || arch.equals("x86_64") || arch.equals("aarch64")
                || arch.equals("riscv64"))) {
                try {
                    Linker linker = Linker.nativeLinker();
                    Linker.Option errno = Linker.Option.captureCallState("errno");
                    open = linker.downcallHandle(linker.defaultLookup().findOrThrow("open"),
                        FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.JAVA_INT,
                            ValueLayout.JAVA_INT), errno, Linker.Option.firstVariadicArg(2));
                    fcntl = linker.downcallHandle(linker.defaultLookup().findOrThrow("fcntl"),
                        FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.JAVA_INT,
                            ValueLayout.ADDRESS), errno, Linker.Option.firstVariadicArg(2));
                    close = linker.downcallHandle(linker.defaultLookup().findOrThrow("close"),
                        FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT));
                } catch (Throwable ignored) {
                    open = null; // no native access: OwnerLock.check answers instead
                    fcntl = null;
                    close = null;
                }
            }
            OPEN = open;
            FCNTL = fcntl;
            CLOSE = close;
        }

        private Calls() {
        }
    }
}
