package io.jccl.collectives.store;

import io.jccl.collectives.CollectiveException;
import org.junit.jupiter.api.Test;

import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** JCCL's client of torch's TCPStore against the real server (a Python child); skipped without PyTorch. */
class TorchTcpStoreTest {
    private static final long T = Duration.ofSeconds(30).toNanos();

    private static byte[] b(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    @Test
    void shouldSetGetWaitAddCompareDeleteAgainstTorchsServer() throws Exception {
        TorchPython.require();
        try (TorchPython.Server server = new TorchPython.Server(1);
             TorchTcpStore a = new TorchTcpStore("127.0.0.1", server.port(), T);
             TorchTcpStore b = new TorchTcpStore("127.0.0.1", server.port(), T)) {
            assertEquals(a.dialect(), TorchTcpStore.probe("127.0.0.1", server.port()));
            a.set("k", b("v1"), T);
            assertArrayEquals(b("v1"), b.get("k", T));
            assertTrue(b.check("k", T));
            assertFalse(b.check("absent", T));
            assertEquals(5, a.add("n", 5, T));
            assertEquals(7, b.add("n", 2, T));
            assertArrayEquals(b("7"), a.get("n", T), "counters are decimal text, as JCCL's own store keeps them");

            // A waiter is woken by another client's set.
            CompletableFuture<byte[]> waiting = CompletableFuture.supplyAsync(() -> b.get("late", T));
            a.set("late", b("here"), T);
            assertArrayEquals(b("here"), waiting.get(60, TimeUnit.SECONDS));
            b.waitFor(List.of("k", "late", "n"), T);

            assertTrue(a.compareAndSet("cas", null, b("first"), T));
            assertFalse(b.compareAndSet("cas", null, b("second"), T));
            assertFalse(b.compareAndSet("cas", b("wrong"), b("third"), T));
            assertTrue(b.compareAndSet("cas", b("first"), b("fourth"), T));
            assertArrayEquals(b("fourth"), a.get("cas", T));

            assertTrue(a.delete("cas", T));
            assertFalse(a.delete("cas", T));
            assertFalse(b.check("cas", T));
            assertTrue(a.numKeys(T) >= 3);
        }
    }

    /** torch's classic backends do not wake waiters when COMPARE_SET creates a key: the wait must still see it. */
    @Test
    void shouldSeeAKeyThatCompareAndSetCreatesWhileWaiting() throws Exception {
        TorchPython.require();
        try (TorchPython.Server server = new TorchPython.Server(1);
             TorchTcpStore a = new TorchTcpStore("127.0.0.1", server.port(), T);
             TorchTcpStore b = new TorchTcpStore("127.0.0.1", server.port(), T)) {
            CompletableFuture<byte[]> waiting = CompletableFuture.supplyAsync(() -> a.get("joined/1", T));
            Thread.sleep(50); // lets the wait reach the server first, the case that matters (passes either way)
            assertTrue(b.compareAndSet("joined/1", null, b("record"), T));
            assertArrayEquals(b("record"), waiting.get(60, TimeUnit.SECONDS));
        }
    }

    @Test
    void shouldTimeOutOnAMissingKeyAndKeepWorking() throws Exception {
        TorchPython.require();
        try (TorchPython.Server server = new TorchPython.Server(1);
             TorchTcpStore s = new TorchTcpStore("127.0.0.1", server.port(), T)) {
            StoreTimeoutException e = assertThrows(StoreTimeoutException.class,
                () -> s.get("never", TimeUnit.MILLISECONDS.toNanos(200)));
            assertTrue(e.getMessage().contains("never"), e.getMessage());
            assertInstanceOf(CollectiveException.class, e);
            // The dropped connection made the server forget the wait; the next calls reconnect.
            s.set("after", b("ok"), T);
            assertArrayEquals(b("ok"), s.get("after", T));
        }
    }

    @Test
    void shouldShareKeysWithPythonClients() throws Exception {
        TorchPython.require();
        try (TorchPython.Server server = new TorchPython.Server(1);
             TorchTcpStore s = new TorchTcpStore("127.0.0.1", server.port(), T)) {
            s.set("from-jvm", b("hello python"), T);
            String out = TorchPython.run(String.join("\n",
                "import datetime, torch.distributed as d",
                "c = d.TCPStore('127.0.0.1', " + server.port() + ", 1, False, timeout=datetime.timedelta(seconds=60))",
                "print(c.get('from-jvm').decode())",
                "c.set('from-python', b'hello jvm')",
                "print(c.add('count', 3))"));
            assertTrue(out.contains("hello python"), out);
            assertArrayEquals(b("hello jvm"), s.get("from-python", T));
            assertEquals(4, s.add("count", 1, T));
        }
    }

    @Test
    void shouldNotTakeAJcclStoreOrAnEmptyPortForTorchs() throws Exception {
        try (TcpStoreServer jccl = TcpStoreServer.forStore("127.0.0.1", 0, "127.0.0.1",
            TcpStoreServer.Settings.fromConfig())) {
            assertNull(TorchTcpStore.probe("127.0.0.1", jccl.port()));
            StoreException e = assertThrows(StoreException.class,
                () -> new TorchTcpStore("127.0.0.1", jccl.port(), T).close());
            assertTrue(e.getMessage().contains("does not answer torch's TCPStore protocol"), e.getMessage());
        }
        int free;
        try (ServerSocket s = new ServerSocket(0)) {
            free = s.getLocalPort();
        }
        assertNull(TorchTcpStore.probe("127.0.0.1", free));
        assertThrows(StoreTimeoutException.class,
            () -> new TorchTcpStore("127.0.0.1", free, TimeUnit.MILLISECONDS.toNanos(100)).close());
    }
}
