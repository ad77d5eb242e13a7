package io.jccl.verbs;

import io.jccl.common.testing.Footprint;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import static io.jccl.verbs.ConnectionManagerRig.READY_TO_USE;
import static io.jccl.verbs.ConnectionManagerRig.REQUEST;
import static io.jccl.verbs.ConnectionManagerRig.SECOND_NS;
import static io.jccl.verbs.ConnectionManagerRig.assertCarriesTraffic;
import static io.jccl.verbs.ConnectionManagerRig.bytes;
import static io.jccl.verbs.ConnectionManagerRig.closeQuietly;
import static io.jccl.verbs.ConnectionManagerRig.connectRaw;
import static io.jccl.verbs.ConnectionManagerRig.hello;
import static io.jccl.verbs.ConnectionManagerRig.mac;
import static io.jccl.verbs.ConnectionManagerRig.parameters;
import static io.jccl.verbs.ConnectionManagerRig.readAvailable;
import static io.jccl.verbs.ConnectionManagerRig.readServerHello;
import static io.jccl.verbs.ConnectionManagerRig.request;
import static io.jccl.verbs.ConnectionManagerRig.send;
import static io.jccl.verbs.ConnectionManagerRig.utf8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Hostile input against one ConnectionManager listener (with a shared secret): random bytes, hellos with the wrong
 * magic or secret flag, wrong proofs, valid proofs followed by mutated, truncated and oversized requests (endpoint
 * and private-data lengths up to 64 KiB, depths outside 0..255, garbage endpoints), mutated RTUs, and a few hundred
 * connections that never speak, with a fixed seed ({@code -Djccl.fuzz.seed=...} to change it) and a bounded run
 * (about two seconds). While the silent connections are open a legitimate client connects, and another after the
 * storm; both get queue pairs that carry a SEND and an RDMA WRITE with the right bytes. Throughout, the listener
 * holds no thread of its own, and afterwards descriptors and heap are back near where they started.
 */
class ConnectionManagerFuzzTest {
    private static final long SEED = Long.getLong("jccl.fuzz.seed", 0x5EED_C0DEL);
    private static final byte[] SECRET = utf8("fuzz secret");
    private static final int CASES = 2000;
    private static final long CASES_BUDGET_NS = 1500 * TimeUnit.MILLISECONDS.toNanos(1);
    private static final int SILENT = 300;

    @Test
    void shouldStayBoundedAndKeepServingThroughAStormOfHostileClients() throws Exception {
        try (ConnectionManagerRig server = new ConnectionManagerRig();
             ConnectionManagerRig client = new ConnectionManagerRig();
             var listener = server.listen()) {
            InetSocketAddress address = listener.localAddress();
            Acceptor acceptor = new Acceptor(listener, server);
            try {
                Random random = new Random(SEED);
                // Warm up (class loading, the first handshakes, the first GC) so that the baseline is the steady state.
                runCases(address, random, 40);
                legitimateClient(server, client, address, acceptor, "warm-up");
                long baseFds = Footprint.awaitDescriptors(Long.MAX_VALUE, 3 * SECOND_NS);
                int baseThreads = Footprint.threads();
                long baseHeap = Footprint.heapUsedAfterGc();

                // 1. Hostile handshakes, one connection each.
                long start = System.nanoTime();
                int cases = 0;
                int maxThreads = baseThreads;
                long guardNs = start + 15 * SECOND_NS; // a listener that stops answering fails here, not at 120 s
                while (cases < CASES && System.nanoTime() - start < CASES_BUDGET_NS) {
                    runCases(address, random, 50);
                    cases += 50;
                    maxThreads = Math.max(maxThreads, Footprint.threads());
                }

                // 2. Silent connections; a legitimate client connects while they are open, amid more hostile cases.
                List<Socket> silent = new ArrayList<>();
                for (int i = 0; i < SILENT / 2; i++) {
                    silent.add(connectRaw(address));
                    assertTrue(System.nanoTime() - guardNs < 0, "the listener stopped taking connections in");
                }
                AtomicReference<Throwable> duringStorm = new AtomicReference<>();
                Thread legitimate = Thread.ofPlatform().name("cm-fuzz-legitimate").start(() -> {
                    try {
                        legitimateClient(server, client, address, acceptor, "during the storm");
                    } catch (Throwable e) {
                        duringStorm.set(e);
                    }
                });
                for (int i = SILENT / 2; i < SILENT; i++) {
                    silent.add(connectRaw(address));
                    assertTrue(System.nanoTime() - guardNs < 0, "the listener stopped taking connections in");
                }
                runCases(address, random, 100);
                cases += 100;
                maxThreads = Math.max(maxThreads, Footprint.threads());
                long fdsWithSilentOpen = Footprint.openDescriptors() - silent.size();
                legitimate.join(TimeUnit.SECONDS.toMillis(10));
                silent.forEach(ConnectionManagerRig::closeQuietly);
                long tookMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);

                // 3. After the storm: another legitimate client, then the footprint.
                legitimateClient(server, client, address, acceptor, "after the storm");
                long fds = Footprint.awaitDescriptors(baseFds + 8, 3 * SECOND_NS);
                int threads = Footprint.threads();
                long heapAfter = Footprint.heapUsedAfterGc() - baseHeap;
                long queuePairsLeft = server.queuePairs();
                String summary = cases + " hostile cases + " + SILENT + " silent connections in " + tookMs
                    + " ms (seed 0x" + Long.toHexString(SEED) + "): threads " + baseThreads + " -> max " + maxThreads
                    + " -> " + threads + "; descriptors " + baseFds + " -> " + fdsWithSilentOpen
                    + " server-side while " + SILENT + " were open -> " + fds + " after; heap " + (heapAfter >> 10)
                    + " KiB above baseline; completed handshakes the fuzz produced: " + acceptor.bogus
                    + "; server queue pairs left: " + queuePairsLeft;
                System.out.println(summary);
                if (duringStorm.get() != null) {
                    throw new AssertionError("legitimate client during the storm failed; " + summary, duringStorm.get());
                }
                assertTrue(!legitimate.isAlive(), "legitimate client during the storm still connecting; " + summary);
                assertTrue(maxThreads <= baseThreads + 2, summary); // the legitimate client's thread
                assertTrue(threads <= baseThreads + 1, summary);
                assertTrue(fdsWithSilentOpen <= baseFds + 100, summary); // at most 64 handshakes held, plus slack
                assertTrue(fds <= baseFds + 8, summary);
                assertTrue(heapAfter < 4L << 20, summary);
                assertEquals(0, queuePairsLeft, "queue pairs left behind; " + summary);
                assertEquals(null, acceptor.failure.get(), "the acceptor failed; " + summary);
            } finally {
                acceptor.stop();
            }
        }
    }

    /** A real client: connects, then checks the queue pair it got (and the server's) with a SEND and a WRITE. */
    private static void legitimateClient(ConnectionManagerRig server, ConnectionManagerRig client,
                                         InetSocketAddress address, Acceptor acceptor, String when)
        throws Exception {
        ConnectionManager.Connection connection = ConnectionManager.connect(client.domain, client.init(), address,
            parameters(SECRET, Duration.ofSeconds(5)).withPrivateData(utf8("legit " + when)));
        ConnectionManager.Connection serverSide = acceptor.legitimate.poll(5, TimeUnit.SECONDS);
        assertTrue(serverSide != null, "the listener did not hand out the legitimate connection " + when);
        try (QueuePair a = connection.queuePair(); QueuePair b = serverSide.queuePair()) {
            assertEquals("legit " + when, new String(serverSide.remotePrivateData(),
                java.nio.charset.StandardCharsets.UTF_8));
            assertCarriesTraffic(server, serverSide, client, connection, utf8("payload " + when + " " + SEED));
        }
    }

    /** The application's side: accepts in a loop, hands legitimate connections over and closes the rest. */
    private static final class Acceptor {
        final BlockingQueue<ConnectionManager.Connection> legitimate = new LinkedBlockingQueue<>();
        final AtomicReference<Throwable> failure = new AtomicReference<>();
        volatile int bogus;
        private volatile boolean stopping;
        private final ConnectionManager.ConnectionListener listener;
        private final Thread thread;

        Acceptor(ConnectionManager.ConnectionListener listener, ConnectionManagerRig server) {
            this.listener = listener;
            thread = Thread.ofPlatform().name("cm-fuzz-acceptor").daemon().start(() -> {
                ConnectionParameters parameters = parameters(SECRET, Duration.ofSeconds(2));
                while (!stopping) {
                    try {
                        ConnectionManager.Connection c = listener.accept(server.init(), parameters);
                        if (new String(c.remotePrivateData(), java.nio.charset.StandardCharsets.UTF_8)
                            .startsWith("legit")) {
                            legitimate.add(c);
                        } else {
                            bogus++; // a fuzz case that happened to complete the handshake
                            c.queuePair().close();
                        }
                    } catch (VerbsException e) {
                        if (e.reason() == VerbsException.Reason.CLOSED || stopping) {
                            return;
                        }
                        if (e.reason() != VerbsException.Reason.TIMEOUT) {
                            failure.compareAndSet(null, e); // nothing a client sends may end an accept call
                        }
                    } catch (Throwable e) {
                        failure.compareAndSet(null, e);
                        return;
                    }
                }
            });
        }

        void stop() throws InterruptedException {
            stopping = true;
            listener.close();
            thread.join(TimeUnit.SECONDS.toMillis(10));
        }
    }

    /** {@code n} hostile connections, one after another, each closed with a reset. */
    private static void runCases(InetSocketAddress address, Random random, int n) throws IOException {
        for (int i = 0; i < n; i++) {
            Socket s = connectRaw(address);
            try {
                runCase(s, random);
            } catch (IOException e) {
                // the listener closed it: fine
            } finally {
                try {
                    s.setSoLinger(true, 0); // no TIME_WAIT pile-up over a thousand connections
                } catch (IOException ignored) {
                    // closed
                }
                closeQuietly(s);
            }
        }
    }

    private static void runCase(Socket s, Random r) throws IOException {
        byte[] clientNonce = randomBytes(r, 16);
        switch (r.nextInt(12)) {
            case 0 -> send(s, randomBytes(r, 1 + r.nextInt(128)));
            case 1 -> send(s, hello(r.nextBoolean(), clientNonce), randomBytes(r, 1 + r.nextInt(64)));
            case 2 -> send(s, hello(true, clientNonce), randomBytes(r, 32), randomBytes(r, r.nextInt(64)));
            case 3 -> { // wrong magic, or the wrong secret flag
                byte[] h = hello(r.nextBoolean(), clientNonce);
                if (r.nextBoolean()) {
                    h[r.nextInt(4)] ^= (byte) (1 + r.nextInt(255));
                } else {
                    h[4] = 0;
                }
                send(s, h, randomBytes(r, r.nextInt(64)));
            }
            case 4 -> { // authenticated, then a mutated request (and maybe an RTU)
                authenticate(s, clientNonce);
                byte[] req = validRequest(r, "fuzz");
                for (int flips = 1 + r.nextInt(4); flips > 0; flips--) {
                    req[r.nextInt(req.length)] = (byte) r.nextInt(256);
                }
                send(s, req);
                if (r.nextBoolean()) {
                    send(s, bytes(o -> o.writeInt(READY_TO_USE)));
                }
            }
            case 5 -> { // authenticated, then an endpoint length beyond the limit, partly sent
                authenticate(s, clientNonce);
                send(s, bytes(o -> {
                    o.writeInt(REQUEST);
                    o.writeShort(1025 + r.nextInt(0xFFFF - 1025));
                    o.write(randomBytes(r, r.nextInt(256)));
                }));
            }
            case 6 -> { // authenticated, then private data beyond 196 bytes
                authenticate(s, clientNonce);
                send(s, bytes(o -> {
                    o.writeInt(REQUEST);
                    o.writeUTF(endpoint(r));
                    o.writeInt(16);
                    o.writeInt(16);
                    o.writeShort(197 + r.nextInt(0xFFFF - 197));
                    o.write(randomBytes(r, r.nextInt(256)));
                }));
            }
            case 7 -> { // a valid exchange cut short anywhere
                byte[] serverNonce = readServerHello(s);
                byte[] all = bytes(o -> {
                    o.write(hello(true, clientNonce));
                    o.write(mac(SECRET, 'C', clientNonce, serverNonce));
                    o.write(validRequest(r, "fuzz"));
                    o.writeInt(READY_TO_USE);
                });
                send(s, Arrays.copyOf(all, 1 + r.nextInt(all.length - 1)));
            }
            case 8 -> { // authenticated, then depths anywhere in int
                authenticate(s, clientNonce);
                send(s, request(endpoint(r), anyDepth(r), anyDepth(r), randomBytes(r, r.nextInt(64))));
            }
            case 9 -> { // authenticated, then an endpoint of random bytes
                authenticate(s, clientNonce);
                byte[] garbage = randomBytes(r, 1 + r.nextInt(1024));
                send(s, bytes(o -> {
                    o.writeInt(REQUEST);
                    o.writeShort(garbage.length);
                    o.write(garbage);
                    o.writeInt(16);
                    o.writeInt(16);
                    o.writeShort(0);
                }));
            }
            case 10 -> { // a valid request, the reply read, then a wrong RTU (or none)
                authenticate(s, clientNonce);
                send(s, validRequest(r, "fuzz"));
                readAvailable(s, 6, 1000);
                if (r.nextBoolean()) {
                    send(s, bytes(o -> o.writeInt(r.nextBoolean() ? r.nextInt() | 0x100 : READY_TO_USE + 1)));
                }
            }
            default -> { // a complete handshake for a queue pair that does not exist: the application closes it
                authenticate(s, clientNonce);
                send(s, validRequest(r, "fuzz"));
                readAvailable(s, 6, 1000);
                send(s, bytes(o -> o.writeInt(READY_TO_USE)));
            }
        }
    }

    /** Hello and proof with the right secret (reads the server's hello and proof). */
    private static void authenticate(Socket s, byte[] clientNonce) throws IOException {
        byte[] serverNonce = readServerHello(s);
        send(s, hello(true, clientNonce), mac(SECRET, 'C', clientNonce, serverNonce));
        ConnectionManagerRig.readExactly(s, 32);
    }

    private static byte[] validRequest(Random r, String privateData) {
        return request(endpoint(r), 16, 16, utf8(privateData));
    }

    private static String endpoint(Random r) {
        return new Endpoint("loop", "loop0", 1 + r.nextInt(0xFFFFFE), r.nextInt(0x1000000), "loop").encode();
    }

    private static int anyDepth(Random r) {
        return switch (r.nextInt(4)) {
            case 0 -> Integer.MIN_VALUE + r.nextInt(10);
            case 1 -> Integer.MAX_VALUE - r.nextInt(10);
            case 2 -> 256 + r.nextInt(1 << 20);
            default -> -1 - r.nextInt(1000);
        };
    }

    private static byte[] randomBytes(Random r, int n) {
        byte[] b = new byte[n];
        r.nextBytes(b);
        return b;
    }

}
