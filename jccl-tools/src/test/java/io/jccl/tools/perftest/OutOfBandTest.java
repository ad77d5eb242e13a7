package io.jccl.tools.perftest;

import io.jccl.tools.JcclRuntime;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class OutOfBandTest {
    @Test
    void shouldCarryLinesBarriersAndNoticeAPeerThatLeft() throws Exception {
        int port = JcclRuntime.freePort();
        CompletableFuture<OutOfBand> accepted = CompletableFuture.supplyAsync(() -> {
            try {
                return OutOfBand.accept(port, 10_000);
            } catch (IOException e) {
                throw new RuntimeException(e);
            }
        });
        try (OutOfBand client = OutOfBand.connect("127.0.0.1", port, 10_000);
             OutOfBand server = accepted.get(10, TimeUnit.SECONDS)) {
            // Several lines in one burst (the QP records of -q N) arrive as separate lines.
            client.send("qp a");
            client.send("qp b");
            client.send("qp c");
            assertEquals("qp a", server.receive());
            assertEquals("qp b", server.receive());
            assertEquals("qp c", server.receive());
            assertNull(server.poll(), "nothing pending");
            assertFalse(server.peerGone());

            CompletableFuture<Void> barrier = CompletableFuture.runAsync(() -> {
                try {
                    server.barrier("go 8");
                } catch (IOException e) {
                    throw new RuntimeException(e);
                }
            });
            client.barrier("go 8");
            barrier.get(10, TimeUnit.SECONDS);

            client.send("done");
            long deadline = System.nanoTime() + 5_000_000_000L;
            while (server.poll() == null && System.nanoTime() < deadline) {
                Thread.onSpinWait();
            }
            assertEquals("done", server.poll(), "poll peeks");
            server.expect("done");

            client.fail("boom");
            deadline = System.nanoTime() + 5_000_000_000L;
            IOException failure = null;
            while (failure == null && System.nanoTime() < deadline) {
                try {
                    server.peerGone();
                } catch (IOException e) {
                    failure = e;
                }
            }
            assertTrue(failure != null && failure.getMessage().contains("peer failed: boom"), String.valueOf(failure));
            server.receive();
            client.close();
            deadline = System.nanoTime() + 5_000_000_000L;
            while (!server.peerGone() && System.nanoTime() < deadline) {
                Thread.sleep(1);
            }
            assertTrue(server.peerGone());
            assertThrows(IOException.class, server::receive);
        }
    }

    @Test
    void shouldGiveUpConnectingWhenTold() {
        int port = JcclRuntime.freePort();
        long start = System.nanoTime();
        assertThrows(IOException.class, () -> OutOfBand.connect("127.0.0.1", port, 30_000, () -> true));
        assertTrue(System.nanoTime() - start < 5_000_000_000L);
    }
}
