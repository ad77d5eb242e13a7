package io.jccl.transport.roce;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;

/**
 * Moves the calling thread into a named network namespace ({@code ip netns}: {@code /var/run/netns/NAME}) with
 * {@code setns(2)} through FFM, and back on {@link #close}. Linux lets one thread of a process change its network
 * namespace; a socket belongs to the namespace its thread was in when it was created, and stays there. So one test
 * JVM can open a roce0 context on each "host" of the namespace bed, and their packets cross the bed's veth pairs,
 * bridge and nftables rules like those of two machines.
 */
final class NetnsThread implements AutoCloseable {
    private static final int CLONE_NEWNET = 0x40000000;
    private static final int O_RDONLY = 0;
    private static final MethodHandle OPEN;
    private static final MethodHandle SETNS;
    private static final MethodHandle CLOSE;

    static {
        Linker linker = Linker.nativeLinker();
        SymbolLookup libc = linker.defaultLookup();
        OPEN = linker.downcallHandle(libc.findOrThrow("open"),
            FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.JAVA_INT));
        SETNS = linker.downcallHandle(libc.findOrThrow("setns"),
            FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.JAVA_INT));
        CLOSE = linker.downcallHandle(libc.findOrThrow("close"),
            FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT));
    }

    private final int home;

    private NetnsThread(int home) {
        this.home = home;
    }

    /** Enters namespace {@code name}; {@link #close} returns this thread to the namespace it was in. */
    static NetnsThread enter(String name) {
        int home = open("/proc/thread-self/ns/net");
        int target = open("/var/run/netns/" + name);
        try {
            setns(target);
        } catch (RuntimeException e) {
            close(home);
            throw e;
        } finally {
            close(target);
        }
        return new NetnsThread(home);
    }

    @Override
    public void close() {
        try {
            setns(home);
        } finally {
            close(home);
        }
    }

    private static int open(String path) {
        try (Arena arena = Arena.ofConfined()) {
            int fd = (int) OPEN.invokeExact(arena.allocateFrom(path), O_RDONLY);
            if (fd < 0) {
                throw new IllegalStateException("cannot open " + path);
            }
            return fd;
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw new IllegalStateException(t);
        }
    }

    private static void setns(int fd) {
        int rc;
        try {
            rc = (int) SETNS.invokeExact(fd, CLONE_NEWNET);
        } catch (Throwable t) {
            throw new IllegalStateException(t);
        }
        if (rc != 0) {
            throw new IllegalStateException("setns(CLONE_NEWNET) failed");
        }
    }

    private static void close(int fd) {
        try {
            int ignored = (int) CLOSE.invokeExact(fd);
        } catch (Throwable t) {
            throw new IllegalStateException(t);
        }
    }
}
