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
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.LinkedBlockingQueue;

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
        return setNotSentLowat(channel, descriptorOf(channel), bytes);
    }

    private static boolean setNotSentLowat(SocketChannel channel, int fd, int bytes) {
        if (fd < 0 || Calls.SETSOCKOPT == null || !channel.isOpen()) {
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

    /** A channel waiting for its option, and the future that tells whether it was set. */
    private record Request(SocketChannel channel, int bytes, CompletableFuture<Boolean> done) {
    }

    private static final LinkedBlockingQueue<Request> PENDING = new LinkedBlockingQueue<>();
    private static boolean tunerStarted;

    /**
     * {@link #setNotSentLowat} on a daemon thread; the future completes there with whether it was set. Why not on
     * the caller's (a progress thread bringing a connection up): finding a descriptor reads the whole socket table
     * and every entry of /proc/self/fd, which for hundreds of connections made each connection's setup slow enough
     * for peers to time out; the tuning thread handles whatever has queued up with one read of each.
     */
    static CompletableFuture<Boolean> setNotSentLowatLater(SocketChannel channel, int bytes) {
        synchronized (SocketTuning.class) {
            if (!tunerStarted) {
                tunerStarted = true;
                Thread.ofPlatform().daemon().name("jccl-tcp-tuning").start(SocketTuning::tune);
            }
        }
        CompletableFuture<Boolean> done = new CompletableFuture<>();
        PENDING.add(new Request(channel, bytes, done));
        return done;
    }

    private static void tune() {
        List<Request> batch = new ArrayList<>();
        while (true) {
            try {
                batch.add(PENDING.take());
            } catch (InterruptedException e) {
                return;
            }
            PENDING.drainTo(batch);
            List<SocketChannel> channels = new ArrayList<>(batch.size());
            for (Request r : batch) {
                channels.add(r.channel());
            }
            int[] fds = descriptorsOf(channels);
            for (int i = 0; i < batch.size(); i++) {
                Request r = batch.get(i);
                r.done().complete(setNotSentLowat(r.channel(), fds[i], r.bytes()));
            }
            batch.clear();
        }
    }

    /** The file descriptor of a connected channel, or -1 when it cannot be found. */
    static int descriptorOf(SocketChannel channel) {
        return descriptorsOf(List.of(channel))[0];
    }

    /**
     * The file descriptors of connected channels (-1 where one cannot be found), with one read of the socket
     * tables and of /proc/self/fd for all of them.
     */
    static int[] descriptorsOf(List<SocketChannel> channels) {
        int[] fds = new int[channels.size()];
        Arrays.fill(fds, -1);
        try {
            Map<String, Long> inodes = new HashMap<>();
            readSocketTable(Path.of("/proc/net/tcp"), inodes);
            readSocketTable(Path.of("/proc/net/tcp6"), inodes);
            Map<Long, Integer> wanted = new HashMap<>();
            long[] inodeOf = new long[channels.size()];
            for (int i = 0; i < channels.size(); i++) {
                inodeOf[i] = inodeOf(channels.get(i), inodes);
                if (inodeOf[i] > 0) {
                    wanted.put(inodeOf[i], -1);
                }
            }
            if (wanted.isEmpty()) {
                return fds;
            }
            try (DirectoryStream<Path> entries = Files.newDirectoryStream(Path.of("/proc/self/fd"))) {
                for (Path fd : entries) {
                    try {
                        String target = Files.readSymbolicLink(fd).toString();
                        if (target.startsWith("socket:[") && target.endsWith("]")) {
                            long inode = Long.parseLong(target, 8, target.length() - 1, 10);
                            if (wanted.containsKey(inode)) {
                                wanted.put(inode, Integer.parseInt(fd.getFileName().toString()));
                            }
                        }
                    } catch (IOException | NumberFormatException e) {
                        // closed meanwhile, or not a descriptor: go on
                    }
                }
            }
            for (int i = 0; i < fds.length; i++) {
                if (inodeOf[i] > 0) {
                    fds[i] = wanted.get(inodeOf[i]);
                }
            }
        } catch (IOException | RuntimeException e) {
            // leave the rest at -1
        }
        return fds;
    }

    /** The socket inode of a connected channel from the tables' entries ("local remote" -> inode), or -1. */
    private static long inodeOf(SocketChannel channel, Map<String, Long> inodes) throws IOException {
        if (!(channel.getLocalAddress() instanceof InetSocketAddress local)
            || !(channel.getRemoteAddress() instanceof InetSocketAddress remote)) {
            return -1;
        }
        // An IPv4 connection is in /proc/net/tcp when its socket is AF_INET, and in /proc/net/tcp6 (v4-mapped)
        // when it is a dual-stack AF_INET6 socket, as Java's are by default: try both spellings.
        boolean v4 = local.getAddress() instanceof Inet4Address && remote.getAddress() instanceof Inet4Address;
        if (v4) {
            Long inode = inodes.get(procAddress(local, false) + " " + procAddress(remote, false));
            if (inode != null) {
                return inode;
            }
        }
        Long inode = inodes.get(procAddress(local, true) + " " + procAddress(remote, true));
        return inode != null ? inode : -1;
    }

    /** Adds a /proc/net/tcp[6] table's connections as "local remote" -> inode. */
    private static void readSocketTable(Path table, Map<String, Long> into) throws IOException {
        if (!Files.isReadable(table)) {
            return;
        }
        List<String> lines = Files.readAllLines(table);
        for (int i = 1; i < lines.size(); i++) {
            String[] f = lines.get(i).trim().split("\\s+");
            // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
            if (f.length > 9) {
                into.put(f[1].toUpperCase(Locale.ROOT) + " " + f[2].toUpperCase(Locale.ROOT), Long.parseLong(f[9]));
            }
        }
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
