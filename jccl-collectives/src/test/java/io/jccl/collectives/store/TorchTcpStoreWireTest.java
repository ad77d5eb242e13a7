package io.jccl.collectives.store;

import org.junit.jupiter.api.Test;

import java.io.DataInputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * The bytes of torch 2.x's dialect, which no server on this machine speaks (Debian ships torch 1.13): a scripted
 * peer reads what the client sends and answers as {@code TCPStoreLibUvBackend.cpp} does (little-endian, keys and
 * values as a 64-bit length and bytes, torch's "/" key prefix, VALIDATE once per connection).
 */
class TorchTcpStoreWireTest {
    private static final long T = Duration.ofSeconds(30).toNanos();

    /** {@code v} as {@code bytes} (8) little-endian bytes. */
    private static byte[] le(int bytes, long v) {
        return ByteBuffer.allocate(bytes).order(ByteOrder.LITTLE_ENDIAN).putLong(0, v).array();
    }

    private static byte[] read(DataInputStream in, int n) throws Exception {
        byte[] b = new byte[n];
        in.readFully(b);
        return b;
    }

    private static byte[] cat(byte[]... parts) {
        int n = 0;
        for (byte[] p : parts) {
            n += p.length;
        }
        ByteBuffer b = ByteBuffer.allocate(n);
        for (byte[] p : parts) {
            b.put(p);
        }
        return b.array();
    }

    private static byte[] str(String s) {
        byte[] k = s.getBytes(StandardCharsets.UTF_8);
        return cat(le(8, k.length), k);
    }

    private static final byte[] VALIDATE = {0, (byte) 0xCE, (byte) 0xF7, (byte) 0x85, 0x3C};

    @Test
    void shouldSpeakTorch2sWireFormat() throws Exception {
        try (ServerSocket listener = new ServerSocket(0, 4, InetAddress.getLoopbackAddress())) {
            CompletableFuture<Void> peer = CompletableFuture.runAsync(() -> {
                try (Socket s = listener.accept()) {
                    DataInputStream in = new DataInputStream(s.getInputStream());
                    OutputStream out = s.getOutputStream();
                    assertArrayEquals(VALIDATE, read(in, 5), "VALIDATE and the magic number first");
                    byte[] set = cat(new byte[] {1}, str("/k"), str("v"));
                    assertArrayEquals(set, read(in, set.length), "SET is 1, the key carries torch's / prefix");
                    byte[] add = cat(new byte[] {4}, str("/n"), le(8, 5));
                    assertArrayEquals(add, read(in, add.length), "ADD is 4 with a little-endian int64");
                    out.write(le(8, 12));
                    byte[] wait = cat(new byte[] {6}, le(8, 1), str("/k"));
                    assertArrayEquals(wait, read(in, wait.length), "get waits first: WAIT is 6");
                    out.write(0); // STOP_WAITING
                    byte[] get = cat(new byte[] {3}, str("/k"));
                    assertArrayEquals(get, read(in, get.length), "then GET is 3");
                    out.write(str("v"));
                    byte[] cas = cat(new byte[] {2}, str("/c"), str(""), str("x"));
                    assertArrayEquals(cas, read(in, cas.length), "COMPARE_SET is 2; absent is an empty value");
                    out.write(str("x"));
                    byte[] check = cat(new byte[] {5}, le(8, 1), str("/c"));
                    assertArrayEquals(check, read(in, check.length), "CHECK is 5");
                    out.write(0); // READY
                    byte[] del = cat(new byte[] {8}, str("/c"));
                    assertArrayEquals(del, read(in, del.length), "DELETE_KEY is 8");
                    out.write(le(8, 1));
                    assertArrayEquals(new byte[] {7}, read(in, 1), "GETNUMKEYS is 7");
                    out.write(le(8, 2));
                    out.flush();
                } catch (Exception e) {
                    throw new AssertionError(e);
                }
            });
            try (TorchTcpStore store = new TorchTcpStore("127.0.0.1", listener.getLocalPort(),
                TorchTcpStore.Dialect.CURRENT, "")) {
                store.set("k", "v".getBytes(StandardCharsets.UTF_8), T);
                assertEquals(12, store.add("n", 5, T));
                assertArrayEquals("v".getBytes(StandardCharsets.UTF_8), store.get("k", T));
                assertEquals(true, store.compareAndSet("c", null, "x".getBytes(StandardCharsets.UTF_8), T));
                assertEquals(true, store.check("c", T));
                assertEquals(true, store.delete("c", T));
                assertEquals(2, store.numKeys(T));
            }
            peer.get(60, TimeUnit.SECONDS);
        }
    }

    @Test
    void shouldRecogniseATorch2ServerByItsAnswerToGetNumKeys() throws Exception {
        try (ServerSocket listener = new ServerSocket(0, 4, InetAddress.getLoopbackAddress())) {
            CompletableFuture<Void> peer = CompletableFuture.runAsync(() -> {
                try (Socket s = listener.accept()) {
                    DataInputStream in = new DataInputStream(s.getInputStream());
                    assertArrayEquals(VALIDATE, read(in, 5));
                    assertEquals(7, in.read(), "GETNUMKEYS");
                    s.getOutputStream().write(le(8, 3)); // as a 2.x server: its key count
                    s.getOutputStream().flush();
                    read(in, 3); // the other three GETNUMKEYS; the client hangs up
                } catch (Exception e) {
                    throw new AssertionError(e);
                }
            });
            assertEquals(TorchTcpStore.Dialect.CURRENT, TorchTcpStore.probe("127.0.0.1", listener.getLocalPort()));
            peer.get(60, TimeUnit.SECONDS);
        }
    }
}
