package io.jccl.collectives.store;

import io.jccl.common.testing.Footprint;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.TimeUnit;

import static io.jccl.collectives.store.Hostile.ADD;
import static io.jccl.collectives.store.Hostile.CAS;
import static io.jccl.collectives.store.Hostile.CHECK;
import static io.jccl.collectives.store.Hostile.DELETE;
import static io.jccl.collectives.store.Hostile.GET;
import static io.jccl.collectives.store.Hostile.MAGIC_V1;
import static io.jccl.collectives.store.Hostile.SET;
import static io.jccl.collectives.store.Hostile.WAIT;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Hostile input against the store's listener: random bytes, the old protocol's unchecked lengths (a SET announcing
 * 64 MiB, a WAIT for 2^31 - 1 keys), valid handshakes followed by oversized, negative and truncated lengths, and
 * idle connections, a few thousand cases. Afterwards the process holds a bounded number of threads, descriptors and
 * heap, and a legitimate client still gets correct answers.
 */
class TcpStoreFuzzTest {
    private static final long SECOND = TimeUnit.SECONDS.toNanos(1);
    private static final long SEED = Long.getLong("jccl.fuzz.seed", 0x5EED_2025L);

    @BeforeEach
    void shortIdleTimeout() {
        System.setProperty("jccl.store.idle.timeout", "200ms");
    }

    @AfterEach
    void clear() {
        System.clearProperty("jccl.store.idle.timeout");
    }

    @Test
    void hostileConnectionsLeaveThreadsDescriptorsAndHeapBounded() throws Exception {
        try (TcpStore store = new TcpStore("127.0.0.1", 0, true, 5 * SECOND)) {
            int port = store.port();
            store.setString("before", "kept", SECOND);
            Random random = new Random(SEED);
            // Warm up (class loading, the first GC) so that the baseline is the steady state.
            runCases(port, random, 20);
            Footprint.awaitDescriptors(Long.MAX_VALUE, 5 * SECOND);
            int baseThreads = Footprint.threads();
            long baseFds = Footprint.openDescriptors();
            long baseHeap = Footprint.heapUsedAfterGc();

            // 1. A few thousand short hostile connections, 50 at a time.
            long start = System.nanoTime();
            int maxThreads = baseThreads;
            int cases = 0;
            for (int batch = 0; batch < 50; batch++) {
                maxThreads = Math.max(maxThreads, runCases(port, random, 50));
                cases += 50;
            }

            // 2. Requests announcing large values that never come, held open: nothing may be allocated for them.
            List<Socket> held = new ArrayList<>();
            for (int i = 0; i < 16; i++) {
                Socket s = Hostile.connect(port);
                held.add(s);
                if (i % 2 == 0) {
                    Hostile.send(s, Hostile.bytes(o -> { // old protocol: SET with a 64 MiB value
                        o.writeInt(MAGIC_V1);
                        o.writeByte(SET);
                        o.writeUTF("big" + held.size());
                        o.writeInt(64 << 20);
                        o.write(new byte[100]);
                    }));
                } else {
                    Hostile.send(s, Hostile.helloV2(), Hostile.bytes(o -> { // protocol 2: a 1 MiB value, 100 bytes sent
                        o.writeInt(1 + 2 + 4 + 4 + (1 << 20));
                        o.writeByte(SET);
                        o.writeUTF("big");
                        o.writeInt(1 << 20);
                        o.write(new byte[100]);
                    }));
                }
            }
            roundTrip(port); // the server has taken every earlier connection in
            Thread.sleep(200);
            maxThreads = Math.max(maxThreads, Footprint.threads());
            long heapWhileHeld = Footprint.heapUsedAfterGc() - baseHeap;
            held.forEach(Hostile::closeQuietly);

            // 3. Idle connections, with and without a handshake: closed by the server after the idle timeout.
            List<Socket> idle = new ArrayList<>();
            for (int i = 0; i < 200; i++) {
                Socket s = Hostile.connect(port);
                if (i % 2 == 0) {
                    Hostile.send(s, Hostile.helloV2());
                }
                idle.add(s);
            }
            roundTrip(port);
            Thread.sleep(50);
            maxThreads = Math.max(maxThreads, Footprint.threads());
            int closedByServer = 0;
            long idleDeadline = System.nanoTime() + 3 * SECOND; // one deadline for all: 200 ms idle timeout + slack
            for (Socket s : idle) {
                long leftMs = Math.max(1, TimeUnit.NANOSECONDS.toMillis(idleDeadline - System.nanoTime()));
                if (Hostile.readUntilEof(s, leftMs) != null) {
                    closedByServer++;
                }
            }
            idle.forEach(Hostile::closeQuietly);
            long tookMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);

            long fds = Footprint.awaitDescriptors(baseFds + 16, 5 * SECOND);
            long heapAfter = Footprint.heapUsedAfterGc() - baseHeap;
            String summary = cases + " hostile cases + 16 held + 200 idle in " + tookMs + " ms (seed " + SEED
                + "): threads " + baseThreads + " -> max " + maxThreads + ", descriptors " + baseFds + " -> " + fds
                + ", heap +" + (heapWhileHeld >> 20) + " MiB while held, +" + (heapAfter >> 20) + " MiB after";
            System.out.println(summary);
            assertTrue(maxThreads <= baseThreads + 8, summary);
            assertTrue(heapWhileHeld < 64L << 20, summary);
            assertTrue(heapAfter < 64L << 20, summary);
            assertEquals(200, closedByServer, "idle connections the server closed; " + summary);
            assertTrue(fds <= baseFds + 16, summary);

            // The store still answers correctly, to the old client and to a new one.
            assertEquals("kept", store.getString("before", SECOND));
            try (TcpStore peer = new TcpStore("127.0.0.1", port, false, 5 * SECOND)) {
                peer.setString("after", "fine", SECOND);
                assertEquals("fine", store.getString("after", SECOND));
                assertEquals(7, peer.add("fuzz-counter", 7, SECOND));
                assertEquals(9, store.add("fuzz-counter", 2, SECOND));
                assertTrue(store.compareAndSet("fuzz-cas", null, new byte[] {1}, SECOND));
                assertArrayEquals(new byte[] {1}, peer.get("fuzz-cas", SECOND));
                peer.waitFor(List.of("before", "after"), SECOND);
                assertTrue(peer.delete("after", SECOND));
                assertFalse(store.check("after", SECOND));
            }
        }
    }

    /** A request on a new connection: answered once the server has accepted the connections opened before it. */
    private static void roundTrip(int port) {
        try (TcpStore probe = new TcpStore("127.0.0.1", port, false, 30 * SECOND)) {
            probe.check("probe", 30 * SECOND);
        }
    }

    /** {@code n} hostile connections at once, then closed; returns the thread count while they were open. */
    private static int runCases(int port, Random random, int n) throws IOException {
        List<Socket> open = new ArrayList<>();
        try {
            for (int i = 0; i < n; i++) {
                Socket s = Hostile.connect(port);
                open.add(s);
                try {
                    Hostile.send(s, hostileBytes(random));
                } catch (IOException e) {
                    // the server closed it already: fine
                }
            }
            return Footprint.threads();
        } finally {
            for (Socket s : open) {
                try {
                    s.setSoLinger(true, 0); // reset: no TIME_WAIT pile-up over thousands of connections
                } catch (IOException ignored) {
                    // closed
                }
                Hostile.closeQuietly(s);
            }
        }
    }

    private static byte[] hostileBytes(Random r) {
        byte[][] keys = {"k".getBytes(StandardCharsets.UTF_8), new byte[0], "error/0".getBytes(StandardCharsets.UTF_8)};
        return switch (r.nextInt(12)) {
            case 0 -> randomBytes(r, 1 + r.nextInt(64));
            case 1 -> Hostile.bytes(o -> { // old protocol, random request
                o.writeInt(MAGIC_V1);
                o.write(randomBytes(r, 1 + r.nextInt(40)));
            });
            case 2 -> Hostile.bytes(o -> { // old protocol: WAIT for 2^31 - 1 keys (13 bytes)
                o.writeInt(MAGIC_V1);
                o.writeByte(WAIT);
                o.writeInt(Integer.MAX_VALUE);
                o.writeInt(0);
            });
            case 3 -> Hostile.bytes(o -> { // old protocol: SET announcing a huge value, a few bytes sent
                o.writeInt(MAGIC_V1);
                o.writeByte(SET);
                o.writeUTF("x");
                o.writeInt((1 + r.nextInt(64)) << 20);
                o.write(randomBytes(r, r.nextInt(16)));
            });
            case 4 -> concat(Hostile.helloV2(), randomBytes(r, 1 + r.nextInt(64)));
            case 5 -> concat(Hostile.helloV2(), Hostile.bytes(o -> o.writeInt(
                switch (r.nextInt(4)) {
                    case 0 -> Integer.MAX_VALUE;
                    case 1 -> Integer.MIN_VALUE;
                    case 2 -> 0;
                    default -> -1 - r.nextInt(1000);
                })));
            case 6 -> concat(Hostile.helloV2(), Hostile.frame(o -> { // inner value length beyond the frame
                o.writeByte(r.nextBoolean() ? SET : CAS);
                o.writeUTF("k");
                if (r.nextBoolean()) {
                    o.writeByte(1);
                }
                o.writeInt(r.nextBoolean() ? Integer.MAX_VALUE : -1);
            }));
            case 7 -> concat(Hostile.helloV2(), Hostile.frame(o -> { // WAIT for 2^31 - 1 or 2^31 keys
                o.writeByte(WAIT);
                o.writeInt(r.nextBoolean() ? Integer.MAX_VALUE : Integer.MIN_VALUE);
                o.writeLong(1000);
            }));
            case 8 -> { // truncated request: announces more than it sends
                byte[] f = Hostile.frame(o -> {
                    o.writeByte(GET);
                    o.writeUTF("some-key-" + r.nextInt(100));
                    o.writeLong(1_000_000_000L);
                });
                yield concat(Hostile.helloV2(), java.util.Arrays.copyOf(f, 1 + r.nextInt(f.length - 1)));
            }
            case 9 -> concat(Hostile.helloV2(), Hostile.frame(o -> { // key length beyond the frame
                o.writeByte(new byte[] {SET, GET, ADD, DELETE, CHECK}[r.nextInt(5)]);
                o.writeShort(0xFFFF);
                o.write(randomBytes(r, r.nextInt(20)));
            }));
            case 10 -> concat(Hostile.helloV2(), Hostile.frame(o -> { // random operation and fields
                o.writeByte(r.nextInt(10));
                o.write(randomBytes(r, r.nextInt(64)));
            }));
            default -> concat(Hostile.helloV2(), Hostile.frame(o -> { // well-formed, harmless (unique keys)
                o.writeByte(CHECK);
                o.write(Hostile.bytes(k -> k.writeUTF(new String(keys[r.nextInt(keys.length)],
                    StandardCharsets.UTF_8) + "-fuzz")));
            }));
        };
    }

    private static byte[] randomBytes(Random r, int n) {
        byte[] b = new byte[n];
        r.nextBytes(b);
        return b;
    }

    private static byte[] concat(byte[] a, byte[] b) {
        byte[] c = java.util.Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, c, a.length, b.length);
        return c;
    }

}
