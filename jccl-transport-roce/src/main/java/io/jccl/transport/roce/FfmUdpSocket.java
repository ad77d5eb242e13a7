package io.jccl.transport.roce;

import io.jccl.common.NativeAccess;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.StructLayout;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.VarHandle;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Locale;

/**
 * A UDP socket opened and driven through {@code java.lang.foreign} (Linux x86-64 and aarch64): {@code socket},
 * {@code setsockopt} ({@code IP_MTU_DISCOVER = IP_PMTUDISC_DO}, which is what the JDK's {@code IP_DONTFRAGMENT} sets
 * and what makes Linux send IPv4 identification 0; {@code IP_RECVTOS}; buffers), {@code bind}, and then
 * {@code sendmmsg} / {@code recvmmsg} on preallocated arrays ({@link TxBatch}, {@link RxRing}) and {@code poll} to
 * wait. The downcalls are linked once per JVM; {@link #available()} says whether that worked (it does not where
 * native access is denied, or on another OS or CPU), and {@link UdpIo#open} falls back to {@link NioUdpSocket}.
 */
final class FfmUdpSocket extends UdpIo {
    // <sys/socket.h>, <netinet/in.h>, <poll.h>, <errno.h>: the same values on x86-64 and aarch64 Linux
    static final int AF_INET = 2;
    static final int SOCK_DGRAM = 2;
    static final int SOCK_NONBLOCK = 0x800;
    static final int SOCK_CLOEXEC = 0x80000;
    static final int SOL_SOCKET = 1;
    static final int SO_SNDBUF = 7;
    static final int SO_RCVBUF = 8;
    static final int SO_REUSEPORT = 15;
    static final int SO_RCVBUFFORCE = 33;
    static final int IPPROTO_IP = 0;
    static final int IP_TOS = 1;
    static final int IP_MTU_DISCOVER = 10;
    static final int IP_RECVTOS = 13;
    static final int IP_PMTUDISC_DO = 2;
    /** {@code <netinet/udp.h>}: UDP GSO (a segment size per send) and GRO (segments delivered together). */
    static final int SOL_UDP = 17;
    static final int UDP_SEGMENT = 103;
    static final int UDP_GRO = 104;
    static final int EIO = 5;
    static final int EINVAL = 22;
    static final int EMSGSIZE = 90;
    static final int MSG_DONTWAIT = 0x40;
    static final int MSG_TRUNC = 0x20;
    static final int EPERM = 1;
    static final int EINTR = 4;
    static final int EAGAIN = 11;
    static final int ENOBUFS = 105;
    static final short POLLIN = 1;

    private static final StructLayout CALL_STATE = Linker.Option.captureStateLayout();
    /** Bytes of the errno capture area a caller passes to the batch calls. */
    static final long CALL_STATE_BYTES = CALL_STATE.byteSize();
    private static final VarHandle ERRNO = CALL_STATE.varHandle(MemoryLayout.PathElement.groupElement("errno"));

    /** The downcalls, linked on first use; null where they cannot be (then {@link #REASON} says why). */
    private static final class Calls {
        static final MethodHandle SOCKET;
        static final MethodHandle SETSOCKOPT;
        static final MethodHandle GETSOCKOPT;
        static final MethodHandle BIND;
        static final MethodHandle GETSOCKNAME;
        static final MethodHandle SENDMMSG;
        static final MethodHandle RECVMMSG;
        static final MethodHandle SENDTO;
        static final MethodHandle POLL;
        static final MethodHandle PPOLL;
        static final MethodHandle CLOSE;
        static final String REASON;

        static {
            MethodHandle socket = null;
            MethodHandle setsockopt = null;
            MethodHandle getsockopt = null;
            MethodHandle bind = null;
            MethodHandle getsockname = null;
            MethodHandle sendmmsg = null;
            MethodHandle recvmmsg = null;
            MethodHandle sendto = null;
            MethodHandle poll = null;
            MethodHandle ppoll = null;
            MethodHandle close = null;
            String reason = null;
            String os = System.getProperty("os.name", "").toLowerCase(Locale.ROOT);
            String arch = System.getProperty("os.arch", "").toLowerCase(Locale.ROOT);
            if (!os.contains("linux")) {
                reason = "not Linux (" + os + ")";
            } else if (!arch.equals("amd64") && !arch.equals("x86_64") && !arch.equals("aarch64")) {
                reason = "struct layouts known for x86-64 and aarch64 only, not " + arch;
            } else {
                try {
                    Linker linker = Linker.nativeLinker();
                    SymbolLookup libc = linker.defaultLookup();
                    ValueLayout i = ValueLayout.JAVA_INT;
                    ValueLayout a = ValueLayout.ADDRESS;
                    ValueLayout l = ValueLayout.JAVA_LONG;
                    Linker.Option errno = Linker.Option.captureCallState("errno");
                    socket = linker.downcallHandle(libc.findOrThrow("socket"), FunctionDescriptor.of(i, i, i, i),
                        errno);
                    setsockopt = linker.downcallHandle(libc.findOrThrow("setsockopt"),
                        FunctionDescriptor.of(i, i, i, i, a, i), errno);
                    getsockopt = linker.downcallHandle(libc.findOrThrow("getsockopt"),
                        FunctionDescriptor.of(i, i, i, i, a, a), errno);
                    bind = linker.downcallHandle(libc.findOrThrow("bind"), FunctionDescriptor.of(i, i, a, i), errno);
                    getsockname = linker.downcallHandle(libc.findOrThrow("getsockname"),
                        FunctionDescriptor.of(i, i, a, a), errno);
                    sendmmsg = linker.downcallHandle(libc.findOrThrow("sendmmsg"),
                        FunctionDescriptor.of(i, i, a, i, i), errno);
                    recvmmsg = linker.downcallHandle(libc.findOrThrow("recvmmsg"),
                        FunctionDescriptor.of(i, i, a, i, i, a), errno);
                    sendto = linker.downcallHandle(libc.findOrThrow("sendto"),
                        FunctionDescriptor.of(l, i, a, l, i, a, i), errno);
                    poll = linker.downcallHandle(libc.findOrThrow("poll"), FunctionDescriptor.of(i, a, l, i));
                    ppoll = linker.downcallHandle(libc.findOrThrow("ppoll"), FunctionDescriptor.of(i, a, l, a, a));
                    close = linker.downcallHandle(libc.findOrThrow("close"), FunctionDescriptor.of(i, i));
                } catch (Throwable e) {
                    // IllegalCallerException without --enable-native-access where it is denied, or no libc symbol
                    reason = e.toString();
                    socket = null;
                }
            }
            if (reason == null) {
                try {
                    prime(sendmmsg, recvmmsg, sendto, poll, ppoll);
                } catch (Throwable e) {
                    // only a head start: the handles work as they are, and the data path reports its own errors
                }
            }
            SOCKET = socket;
            SETSOCKOPT = setsockopt;
            GETSOCKOPT = getsockopt;
            BIND = bind;
            GETSOCKNAME = getsockname;
            SENDMMSG = sendmmsg;
            RECVMMSG = recvmmsg;
            SENDTO = sendto;
            POLL = poll;
            PPOLL = ppoll;
            CLOSE = close;
            REASON = reason;
        }
    }

    /**
     * Calls each data-path downcall past {@link NativeAccess#CUSTOMIZE_AFTER_CALLS} once, with arguments the
     * kernel answers at once (no descriptors, descriptor -1, zero timeouts), so that the JDK customizes the handles
     * here and not on
     * whichever thread makes the 128th call of a rare path: a polling thread's 128th wait in {@code ppoll}, minutes
     * into a stream, generated bytecode for the handle there (64 KiB allocated and a class loaded on an application
     * thread that allocates nothing otherwise: RoceAllocationTest failed 2 runs in 5, 65 592 bytes, the JFR stack
     * in {@code Invokers.maybeCustomize} under {@link #awaitFromPoller}). A few hundred failing system calls, once.
     */
    private static void prime(MethodHandle sendmmsg, MethodHandle recvmmsg, MethodHandle sendto, MethodHandle poll,
                              MethodHandle ppoll) throws Throwable {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment state = arena.allocate(CALL_STATE);
            MemorySegment zeroTime = arena.allocate(16, 8); // struct timespec {0, 0}
            long answers = 0; // every call fails (EBADF) or finds nothing (0)
            for (int call = 0; call <= NativeAccess.CUSTOMIZE_AFTER_CALLS; call++) {
                answers += (int) sendmmsg.invokeExact(state, -1, MemorySegment.NULL, 0, 0);
                answers += (int) recvmmsg.invokeExact(state, -1, MemorySegment.NULL, 0, 0, MemorySegment.NULL);
                answers += (long) sendto.invokeExact(state, -1, MemorySegment.NULL, 0L, 0, MemorySegment.NULL, 0);
                answers += (int) poll.invokeExact(MemorySegment.NULL, 0L, 0);
                answers += (int) ppoll.invokeExact(MemorySegment.NULL, 0L, zeroTime, MemorySegment.NULL);
            }
            if (answers > 0) {
                throw new IllegalStateException("a priming call did something: " + answers);
            }
        }
    }

    /** Whether FFM sockets work in this JVM. */
    static boolean available() {
        return Calls.SOCKET != null;
    }

    /** Why {@link #available()} is false (null when it is true). */
    static String unavailableReason() {
        return Calls.REASON;
    }

    private final int fd;
    private final int localPort;
    private final int receiveBufferBytes;
    /** For {@link #await} and {@link #sendOne} (receive thread, tests): the pollfd and a sockaddr_in. */
    private final MemorySegment pollFd;
    /** For {@link #awaitFromPoller} (one application thread at a time): its own pollfd, then a timespec. */
    private final MemorySegment pollerWait;
    /** The timespec part of {@link #pollerWait}. */
    private final MemorySegment pollerTimeout;
    private volatile boolean closed;
    /** Whether sends may carry GSO messages (JCCL_ROCE_GSO and the kernel; off for good once the kernel refuses). */
    private volatile boolean gso;
    /** Whether the kernel hands this socket the segments of one GSO send as one datagram (UDP_GRO). */
    private final boolean gro;

    FfmUdpSocket(InetAddress address, int port) throws IOException {
        this(address, port, true, false);
    }

    /**
     * Opens and binds the socket; with {@code segmentation}, turns UDP GSO and GRO on where the kernel knows them
     * (Linux 4.18 and 5.0: {@code setsockopt(SOL_UDP, UDP_SEGMENT/UDP_GRO)} answers ENOPROTOOPT before). With
     * {@code sendOnly} (a QP's flow-label socket, {@link #openSendOnly}): SO_REUSEPORT, no IP_RECVTOS, the smallest
     * receive buffer, no GRO (nothing is read from it); GSO is probed on it as on the context's socket.
     */
    FfmUdpSocket(InetAddress address, int port, boolean segmentation, boolean sendOnly) throws IOException {
        Arena arena = Arena.ofAuto();
        MemorySegment state = arena.allocate(CALL_STATE);
        int s;
        try {
            s = (int) Calls.SOCKET.invokeExact(state, AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        } catch (Throwable e) {
            throw new IOException("socket(): " + e, e);
        }
        if (s < 0) {
            throw new IOException("socket(): errno " + errno(state));
        }
        fd = s;
        boolean ok = false;
        try {
            setInt(arena, state, IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO, "IP_MTU_DISCOVER");
            if (sendOnly) {
                setInt(arena, state, SOL_SOCKET, SO_REUSEPORT, 1, "SO_REUSEPORT");
                setInt(arena, state, SOL_SOCKET, SO_RCVBUF, 1, "SO_RCVBUF"); // the kernel's minimum
            } else {
                setInt(arena, state, IPPROTO_IP, IP_RECVTOS, 1, "IP_RECVTOS");
                // privileged: past rmem_max, so that a window of megabytes fits (EPERM otherwise: the plain option)
                if (!trySetInt(arena, state, SOL_SOCKET, SO_RCVBUFFORCE, FORCED_RECEIVE_BUFFER_BYTES)) {
                    setInt(arena, state, SOL_SOCKET, SO_RCVBUF, SOCKET_BUFFER_BYTES, "SO_RCVBUF");
                }
            }
            setInt(arena, state, SOL_SOCKET, SO_SNDBUF, SOCKET_BUFFER_BYTES, "SO_SNDBUF");
            // UDP_SEGMENT 0 on the socket: no GSO unless a send's control message asks (a probe that it exists)
            gso = segmentation && trySetInt(arena, state, SOL_UDP, UDP_SEGMENT, 0);
            gro = segmentation && !sendOnly && trySetInt(arena, state, SOL_UDP, UDP_GRO, 1);
            MemorySegment sin = arena.allocate(TxBatch.SOCKADDR_IN_BYTES, 8);
            sin.set(ValueLayout.JAVA_SHORT, 0, (short) AF_INET);
            sin.set(ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.BIG_ENDIAN), 2, (short) port);
            sin.set(ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.BIG_ENDIAN), 4, RoceContext.ipv4(address));
            if ((int) Calls.BIND.invokeExact(state, fd, sin, TxBatch.SOCKADDR_IN_BYTES) != 0) {
                int e = errno(state);
                throw new IOException("bind(" + address.getHostAddress() + ":" + port + "): "
                    + (e == 98 ? "address already in use" : e == 99 ? "address not available" : "errno " + e));
            }
            MemorySegment length = arena.allocate(ValueLayout.JAVA_INT);
            length.set(ValueLayout.JAVA_INT, 0, TxBatch.SOCKADDR_IN_BYTES);
            if ((int) Calls.GETSOCKNAME.invokeExact(state, fd, sin, length) != 0) {
                throw new IOException("getsockname(): errno " + errno(state));
            }
            localPort = sin.get(ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.BIG_ENDIAN), 2) & 0xFFFF;
            MemorySegment value = arena.allocate(ValueLayout.JAVA_INT);
            length.set(ValueLayout.JAVA_INT, 0, 4);
            if ((int) Calls.GETSOCKOPT.invokeExact(state, fd, SOL_SOCKET, SO_RCVBUF, value, length) != 0) {
                throw new IOException("getsockopt(SO_RCVBUF): errno " + errno(state));
            }
            receiveBufferBytes = value.get(ValueLayout.JAVA_INT, 0);
            ok = true;
        } catch (IOException e) {
            throw e;
        } catch (Throwable e) {
            throw new IOException(e.toString(), e);
        } finally {
            if (!ok) {
                closeFd();
            }
        }
        pollFd = arena.allocate(8, 8);
        pollFd.set(ValueLayout.JAVA_INT, 0, fd);
        pollFd.set(ValueLayout.JAVA_SHORT, 4, POLLIN);
        pollerWait = arena.allocate(24, 8);
        pollerWait.set(ValueLayout.JAVA_INT, 0, fd);
        pollerWait.set(ValueLayout.JAVA_SHORT, 4, POLLIN);
        pollerTimeout = pollerWait.asSlice(8, 16);
    }

    private void setInt(Arena arena, MemorySegment state, int level, int option, int value, String name)
        throws Throwable {
        MemorySegment v = arena.allocate(ValueLayout.JAVA_INT);
        v.set(ValueLayout.JAVA_INT, 0, value);
        if ((int) Calls.SETSOCKOPT.invokeExact(state, fd, level, option, v, 4) != 0) {
            throw new IOException("setsockopt(" + name + "): errno " + errno(state));
        }
    }

    private boolean trySetInt(Arena arena, MemorySegment state, int level, int option, int value) throws Throwable {
        MemorySegment v = arena.allocate(ValueLayout.JAVA_INT);
        v.set(ValueLayout.JAVA_INT, 0, value);
        return (int) Calls.SETSOCKOPT.invokeExact(state, fd, level, option, v, 4) == 0;
    }

    static int errno(MemorySegment state) {
        return (int) ERRNO.get(state, 0L);
    }

    @Override
    String kind() {
        return "ffm";
    }

    @Override
    int localPort() {
        return localPort;
    }

    @Override
    int receiveBufferBytes() {
        return receiveBufferBytes;
    }

    @Override
    int send(TxBatch batch, InetSocketAddress to, int toIpv4, int toPort) throws IOException {
        if (closed) { // never write to a descriptor number that may since name another file
            throw new java.nio.channels.ClosedChannelException();
        }
        if (batch.grouped() && !gso) {
            batch.ungroup(0); // GSO was refused since these packets were queued
        }
        batch.destination(toIpv4, toPort);
        int sent = 0;
        int calls = 0;
        for (int tries = 0; sent < batch.messageCount(); ) {
            int n;
            try {
                n = (int) Calls.SENDMMSG.invokeExact(batch.callState, fd, batch.headersFrom(sent),
                    batch.messageCount() - sent, 0);
            } catch (Throwable e) {
                throw new IOException("sendmmsg: " + e, e);
            }
            calls++;
            if (n > 0) {
                sent += n;
                tries = 0;
                continue;
            }
            int e = errno(batch.callState);
            if (closed) {
                throw new IOException("socket closed");
            }
            if (e == EPERM) {
                // A netfilter rule dropped this datagram in OUTPUT (Linux answers EPERM): for RC that is a lost
                // packet, which go-back-N recovers, as rxe retries; skip it and send the rest. A GSO message is
                // one datagram to netfilter (segmented after OUTPUT): all its packets are lost together.
                batch.refused += batch.messagePackets(sent);
                sent++;
                continue;
            }
            if ((e == EIO || e == EINVAL || e == EMSGSIZE) && batch.messagePackets(sent) > 1) {
                // no GSO here (EIO: no checksum offload on the route's device; EINVAL: an older kernel's limits):
                // one datagram per packet from now on, identification 0 as before
                gso = false;
                batch.ungroup(sent);
                io.jccl.common.Log.get().info(-1, io.jccl.common.Log.Subsys.NET, () -> "roce0: the kernel refused "
                    + "UDP GSO (errno " + e + "); one datagram per packet from now on");
                continue;
            }
            if (e != EAGAIN && e != EINTR && e != ENOBUFS) {
                throw new IOException("sendmmsg: errno " + e);
            }
            // the send buffer is full: the packet waits for room rather than being lost
            if (tries++ < 64) {
                Thread.onSpinWait();
            } else {
                Thread.yield();
            }
        }
        return calls;
    }

    @Override
    void sendOne(ByteBuffer packet, int length, InetSocketAddress to) throws IOException {
        if (!packet.isDirect()) {
            ByteBuffer copy = ByteBuffer.allocateDirect(length);
            copy.put(0, packet, 0, length);
            packet = copy;
        }
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment sin = arena.allocate(TxBatch.SOCKADDR_IN_BYTES, 8);
            MemorySegment state = arena.allocate(CALL_STATE);
            sin.set(ValueLayout.JAVA_SHORT, 0, (short) AF_INET);
            sin.set(ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.BIG_ENDIAN), 2, (short) to.getPort());
            sin.set(ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.BIG_ENDIAN), 4,
                RoceContext.ipv4(to.getAddress()));
            MemorySegment data = MemorySegment.ofBuffer(packet);
            for (int tries = 0; ; tries++) {
                long n = (long) Calls.SENDTO.invokeExact(state, fd, data, (long) length, 0, sin,
                    TxBatch.SOCKADDR_IN_BYTES);
                if (n >= 0) {
                    return;
                }
                int e = errno(state);
                if ((e != EAGAIN && e != EINTR && e != ENOBUFS) || closed) {
                    throw new IOException("sendto: errno " + e);
                }
                Thread.yield();
            }
        } catch (IOException e) {
            throw e;
        } catch (Throwable e) {
            throw new IOException("sendto: " + e, e);
        }
    }

    @Override
    int receive(RxRing ring, int max) throws IOException {
        if (closed) {
            throw new java.nio.channels.ClosedChannelException();
        }
        int n;
        try {
            n = (int) Calls.RECVMMSG.invokeExact(ring.callState, fd, ring.headers, max, MSG_DONTWAIT,
                MemorySegment.NULL);
        } catch (Throwable e) {
            throw new IOException("recvmmsg: " + e, e);
        }
        if (n > 0) {
            ring.decode(n);
            return n;
        }
        int e = errno(ring.callState);
        if (n == 0 || e == EAGAIN || e == EINTR) {
            return 0;
        }
        throw new IOException("recvmmsg: errno " + e);
    }

    @Override
    void await(int timeoutMs) throws IOException {
        if (closed) {
            throw new java.nio.channels.ClosedChannelException();
        }
        try {
            int ignored = (int) Calls.POLL.invokeExact(pollFd, 1L, timeoutMs);
        } catch (Throwable e) {
            throw new IOException("poll: " + e, e);
        }
    }

    @Override
    boolean pollerCanAwait() {
        return true;
    }

    @Override
    void awaitFromPoller(long timeoutNs) throws IOException {
        if (closed) {
            throw new java.nio.channels.ClosedChannelException();
        }
        // ppoll, not poll: poll's timeout is whole milliseconds, and a completion that no datagram brings (another
        // thread's flush) must not wait that long
        pollerTimeout.set(ValueLayout.JAVA_LONG, 0, timeoutNs / 1_000_000_000L);
        pollerTimeout.set(ValueLayout.JAVA_LONG, 8, timeoutNs % 1_000_000_000L);
        try {
            int ignored = (int) Calls.PPOLL.invokeExact(pollerWait, 1L, pollerTimeout, MemorySegment.NULL);
        } catch (Throwable e) {
            throw new IOException("ppoll: " + e, e);
        }
    }

    @Override
    void trafficClass(int tos) throws IOException {
        try (Arena arena = Arena.ofConfined()) {
            setInt(arena, arena.allocate(CALL_STATE), IPPROTO_IP, IP_TOS, tos, "IP_TOS");
        } catch (IOException e) {
            throw e;
        } catch (Throwable e) {
            throw new IOException(e.toString(), e);
        }
    }

    @Override
    boolean gso() {
        return gso;
    }

    @Override
    boolean gro() {
        return gro;
    }

    @Override
    boolean reportsTos() {
        return true;
    }

    @Override
    public void close() {
        if (!closed) {
            closed = true;
            closeFd();
        }
    }

    private void closeFd() {
        try {
            int ignored = (int) Calls.CLOSE.invokeExact(fd);
        } catch (Throwable e) {
            // closing: nothing left to do with the descriptor
        }
    }

    @Override
    public String toString() {
        return "ffm udp fd " + fd + " port " + localPort;
    }
}
