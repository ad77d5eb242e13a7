package io.jccl.verbs;

import io.jccl.verbs.testing.LoopProvider;

import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Arrays;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * What the ConnectionManager tests share: a loop-provider side (context, domain, completion queue, memory), a raw
 * client that speaks the handshake byte by byte (only the wire format, nothing of the code under test, so the tests
 * run against older versions too), a traffic check through a connected pair, and footprint probes.
 */
final class ConnectionManagerRig implements AutoCloseable {
    static final int MAGIC = 0x4A434D31;
    static final int REQUEST = 1;
    static final int REPLY = 2;
    static final int READY_TO_USE = 3;
    static final int REJECT = 4;
    static final long SECOND_NS = TimeUnit.SECONDS.toNanos(1);

    final Context context;
    final ProtectionDomain domain;
    final CompletionQueue queue;
    final MemoryRegion memory;

    ConnectionManagerRig() {
        context = new LoopProvider().devices().getFirst().open();
        domain = context.allocateProtectionDomain();
        queue = context.createCompletionQueue(64);
        memory = domain.allocateMemory(4096, AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE,
            AccessFlag.REMOTE_READ);
    }

    QueuePairInitAttributes init() {
        return QueuePairInitAttributes.of(queue);
    }

    ConnectionManager.ConnectionListener listen() {
        return ConnectionManager.listen(domain, new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
    }

    /** Queue pairs of this side's domain that are still open. */
    long queuePairs() {
        return LoopProvider.queuePairCount(domain);
    }

    static ConnectionParameters parameters(byte[] secret, Duration timeout) {
        return ConnectionParameters.defaults().withSecret(secret).withHandshakeTimeout(timeout);
    }

    @Override
    public void close() {
        memory.close();
        queue.close();
        domain.close();
        context.close();
    }

    /**
     * Checks that a connected pair carries data both ways it should: a SEND of {@code payload} from the client into a
     * receive the server posted, and an RDMA WRITE of it into the server's memory.
     */
    static void assertCarriesTraffic(ConnectionManagerRig serverSide, ConnectionManager.Connection server,
                                     ConnectionManagerRig clientSide, ConnectionManager.Connection client,
                                     byte[] payload) {
        assertEquals(QueuePairState.READY_TO_SEND, server.queuePair().state());
        assertEquals(QueuePairState.READY_TO_SEND, client.queuePair().state());
        MemorySegment source = clientSide.memory.segment();
        MemorySegment target = serverSide.memory.segment();
        target.fill((byte) 0);
        MemorySegment.copy(payload, 0, source, ValueLayout.JAVA_BYTE, 0, payload.length);
        server.queuePair().postReceive(new ReceiveWorkRequest().wrId(1).local(serverSide.memory, 0, 512));
        client.queuePair().postSend(new SendWorkRequest().wrId(2).opcode(SendOpcode.SEND).flags(SendFlag.SIGNALED)
            .local(clientSide.memory, 0, payload.length));
        WorkCompletion[] completions = WorkCompletion.array(1);
        assertEquals(1, clientSide.queue.poll(completions, 1, 5 * SECOND_NS), "send completion");
        assertTrue(completions[0].isSuccess(), completions[0].toString());
        assertEquals(1, serverSide.queue.poll(completions, 1, 5 * SECOND_NS), "receive completion");
        assertTrue(completions[0].isSuccess(), completions[0].toString());
        assertEquals(payload.length, completions[0].byteLength());
        assertArrayEquals(payload, target.asSlice(0, payload.length).toArray(ValueLayout.JAVA_BYTE), "SEND data");
        client.queuePair().postSend(new SendWorkRequest().wrId(3).opcode(SendOpcode.RDMA_WRITE)
            .flags(SendFlag.SIGNALED).remote(serverSide.memory.address() + 1024, serverSide.memory.rkey())
            .local(clientSide.memory, 0, payload.length));
        assertEquals(1, clientSide.queue.poll(completions, 1, 5 * SECOND_NS), "write completion");
        assertTrue(completions[0].isSuccess(), completions[0].toString());
        assertArrayEquals(payload, target.asSlice(1024, payload.length).toArray(ValueLayout.JAVA_BYTE),
            "RDMA WRITE data");
    }

    // --- a raw client: the wire format only ---

    static Socket connectRaw(InetSocketAddress address) throws IOException {
        Socket socket = new Socket();
        socket.setTcpNoDelay(true);
        socket.connect(address, 5000);
        socket.setSoTimeout(5000);
        return socket;
    }

    static byte[] hello(boolean hasSecret, byte[] nonce) {
        return bytes(o -> {
            o.writeInt(MAGIC);
            o.writeBoolean(hasSecret);
            o.write(nonce);
        });
    }

    /** The server's hello: returns its nonce (throws if it is not a JCCL hello). */
    static byte[] readServerHello(Socket socket) throws IOException {
        byte[] hello = readExactly(socket, 21);
        assertEquals(MAGIC, ((hello[0] & 0xFF) << 24) | ((hello[1] & 0xFF) << 16) | ((hello[2] & 0xFF) << 8)
            | (hello[3] & 0xFF), "server hello magic");
        return Arrays.copyOfRange(hello, 5, 21);
    }

    /** The handshake's MAC, as the listener computes it (hostile clients craft messages with it). */
    static byte[] mac(byte[] secret, char role, byte[] first, byte[] second) {
        return ConnectionManager.mac(secret, role, first, second);
    }

    static byte[] request(String endpoint, int responder, int initiator, byte[] privateData) {
        return bytes(o -> {
            o.writeInt(REQUEST);
            o.writeUTF(endpoint);
            o.writeInt(responder);
            o.writeInt(initiator);
            o.writeShort(privateData.length);
            o.write(privateData);
        });
    }

    /** A well-formed endpoint of the loop provider (the QP it names need not exist). */
    static String someEndpoint() {
        return new Endpoint("loop", "loop0", 0x123, 0x456, "loop").encode();
    }

    static void send(Socket socket, byte[]... parts) throws IOException {
        for (byte[] part : parts) {
            socket.getOutputStream().write(part);
        }
        socket.getOutputStream().flush();
    }

    static byte[] readExactly(Socket socket, int n) throws IOException {
        byte[] b = socket.getInputStream().readNBytes(n);
        if (b.length != n) {
            throw new IOException("connection closed after " + b.length + " of " + n + " bytes");
        }
        return b;
    }

    /** What arrives within {@code timeoutMs} (up to {@code max} bytes, or until the peer closes). */
    static byte[] readAvailable(Socket socket, int max, long timeoutMs) throws IOException {
        ByteArrayOutputStream got = new ByteArrayOutputStream();
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMs);
        InputStream in = socket.getInputStream();
        byte[] buffer = new byte[Math.max(1, max)];
        while (got.size() < max) {
            long leftMs = TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime());
            if (leftMs <= 0) {
                break;
            }
            socket.setSoTimeout((int) leftMs);
            try {
                int n = in.read(buffer, 0, max - got.size());
                if (n < 0) {
                    break;
                }
                got.write(buffer, 0, n);
            } catch (SocketTimeoutException e) {
                break;
            }
        }
        return got.toByteArray();
    }

    static void closeQuietly(Socket socket) {
        try {
            socket.close();
        } catch (IOException ignored) {
            // closed
        }
    }

    interface Body {
        void write(DataOutputStream out) throws IOException;
    }

    static byte[] bytes(Body body) {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        try (DataOutputStream out = new DataOutputStream(bytes)) {
            body.write(out);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return bytes.toByteArray();
    }

    static byte[] utf8(String text) {
        return text.getBytes(StandardCharsets.UTF_8);
    }

    // --- footprint ---




    /** getrlimit/setrlimit(RLIMIT_NOFILE) through FFM (Linux: RLIMIT_NOFILE is 7 on x86-64 and arm64). */
    static final class FileLimit {
        private static final int RLIMIT_NOFILE = 7;
        private static final MethodHandle GET;
        private static final MethodHandle SET;

        static {
            Linker linker = Linker.nativeLinker();
            FunctionDescriptor descriptor = FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT,
                ValueLayout.ADDRESS);
            GET = linker.downcallHandle(linker.defaultLookup().find("getrlimit").orElseThrow(), descriptor);
            SET = linker.downcallHandle(linker.defaultLookup().find("setrlimit").orElseThrow(), descriptor);
        }

        private FileLimit() {
        }

        /** {soft, hard}. */
        static long[] get() {
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment limit = arena.allocate(16, 8);
                if ((int) GET.invokeExact(RLIMIT_NOFILE, limit) != 0) {
                    throw new IllegalStateException("getrlimit failed");
                }
                return new long[] {limit.get(ValueLayout.JAVA_LONG, 0), limit.get(ValueLayout.JAVA_LONG, 8)};
            } catch (Throwable e) {
                throw new IllegalStateException(e);
            }
        }

        static void set(long soft, long hard) {
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment limit = arena.allocate(16, 8);
                limit.set(ValueLayout.JAVA_LONG, 0, soft);
                limit.set(ValueLayout.JAVA_LONG, 8, hard);
                if ((int) SET.invokeExact(RLIMIT_NOFILE, limit) != 0) {
                    throw new IllegalStateException("setrlimit failed");
                }
            } catch (Throwable e) {
                throw new IllegalStateException(e);
            }
        }
    }
}
