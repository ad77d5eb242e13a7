package io.jccl.benchmarks;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;
import java.util.Arrays;
import java.util.Locale;

/**
 * {@code bench/c/udp_pingpong.c} in Java: the same two threads busy-polling two non-blocking UDP sockets on
 * 127.0.0.1, through the same libc calls (FFM downcalls, as roce0's {@code FfmUdpSocket} makes them: errno
 * captured), with no JCCL code at all. It measures what the JVM alone adds to the kernel's floor under roce0's 8-byte
 * latency: the downcalls, the loop, the clock (docs/transport-roce.md, "What the JVM alone adds").
 *
 * <pre>JvmUdpPingPong SIZE ITERATIONS [SERVER_CPU,CLIENT_CPU|-] [plain|roce] [WARMUP]</pre>
 * Hops as in the C program: {@code plain} is {@code sendto} of SIZE bytes and {@code recv}; {@code roce} is roce0's
 * hop: the answer (a 28-byte header, SIZE bytes, a 4-byte ICRC in three iovecs) and a 20-byte ACK as one UDP GSO
 * message ({@code UDP_SEGMENT}) by {@code sendmmsg}, received by a one-slot {@code recvmmsg} with a control buffer
 * from a socket with roce0's options ({@code UDP_GRO}, {@code IP_RECVTOS}, ECT(0), Don't Fragment). WARMUP round
 * trips (default 20 000) run before the measured ones, so that C2 has compiled the loop.
 * Output as the C program's: {@code jvm_udp_pingpong[-roce],SIZE,ITERATIONS,t_min_us,t_typical_us,t_avg_us}, one
 * way (round trip / 2). x86-64 and aarch64 Linux (their {@code msghdr} layout).
 */
public final class JvmUdpPingPong {
    private static final int AF_INET = 2;
    private static final int SOCK_DGRAM = 2;
    private static final int SOCK_NONBLOCK = 0x800;
    private static final int IPPROTO_IP = 0;
    private static final int IP_TOS = 1;
    private static final int IP_MTU_DISCOVER = 10;
    private static final int IP_PMTUDISC_DO = 2;
    private static final int IP_RECVTOS = 13;
    private static final int SOL_UDP = 17;
    private static final int UDP_SEGMENT = 103;
    private static final int UDP_GRO = 104;
    private static final int MSG_DONTWAIT = 0x40;
    private static final int EAGAIN = 11;
    private static final int HEADER = 28;
    private static final int ICRC = 4;
    private static final int ACK = 20;
    /** struct msghdr (56 bytes) and the msg_len after it: one struct mmsghdr. */
    private static final int MMSGHDR = 64;
    private static final ValueLayout.OfInt NET_INT = ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.BIG_ENDIAN);
    private static final VarHandle ERRNO = Linker.Option.captureStateLayout()
        .varHandle(java.lang.foreign.MemoryLayout.PathElement.groupElement("errno"));

    private static final MethodHandle SOCKET;
    private static final MethodHandle SETSOCKOPT;
    private static final MethodHandle BIND;
    private static final MethodHandle GETSOCKNAME;
    private static final MethodHandle SENDTO;
    private static final MethodHandle RECV;
    private static final MethodHandle SENDMMSG;
    private static final MethodHandle RECVMMSG;
    private static final MethodHandle SCHED_SETAFFINITY;

    static {
        Linker linker = Linker.nativeLinker();
        SymbolLookup libc = linker.defaultLookup();
        ValueLayout i = ValueLayout.JAVA_INT;
        ValueLayout a = ValueLayout.ADDRESS;
        ValueLayout l = ValueLayout.JAVA_LONG;
        Linker.Option errno = Linker.Option.captureCallState("errno");
        SOCKET = linker.downcallHandle(libc.findOrThrow("socket"), FunctionDescriptor.of(i, i, i, i));
        SETSOCKOPT = linker.downcallHandle(libc.findOrThrow("setsockopt"), FunctionDescriptor.of(i, i, i, i, a, i));
        BIND = linker.downcallHandle(libc.findOrThrow("bind"), FunctionDescriptor.of(i, i, a, i));
        GETSOCKNAME = linker.downcallHandle(libc.findOrThrow("getsockname"), FunctionDescriptor.of(i, i, a, a));
        SENDTO = linker.downcallHandle(libc.findOrThrow("sendto"), FunctionDescriptor.of(l, i, a, l, i, a, i),
            errno);
        RECV = linker.downcallHandle(libc.findOrThrow("recv"), FunctionDescriptor.of(l, i, a, l, i), errno);
        SENDMMSG = linker.downcallHandle(libc.findOrThrow("sendmmsg"), FunctionDescriptor.of(i, i, a, i, i), errno);
        RECVMMSG = linker.downcallHandle(libc.findOrThrow("recvmmsg"), FunctionDescriptor.of(i, i, a, i, i, a),
            errno);
        SCHED_SETAFFINITY = linker.downcallHandle(libc.findOrThrow("sched_setaffinity"),
            FunctionDescriptor.of(i, i, l, a));
    }

    private JvmUdpPingPong() {
    }

    /** One end: its socket, its address, and the preallocated messages of its hop. */
    private static final class End {
        final boolean roce;
        final int size;
        final int fd;
        final MemorySegment address;
        final MemorySegment state;
        final MemorySegment tx;
        final MemorySegment rx;
        final MemorySegment sendHeader;
        final MemorySegment receiveHeader;

        End(Arena arena, boolean roce, int size) throws Throwable {
            this.roce = roce;
            this.size = size;
            int fd = (int) SOCKET.invokeExact(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
            check(fd, "socket");
            this.fd = fd;
            if (roce) {
                option(arena, IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO);
                option(arena, IPPROTO_IP, IP_RECVTOS, 1);
                option(arena, IPPROTO_IP, IP_TOS, 2);
                option(arena, SOL_UDP, UDP_GRO, 1);
            }
            address = arena.allocate(16, 8);
            address.set(ValueLayout.JAVA_SHORT, 0, (short) AF_INET);
            address.set(NET_INT, 4, 0x7f000001);
            check((int) BIND.invokeExact(fd, address, 16), "bind");
            MemorySegment length = arena.allocate(ValueLayout.JAVA_INT);
            length.set(ValueLayout.JAVA_INT, 0, 16);
            check((int) GETSOCKNAME.invokeExact(fd, address, length), "getsockname");
            state = arena.allocate(Linker.Option.captureStateLayout());
            tx = arena.allocate(256 + 65536, 64);
            tx.fill((byte) 1);
            rx = arena.allocate(65536, 64);
            sendHeader = arena.allocate(MMSGHDR, 8);
            receiveHeader = arena.allocate(MMSGHDR, 8);
        }

        private void option(Arena arena, int level, int name, int value) throws Throwable {
            MemorySegment v = arena.allocate(ValueLayout.JAVA_INT);
            v.set(ValueLayout.JAVA_INT, 0, value);
            check((int) SETSOCKOPT.invokeExact(fd, level, name, v, 4), "setsockopt " + level + "/" + name);
        }

        /** Lays out the send msghdr (to {@code to}: header, payload, ICRC and the ACK, one GSO message). */
        void prepare(Arena arena, End to) {
            if (!roce) {
                return;
            }
            MemorySegment iov = arena.allocate(4 * 16, 8);
            long[][] parts = {{0, HEADER}, {256, size}, {32, ICRC}, {64, ACK}};
            for (int k = 0; k < 4; k++) {
                iov.set(ValueLayout.ADDRESS, k * 16L, tx.asSlice(parts[k][0]));
                iov.set(ValueLayout.JAVA_LONG, k * 16L + 8, parts[k][1]);
            }
            MemorySegment control = arena.allocate(24, 8); // CMSG_SPACE(sizeof(uint16_t))
            control.set(ValueLayout.JAVA_LONG, 0, 18); // CMSG_LEN(2)
            control.set(ValueLayout.JAVA_INT, 8, SOL_UDP);
            control.set(ValueLayout.JAVA_INT, 12, UDP_SEGMENT);
            control.set(ValueLayout.JAVA_SHORT, 16, (short) (HEADER + size + ICRC));
            sendHeader.set(ValueLayout.ADDRESS, 0, to.address);
            sendHeader.set(ValueLayout.JAVA_INT, 8, 16);
            sendHeader.set(ValueLayout.ADDRESS, 16, iov);
            sendHeader.set(ValueLayout.JAVA_LONG, 24, 4);
            sendHeader.set(ValueLayout.ADDRESS, 32, control);
            sendHeader.set(ValueLayout.JAVA_LONG, 40, 24);
            MemorySegment rxIov = arena.allocate(16, 8);
            rxIov.set(ValueLayout.ADDRESS, 0, rx);
            rxIov.set(ValueLayout.JAVA_LONG, 8, rx.byteSize());
            receiveHeader.set(ValueLayout.ADDRESS, 0, arena.allocate(16, 8)); // the source address
            receiveHeader.set(ValueLayout.ADDRESS, 16, rxIov);
            receiveHeader.set(ValueLayout.JAVA_LONG, 24, 1);
            receiveHeader.set(ValueLayout.ADDRESS, 32, arena.allocate(128, 8));
        }

        void send(End to) throws Throwable {
            if (!roce) {
                while ((long) SENDTO.invokeExact(state, fd, tx, (long) size, 0, to.address, 16) != size) {
                    retryOrFail("sendto");
                }
                return;
            }
            while ((int) SENDMMSG.invokeExact(state, fd, sendHeader, 1, 0) != 1) {
                retryOrFail("sendmmsg");
            }
        }

        void receive() throws Throwable {
            if (!roce) {
                while ((long) RECV.invokeExact(state, fd, rx, rx.byteSize(), 0) < 0) {
                    retryOrFail("recv");
                }
                return;
            }
            while (true) {
                receiveHeader.set(ValueLayout.JAVA_INT, 8, 16);
                receiveHeader.set(ValueLayout.JAVA_LONG, 40, 128);
                if ((int) RECVMMSG.invokeExact(state, fd, receiveHeader, 1, MSG_DONTWAIT, MemorySegment.NULL) == 1) {
                    return;
                }
                retryOrFail("recvmmsg");
            }
        }

        private void retryOrFail(String call) {
            int errno = (int) ERRNO.get(state, 0L);
            if (errno != EAGAIN) {
                throw new IllegalStateException(call + " failed, errno " + errno);
            }
        }
    }

    private static void check(int rc, String call) {
        if (rc < 0) {
            throw new IllegalStateException(call + " failed");
        }
    }

    /** Pins the calling thread to {@code cpu} (negative: left to the scheduler). */
    private static void pin(int cpu) throws Throwable {
        if (cpu < 0) {
            return;
        }
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment mask = arena.allocate(128, 8);
            mask.set(ValueLayout.JAVA_BYTE, cpu / 8, (byte) (1 << (cpu % 8)));
            check((int) SCHED_SETAFFINITY.invokeExact(0, 128L, mask), "sched_setaffinity to CPU " + cpu);
        }
    }

    /**
     * Runs the ping-pong.
     *
     * @param args SIZE ITERATIONS [SERVER_CPU,CLIENT_CPU|-] [plain|roce] [WARMUP]
     * @throws Throwable when a call fails
     */
    public static void main(String[] args) throws Throwable {
        if (args.length < 2 || args.length > 5) {
            System.err.println("usage: JvmUdpPingPong SIZE ITERATIONS [SERVER_CPU,CLIENT_CPU|-] [plain|roce] [WARMUP]");
            System.exit(2);
        }
        int size = Integer.parseInt(args[0]);
        int iterations = Integer.parseInt(args[1]);
        int serverCpu = -1;
        int clientCpu = -1;
        if (args.length >= 3 && !args[2].equals("-")) {
            String[] cpus = args[2].split(",");
            serverCpu = Integer.parseInt(cpus[0]);
            clientCpu = Integer.parseInt(cpus[1]);
        }
        boolean roce = args.length >= 4 && args[3].equals("roce");
        if (args.length >= 4 && !roce && !args[3].equals("plain")) {
            throw new IllegalArgumentException("the hop is plain or roce");
        }
        int warmup = args.length == 5 ? Integer.parseInt(args[4]) : 20_000;
        if (size < 1 || size > (roce ? 4096 : 65000) || iterations < 1 || warmup < 0) {
            throw new IllegalArgumentException("bad SIZE, ITERATIONS or WARMUP");
        }
        int total = warmup + iterations;
        pin(clientCpu);
        try (Arena arena = Arena.ofShared()) {
            End ping = new End(arena, roce, size);
            End pong = new End(arena, roce, size);
            ping.prepare(arena, pong);
            pong.prepare(arena, ping);
            int pongCpu = serverCpu;
            Throwable[] failure = new Throwable[1];
            Thread server = Thread.ofPlatform().name("pong").start(() -> {
                try {
                    pin(pongCpu);
                    for (int k = 0; k < total; k++) {
                        pong.receive();
                        pong.send(ping);
                    }
                } catch (Throwable e) {
                    failure[0] = e;
                }
            });
            double[] us = new double[iterations];
            for (int k = 0; k < total; k++) {
                long t0 = System.nanoTime();
                ping.send(pong);
                ping.receive();
                long t1 = System.nanoTime();
                if (k >= warmup) {
                    us[k - warmup] = (t1 - t0) / 2e3;
                }
            }
            server.join();
            if (failure[0] != null) {
                throw failure[0];
            }
            double sum = 0;
            for (double u : us) {
                sum += u;
            }
            Arrays.sort(us);
            String name = roce ? "jvm_udp_pingpong-roce" : "jvm_udp_pingpong";
            System.out.printf(Locale.ROOT, "%s,%d,%d,%.2f,%.2f,%.2f%n", name, size, iterations, us[0],
                us[iterations / 2], sum / iterations);
        }
    }
}
