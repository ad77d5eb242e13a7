package io.jccl.collectives.store;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.io.BufferedInputStream;
import java.io.ByteArrayInputStream;
import java.io.DataInputStream;
import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

import static io.jccl.collectives.store.Hostile.DELETE;
import static io.jccl.collectives.store.Hostile.GET;
import static io.jccl.collectives.store.Hostile.MAGIC_V1;
import static io.jccl.collectives.store.Hostile.SET;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * With JCCL_AUTH_SECRET set the store serves only clients that prove the secret: a client without it or with another
 * one gets a clear error at once (not a hang until its deadline), and an outsider speaking raw bytes can neither read,
 * write nor delete a key. Protocol versions that differ are a clear error both ways.
 */
class TcpStoreAuthTest {
    private static final long SECOND = TimeUnit.SECONDS.toNanos(1);
    private static final String SECRET_PROPERTY = "jccl.auth.secret"; // JCCL_AUTH_SECRET through Config

    @AfterEach
    void clear() {
        System.clearProperty(SECRET_PROPERTY);
    }

    /** A store started with the secret (its server and first client read JCCL_AUTH_SECRET). */
    private static TcpStore authenticatedStore(String secret) {
        System.setProperty(SECRET_PROPERTY, secret);
        try {
            return new TcpStore("127.0.0.1", 0, true, 5 * SECOND);
        } finally {
            System.clearProperty(SECRET_PROPERTY);
        }
    }

    @Test
    void clientsWithoutTheSecretOrWithAnotherAreRefusedAtOnce() {
        try (TcpStore owner = authenticatedStore("the-job-secret")) {
            int port = owner.port();
            owner.setString("error/3", "rank 3: CUDA error", SECOND);

            long start = System.nanoTime();
            StoreException none = assertThrows(StoreException.class,
                () -> new TcpStore("127.0.0.1", port, false, 10 * SECOND).close());
            assertTrue(none.getMessage().contains("the store at 127.0.0.1:" + port + " requires JCCL_AUTH_SECRET"),
                none.getMessage());
            assertFalse(none instanceof StoreTimeoutException, none.getMessage());

            System.setProperty(SECRET_PROPERTY, "not-the-job-secret");
            StoreException wrong = assertThrows(StoreException.class,
                () -> new TcpStore("127.0.0.1", port, false, 10 * SECOND).close());
            assertTrue(wrong.getMessage().contains("the store at 127.0.0.1:" + port + " rejected the secret"),
                wrong.getMessage());
            long tookMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            assertTrue(tookMs < 3000, "refusals took " + tookMs + " ms: they must not wait for the deadline");

            System.setProperty(SECRET_PROPERTY, "the-job-secret");
            try (TcpStore peer = new TcpStore("127.0.0.1", port, false, 5 * SECOND)) {
                assertEquals("rank 3: CUDA error", peer.getString("error/3", SECOND));
                peer.setString("hello/1", "x", SECOND);
                assertTrue(owner.check("hello/1", SECOND));
            }
        }
    }

    @Test
    void outsiderCannotGetSetOrDeleteAKey() throws Exception {
        try (TcpStore owner = authenticatedStore("s3cret")) {
            int port = owner.port();
            owner.setString("error/1", "original", SECOND);
            byte[] secretValue = "original".getBytes(StandardCharsets.UTF_8);
            byte[] getFrame = Hostile.frame(o -> {
                o.writeByte(GET);
                o.writeUTF("error/1");
                o.writeLong(100_000_000L);
            });
            byte[] setFrame = Hostile.frame(o -> {
                o.writeByte(SET);
                o.writeUTF("error/1");
                o.writeInt(6);
                o.write("forged".getBytes(StandardCharsets.UTF_8));
            });
            byte[] deleteFrame = Hostile.frame(o -> {
                o.writeByte(DELETE);
                o.writeUTF("error/1");
            });
            byte[][] attempts = {
                // the old protocol: magic, then requests
                Hostile.bytes(o -> {
                    o.writeInt(MAGIC_V1);
                    o.writeByte(GET);
                    o.writeUTF("error/1");
                    o.writeLong(100_000_000L);
                }),
                Hostile.bytes(o -> {
                    o.writeInt(MAGIC_V1);
                    o.writeByte(SET);
                    o.writeUTF("error/1");
                    o.writeInt(6);
                    o.write("forged".getBytes(StandardCharsets.UTF_8));
                    o.writeByte(DELETE);
                    o.writeUTF("error/1");
                }),
                // protocol 2 without a proof: requests right after the hello
                concat(Hostile.helloV2(), getFrame),
                concat(Hostile.helloV2(), setFrame, deleteFrame),
                // protocol 2 with a made-up proof
                concat(Hostile.helloV2(), new byte[32], getFrame, setFrame, deleteFrame),
            };
            for (byte[] attempt : attempts) {
                try (Socket s = Hostile.connect(port)) {
                    Hostile.send(s, attempt);
                    s.shutdownOutput(); // all it has to say
                    byte[] reply = Hostile.readUntilEof(s, 3000);
                    assertTrue(reply != null, "the server must close the connection of an outsider");
                    assertFalse(contains(reply, secretValue), "an outsider read the value");
                }
            }
            assertEquals("original", owner.getString("error/1", SECOND));
            assertFalse(owner.check("forged", SECOND));
        }
    }

    @Test
    void explicitSecretsAndAStoreWithoutOne() {
        try (TcpStore owner = new TcpStore("127.0.0.1", 0, true, 5 * SECOND, "explicit")) {
            try (TcpStore peer = new TcpStore("127.0.0.1", owner.port(), false, 5 * SECOND, "explicit")) {
                peer.setString("k", "v", SECOND);
                assertEquals("v", owner.getString("k", SECOND));
            }
            StoreException e = assertThrows(StoreException.class,
                () -> new TcpStore("127.0.0.1", owner.port(), false, 5 * SECOND, null).close());
            assertTrue(e.getMessage().contains("requires JCCL_AUTH_SECRET"), e.getMessage());
        }
        // A client with a secret refuses a store without one: anyone could be answering.
        try (TcpStore open = new TcpStore("127.0.0.1", 0, true, 5 * SECOND, null)) {
            StoreException e = assertThrows(StoreException.class,
                () -> new TcpStore("127.0.0.1", open.port(), false, 5 * SECOND, "mine").close());
            assertTrue(e.getMessage().contains("does not authenticate"), e.getMessage());
        }
    }

    @Test
    void protocolVersionMismatchIsAClearErrorBothWays() throws Exception {
        // An old client (protocol 1) against this server: a status and a message, as protocol 1 reads errors.
        try (TcpStore store = new TcpStore("127.0.0.1", 0, true, 5 * SECOND, null); Socket s = Hostile.connect(store.port())) {
            Hostile.send(s, Hostile.bytes(o -> {
                o.writeInt(MAGIC_V1);
                o.writeByte(GET);
                o.writeUTF("k");
                o.writeLong(1000);
            }));
            byte[] reply = Hostile.readUntilEof(s, 3000);
            assertTrue(reply != null && reply.length > 3, "no reply to an old client");
            DataInputStream in = new DataInputStream(new ByteArrayInputStream(reply));
            assertEquals(2, in.readByte()); // ERROR
            String message = in.readUTF();
            assertTrue(message.contains("protocol mismatch") && message.contains("protocol 2")
                && message.contains("protocol 1"), message);
        }
        // This client against an old server (protocol 1), which closes connections whose magic is not its own.
        try (ServerSocket old = new ServerSocket(0, 50, InetAddress.getLoopbackAddress())) {
            Thread t = Thread.ofPlatform().daemon().start(() -> {
                while (!old.isClosed()) {
                    try (Socket c = old.accept();
                         DataInputStream in = new DataInputStream(new BufferedInputStream(c.getInputStream()))) {
                        if (in.readInt() != MAGIC_V1) {
                            continue; // what protocol 1's server does: "not a store client"
                        }
                    } catch (IOException e) {
                        // next
                    }
                }
            });
            long start = System.nanoTime();
            StoreException e = assertThrows(StoreException.class, () -> new TcpStore("127.0.0.1",
                ((InetSocketAddress) old.getLocalSocketAddress()).getPort(), false, 10 * SECOND, null).close());
            assertTrue(e.getMessage().contains("older JCCL (protocol 1)"), e.getMessage());
            assertTrue(System.nanoTime() - start < 3 * SECOND, "must not wait for the deadline");
            old.close();
            t.join(2000);
        }
    }

    private static boolean contains(byte[] hay, byte[] needle) {
        outer:
        for (int i = 0; i + needle.length <= hay.length; i++) {
            for (int j = 0; j < needle.length; j++) {
                if (hay[i + j] != needle[j]) {
                    continue outer;
                }
            }
            return true;
        }
        return false;
    }

    private static byte[] concat(byte[]... parts) {
        int n = 0;
        for (byte[] p : parts) {
            n += p.length;
        }
        byte[] out = new byte[n];
        int at = 0;
        for (byte[] p : parts) {
            System.arraycopy(p, 0, out, at, p.length);
            at += p.length;
        }
        return out;
    }
}
