package io.jccl.transport.tcp;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.net.Inet4Address;
import java.net.InetSocketAddress;
import java.nio.channels.SocketChannel;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;

/**
 * Socket options Java does not offer ({@code TCP_NOTSENT_LOWAT}), set on a connected {@link SocketChannel}'s file
 * descriptor with an FFM {@code setsockopt} downcall. NIO does not expose the descriptor without
 * {@code --add-opens}, so it is found the way {@code ss} would: the connection's 4-tuple in
 * {@code /proc/net/tcp[6]} gives its socket inode, and {@code /proc/self/fd} the descriptor that links to that
 * inode. Linux only; everything here fails soft (returns false) elsewhere.
 */
final class SocketTuning {
    private static final int IPPROTO_TCP = 6;
    /** linux/tcp.h. */
    private static final int TCP_NOTSENT_LOWAT = 25;

    private SocketTuning() {
    }

    /** The downcall, linked when first needed (linking costs milliseconds; loopback-only jobs never pay it). */
    private static final class Calls {
        static final MethodHandle SETSOCKOPT;

        static {
            MethodHandle h = null;
            try {
                Linker linker = Linker.nativeLinker();
                h = linker.defaultLookup().find("setsockopt").map(a -> linker.downcallHandle(a,
                    FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.JAVA_INT,
                        ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.JAVA_INT))).orElse(null);
            } catch (Throwable e) {
                // no native access or no libc: options stay at the kernel's defaults
            }
            SETSOCKOPT = h;
        }
    }

    /**
     * Sets {@code TCP_NOTSENT_LOWAT} on {@code channel}'s socket: the kernel then keeps at most about this many
     * bytes queued but not yet sent, and a non-blocking write takes no more. Returns whether it was set.
     */
    static boolean setNotSentLowat(SocketChannel channel, int bytes) {
        int fd = descriptorOf(channel);
        if (fd < 0 || Calls.SETSOCKOPT == null) {
            return false;
        }
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment value = arena.allocate(ValueLayout.JAVA_INT);
            value.set(ValueLayout.JAVA_INT, 0, bytes);
            return (int) Calls.SETSOCKOPT.invokeExact(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, value, 4) == 0;
        } catch (Throwable e) {
            return false;
        }
    }

    /** The file descriptor of a connected channel, or -1 when it cannot be found. */
    static int descriptorOf(SocketChannel channel) {
        try {
            if (!(channel.getLocalAddress() instanceof InetSocketAddress local)
                || !(channel.getRemoteAddress() instanceof InetSocketAddress remote)) {
                return -1;
            }
            long inode = inodeOf(local, remote);
            if (inode <= 0) {
                return -1;
            }
            String target = "socket:[" + inode + "]";
            try (DirectoryStream<Path> fds = Files.newDirectoryStream(Path.of("/proc/self/fd"))) {
                for (Path fd : fds) {
                    try {
                        if (Files.readSymbolicLink(fd).toString().equals(target)) {
                            return Integer.parseInt(fd.getFileName().toString());
                        }
                    } catch (IOException | NumberFormatException e) {
                        // closed meanwhile, or not a descriptor: go on
                    }
                }
            }
        } catch (IOException | RuntimeException e) {
            return -1;
        }
        return -1;
    }

    /**
     * The socket inode of the TCP connection {@code local}-{@code remote}, or -1. An IPv4 connection is in
     * /proc/net/tcp when its socket is AF_INET, and in /proc/net/tcp6 (v4-mapped) when it is a dual-stack AF_INET6
     * socket, as Java's are by default: both tables are searched.
     */
    static long inodeOf(InetSocketAddress local, InetSocketAddress remote) throws IOException {
        boolean v4 = local.getAddress() instanceof Inet4Address && remote.getAddress() instanceof Inet4Address;
        if (v4) {
            long inode = inodeIn(Path.of("/proc/net/tcp"), procAddress(local, false), procAddress(remote, false));
            if (inode > 0) {
                return inode;
            }
        }
        return inodeIn(Path.of("/proc/net/tcp6"), procAddress(local, true), procAddress(remote, true));
    }

    private static long inodeIn(Path table, String wantLocal, String wantRemote) throws IOException {
        if (!Files.isReadable(table)) {
            return -1;
        }
        List<String> lines = Files.readAllLines(table);
        for (int i = 1; i < lines.size(); i++) {
            String[] f = lines.get(i).trim().split("\\s+");
            // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
            if (f.length > 9 && f[1].equalsIgnoreCase(wantLocal) && f[2].equalsIgnoreCase(wantRemote)) {
                return Long.parseLong(f[9]);
            }
        }
        return -1;
    }

    /**
     * An address as /proc/net/tcp prints it: the address's 32-bit words each in host (little-endian) order as
     * hex, then ':' and the port in hex. An IPv4 address in the tcp6 table is printed as v4-mapped.
     */
    static String procAddress(InetSocketAddress address, boolean v6Table) {
        byte[] a = address.getAddress().getAddress();
        if (v6Table && a.length == 4) {
            byte[] mapped = new byte[16];
            mapped[10] = (byte) 0xff;
            mapped[11] = (byte) 0xff;
            System.arraycopy(a, 0, mapped, 12, 4);
            a = mapped;
        }
        StringBuilder b = new StringBuilder(40);
        for (int w = 0; w < a.length; w += 4) {
            for (int k = 3; k >= 0; k--) {
                b.append(String.format(Locale.ROOT, "%02X", a[w + k] & 0xFF));
            }
        }
        return b.append(':').append(String.format(Locale.ROOT, "%04X", address.getPort())).toString();
    }
}
