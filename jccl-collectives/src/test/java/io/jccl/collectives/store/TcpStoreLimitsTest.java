package io.jccl.collectives.store;

import io.jccl.common.testing.Footprint;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayInputStream;
import java.io.DataInputStream;
import java.io.IOException;
import java.net.InetAddress;
import java.net.Socket;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static io.jccl.collectives.store.Hostile.CHECK;
import static io.jccl.collectives.store.Hostile.GET;
import static io.jccl.collectives.store.Hostile.SET;
import static io.jccl.collectives.store.Hostile.WAIT;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The store's limits (value and key size, keys held, bytes held, keys per wait, connections, idle time, blocking
 * requests) give clear errors, hold on the server whatever a client sends, and leave the connection and the store
 * usable; all are set through JCCL_STORE_* settings (system properties here).
 */
class TcpStoreLimitsTest {
    private static final long SECOND = TimeUnit.SECONDS.toNanos(1);
    private final List<String> properties = new ArrayList<>();

    private void set(Map<String, String> settings) {
        settings.forEach((k, v) -> {
            System.setProperty(k, v);
            properties.add(k);
        });
    }

    @AfterEach
    void clear() {
        properties.forEach(System::clearProperty);
    }

    /** After protocol 2's hello: the server's hello, which must come. */
    private static Socket handshaken(int port) throws IOException {
        Socket s = Hostile.connect(port);
        Hostile.send(s, Hostile.helloV2());
        Hostile.readExactly(s, Hostile.SERVER_HELLO_BYTES, 3000);
        return s;
    }

    /** Reads a status byte and, unless OK, the message. */
    private static String statusMessage(Socket s, int expectedStatus) throws IOException {
        byte[] status = Hostile.readExactly(s, 1, 3000);
        assertEquals(expectedStatus, status[0]);
        byte[] length = Hostile.readExactly(s, 2, 3000);
        int n = (length[0] & 0xFF) << 8 | (length[1] & 0xFF);
        byte[] text = Hostile.readExactly(s, n, 3000);
        byte[] all = new byte[2 + n];
        System.arraycopy(length, 0, all, 0, 2);
        System.arraycopy(text, 0, all, 2, n);
        return new DataInputStream(new ByteArrayInputStream(all)).readUTF();
    }

    @Test
    void valueKeyCountAndWaitLimits() throws Exception {
        set(Map.of("jccl.store.max.value.bytes", "1024", "jccl.store.max.key.bytes", "64",
            "jccl.store.max.keys", "8", "jccl.store.max.wait.keys", "4"));
        try (TcpStore store = new TcpStore("127.0.0.1", 0, true, 5 * SECOND)) {
            StoreException e = assertThrows(StoreException.class, () -> store.set("big", new byte[1025], SECOND));
            assertTrue(e.getMessage().contains("JCCL_STORE_MAX_VALUE_BYTES"), e.getMessage());
            store.set("ok", new byte[1024], SECOND);
            assertEquals(1024, store.get("ok", SECOND).length);

            e = assertThrows(StoreException.class, () -> store.set("k".repeat(65), new byte[1], SECOND));
            assertTrue(e.getMessage().contains("JCCL_STORE_MAX_KEY_BYTES"), e.getMessage());

            for (int i = 1; i <= 7; i++) {
                store.set("k" + i, new byte[] {(byte) i}, SECOND);
            }
            e = assertThrows(StoreException.class, () -> store.set("k8", new byte[1], SECOND));
            assertTrue(e.getMessage().contains("JCCL_STORE_MAX_KEYS"), e.getMessage());
            e = assertThrows(StoreException.class, () -> store.add("counter", 1, SECOND));
            assertTrue(e.getMessage().contains("JCCL_STORE_MAX_KEYS"), e.getMessage());
            store.set("k7", new byte[] {77}, SECOND); // replacing a key is fine at the limit
            assertTrue(store.delete("k1", SECOND));
            assertEquals(1, store.add("counter", 1, SECOND));

            e = assertThrows(StoreException.class,
                () -> store.waitFor(List.of("k2", "k3", "k4", "k5", "k6"), SECOND));
            assertTrue(e.getMessage().contains("JCCL_STORE_MAX_WAIT_KEYS"), e.getMessage());
            store.waitFor(List.of("k2", "k3", "k4", "k5"), SECOND);
            assertEquals(2, store.add("counter", 1, SECOND));
            assertArrayEquals(new byte[] {77}, store.get("k7", SECOND));

            // The server enforces them whatever a client sends, and the connection stays usable.
            try (Socket s = handshaken(store.port())) {
                Hostile.send(s, Hostile.frame(o -> {
                    o.writeByte(SET);
                    o.writeUTF("raw");
                    o.writeInt(2000);
                    o.write(new byte[2000]);
                }));
                assertTrue(statusMessage(s, 2).contains("JCCL_STORE_MAX_VALUE_BYTES"));
                Hostile.send(s, Hostile.frame(o -> {
                    o.writeByte(WAIT);
                    o.writeInt(Integer.MAX_VALUE);
                    o.writeLong(1000);
                }));
                assertTrue(statusMessage(s, 2).contains("JCCL_STORE_MAX_WAIT_KEYS"));
                Hostile.send(s, Hostile.frame(o -> {
                    o.writeByte(CHECK);
                    o.writeUTF("ok");
                }));
                assertArrayEquals(new byte[] {0, 1}, Hostile.readExactly(s, 2, 3000));
                Hostile.send(s, Hostile.bytes(o -> o.writeInt(10 << 20))); // a request over the limit: closed
                assertTrue(statusMessage(s, 2).contains("exceeds the store's limit"));
                assertNotNull(Hostile.readUntilEof(s, 3000));
            }
            assertTrue(store.check("ok", SECOND));
        }
    }

    @Test
    void bytesHeldLimit() {
        set(Map.of("jccl.store.max.bytes", "4096"));
        try (TcpStore store = new TcpStore("127.0.0.1", 0, true, 5 * SECOND)) {
            store.set("a", new byte[2000], SECOND);
            StoreException e = assertThrows(StoreException.class, () -> store.set("b", new byte[2000], SECOND));
            assertTrue(e.getMessage().contains("JCCL_STORE_MAX_BYTES"), e.getMessage());
            store.set("a", new byte[100], SECOND);
            store.set("b", new byte[2000], SECOND);
            assertEquals(2000, store.get("b", SECOND).length);
        }
    }

    @Test
    void connectionsBeyondTheCapAreClosedAtOnce() throws Exception {
        set(Map.of("jccl.store.max.connections", "8"));
        try (TcpStore store = new TcpStore("127.0.0.1", 0, true, 5 * SECOND)) {
            int baseThreads = Footprint.threads();
            List<Socket> held = new ArrayList<>();
            for (int i = 0; i < 7; i++) {
                held.add(handshaken(store.port())); // with the store's own client: 8
            }
            long start = System.nanoTime();
            for (int i = 0; i < 20; i++) {
                try (Socket s = Hostile.connect(store.port())) {
                    Hostile.send(s, Hostile.helloV2());
                    byte[] reply = Hostile.readUntilEof(s, 3000);
                    assertNotNull(reply, "connection " + (9 + i) + " was not closed");
                    DataInputStream in = new DataInputStream(new ByteArrayInputStream(reply));
                    assertEquals(3, in.readByte()); // BUSY
                    String message = in.readUTF();
                    assertTrue(message.contains("JCCL_STORE_MAX_CONNECTIONS=8"), message);
                }
            }
            long tookMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            assertTrue(tookMs < 3000, "20 refusals took " + tookMs + " ms");
            assertTrue(Footprint.threads() <= baseThreads + 4, "threads " + baseThreads + " -> " + Footprint.threads());
            // 2 s, not less: on a loaded host the server's refusal can take longer than a few hundred ms to come
            StoreTimeoutException busy = assertThrows(StoreTimeoutException.class,
                () -> new TcpStore("127.0.0.1", store.port(), false, 2 * SECOND).close());
            assertTrue(busy.getMessage().contains("busy"), busy.getMessage());
            store.setString("still", "served", SECOND);
            held.forEach(Hostile::closeQuietly);
            try (TcpStore peer = new TcpStore("127.0.0.1", store.port(), false, 5 * SECOND)) {
                assertEquals("served", peer.getString("still", SECOND));
            }
        }
    }

    /**
     * A server that refused for being busy and then did not answer in time: the client's error still says it was
     * busy (the CI failure this guards against reported only the last attempt's read timeout).
     */
    @Test
    void aBusyRefusalIsReportedEvenWhenALaterAttemptTimesOut() throws Exception {
        try (java.net.ServerSocket fake = new java.net.ServerSocket(0, 8, InetAddress.getLoopbackAddress())) {
            List<Socket> accepted = new ArrayList<>();
            Thread server = Thread.ofPlatform().daemon().start(() -> {
                try {
                    Socket first = fake.accept();
                    java.io.DataOutputStream o = new java.io.DataOutputStream(first.getOutputStream());
                    o.writeByte(3); // BUSY
                    o.writeUTF("too many connections (JCCL_STORE_MAX_CONNECTIONS=1)");
                    o.flush();
                    first.close();
                    while (true) {
                        accepted.add(fake.accept()); // later attempts: accepted, never answered
                    }
                } catch (IOException ignored) {
                    // the socket closed at the end of the test
                }
            });
            StoreTimeoutException e = assertThrows(StoreTimeoutException.class,
                () -> new TcpStore("127.0.0.1", fake.getLocalPort(), false, TimeUnit.MILLISECONDS.toNanos(400)).close());
            assertTrue(e.getMessage().contains("busy") && e.getMessage().contains("JCCL_STORE_MAX_CONNECTIONS=1"),
                e.getMessage());
            fake.close();
            server.join(3000);
            accepted.forEach(Hostile::closeQuietly);
        }
    }

    @Test
    void idleConnectionsAreClosedAndClientsReconnect() throws Exception {
        set(Map.of("jccl.store.idle.timeout", "200ms"));
        try (TcpStore store = new TcpStore("127.0.0.1", 0, true, 5 * SECOND);
             Socket afterHello = handshaken(store.port());
             Socket silent = Hostile.connect(store.port())) {
            long start = System.nanoTime();
            assertNotNull(Hostile.readUntilEof(afterHello, 3000), "an idle connection was not closed");
            assertNotNull(Hostile.readUntilEof(silent, 3000), "a connection without a handshake was not closed");
            long tookMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            assertTrue(tookMs >= 100 && tookMs < 2000, "closed after " + tookMs + " ms");
            store.setString("k", "v", SECOND);
            Thread.sleep(500); // longer than the idle timeout: the client reconnects on its own
            assertEquals(1, store.add("n", 1, SECOND)); // add is not retried once sent: it must find a live connection
            assertEquals("v", store.getString("k", SECOND));
        }
    }

    @Test
    void abandonedBlockingRequestsHoldNoThreadAndEndWithTheirConnection() throws Exception {
        try (TcpStore store = new TcpStore("127.0.0.1", 0, true, 5 * SECOND)) {
            int baseThreads = Footprint.threads();
            List<Socket> waiting = new ArrayList<>();
            for (int i = 0; i < 50; i++) {
                Socket s = handshaken(store.port());
                int n = i;
                Hostile.send(s, n % 2 == 0 ? Hostile.frame(o -> {
                    o.writeByte(GET);
                    o.writeUTF("never-" + n);
                    o.writeLong(TimeUnit.HOURS.toNanos(1));
                }) : Hostile.frame(o -> {
                    o.writeByte(WAIT);
                    o.writeInt(2);
                    o.writeUTF("never-a");
                    o.writeUTF("never-" + n);
                    o.writeLong(Long.MAX_VALUE);
                }));
                waiting.add(s);
            }
            Thread.sleep(200);
            int threads = Footprint.threads();
            assertTrue(threads <= baseThreads + 4, "50 blocking requests: threads " + baseThreads + " -> " + threads);
            TcpStoreServer server = store.server();
            assertEquals(50, server.waitingRequests());
            waiting.forEach(Hostile::closeQuietly);
            long deadline = System.nanoTime() + 3 * SECOND;
            while (server.waitingRequests() > 0 && System.nanoTime() < deadline) {
                Thread.sleep(10);
            }
            assertEquals(0, server.waitingRequests(), "requests of closed connections still waiting");
            assertEquals(1, server.connections());

            // A declared deadline is kept: TIMEOUT after it, naming the key; the connection stays.
            try (Socket s = handshaken(store.port())) {
                long start = System.nanoTime();
                Hostile.send(s, Hostile.frame(o -> {
                    o.writeByte(GET);
                    o.writeUTF("late-key");
                    o.writeLong(TimeUnit.MILLISECONDS.toNanos(300));
                }));
                String message = statusMessage(s, 1);
                long tookMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
                assertTrue(message.contains("late-key"), message);
                assertTrue(tookMs >= 250 && tookMs < 3000, "timed out after " + tookMs + " ms");
                assertNull(Hostile.readUntilEof(s, 100), "the connection must stay open after a timeout");
            }
        }
    }

    @Test
    void requestsBeyondThePendingBudgetWaitTheirTurn() throws Exception {
        TcpStoreServer.Settings settings = TcpStoreServer.Settings.defaults().withMaxPendingBytes(4096);
        try (TcpStoreServer server = new TcpStoreServer(InetAddress.getLoopbackAddress(), 0, settings);
             Socket a = handshaken(server.port());
             Socket b = handshaken(server.port())) {
            byte[] frameA = Hostile.frame(o -> {
                o.writeByte(SET);
                o.writeUTF("a");
                o.writeInt(3000);
                o.write(new byte[3000]);
            });
            byte[] frameB = Hostile.frame(o -> {
                o.writeByte(SET);
                o.writeUTF("b");
                o.writeInt(3000);
                o.write(new byte[3000]);
            });
            a.getOutputStream().write(frameA, 0, 100); // a holds 3 KB of the 4 KB budget
            a.getOutputStream().flush();
            Thread.sleep(50);
            Hostile.send(b, frameB); // b's request does not fit: it waits, not fails
            Thread.sleep(100);
            assertEquals(0, server.size());
            a.getOutputStream().write(frameA, 100, frameA.length - 100);
            a.getOutputStream().flush();
            assertArrayEquals(new byte[] {0}, Hostile.readExactly(a, 1, 3000));
            assertArrayEquals(new byte[] {0}, Hostile.readExactly(b, 1, 3000));
            assertEquals(2, server.size());
        }
        try (TcpStoreServer server = new TcpStoreServer(InetAddress.getLoopbackAddress(), 0, settings);
             TcpStore client = new TcpStore("127.0.0.1", server.port(), false, 5 * SECOND, null)) {
            client.set("big", new byte[100_000], SECOND); // a request larger than the budget alone still goes
            assertEquals(100_000, client.get("big", SECOND).length);
        }
    }
}
