package io.jccl.verbs;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.net.Socket;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import static io.jccl.verbs.ConnectionManagerRig.REJECT;
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
import static io.jccl.verbs.ConnectionManagerRig.someEndpoint;
import static io.jccl.verbs.ConnectionManagerRig.utf8;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The ConnectionManager listener against clients that do not play by the rules, one defect at a time: a client that
 * connects and never speaks, one that speaks a byte at a time, requests the listener cannot apply, a client fishing
 * for the server's proof, the server socket failing with EMFILE, and close() during accept(). Each case ends with a
 * legitimate client getting a working queue pair, so nothing was lost on the way.
 */
class ConnectionManagerHardeningTest {
    private static final byte[] SECRET = utf8("correct horse battery staple");
    private static final Duration TWO_SECONDS = Duration.ofSeconds(2);

    @Test
    void shouldConnectAClientBehindOneThatNeverSpeaks() throws Exception {
        try (ConnectionManagerRig server = new ConnectionManagerRig(); ConnectionManagerRig client =
            new ConnectionManagerRig(); var listener = server.listen();
             Socket silent = connectRaw(listener.localAddress())) {
            CompletableFuture<ConnectionManager.Connection> accepted = CompletableFuture.supplyAsync(
                () -> listener.accept(server.init(), parameters(SECRET, TWO_SECONDS)));
            long start = System.nanoTime();
            ConnectionManager.Connection connection = ConnectionManager.connect(client.domain, client.init(),
                listener.localAddress(), parameters(SECRET, TWO_SECONDS));
            long tookMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            ConnectionManager.Connection serverSide = accepted.get(5, TimeUnit.SECONDS);
            try (QueuePair a = connection.queuePair(); QueuePair b = serverSide.queuePair()) {
                assertTrue(tookMs < 1000, "the silent client delayed the handshake by " + tookMs + " ms");
                assertCarriesTraffic(server, serverSide, client, connection, utf8("behind a silent client"));
            }
        }
    }

    @Test
    void shouldEndAcceptByItsDeadlineWhateverAClientDribbles() throws Exception {
        try (ConnectionManagerRig server = new ConnectionManagerRig(); var listener = server.listen();
             Socket dribbler = connectRaw(listener.localAddress())) {
            // A hello and a request, one byte every 300 ms (each byte within a socket read timeout of the deadline).
            byte[] script = bytes(o -> {
                o.write(hello(false, new byte[16]));
                o.write(request(someEndpoint(), 16, 16, new byte[0]));
            });
            Thread dribble = Thread.ofPlatform().daemon().start(() -> {
                long stopNs = System.nanoTime() + 5 * SECOND_NS;
                try {
                    for (int i = 0; i < script.length && System.nanoTime() - stopNs < 0; i++) {
                        send(dribbler, new byte[] {script[i]});
                        Thread.sleep(300);
                    }
                } catch (IOException | InterruptedException e) {
                    // the listener closed it: fine
                } finally {
                    closeQuietly(dribbler);
                }
            });
            long start = System.nanoTime();
            VerbsException timeout = assertThrows(VerbsException.class,
                () -> listener.accept(server.init(), parameters(null, Duration.ofSeconds(1))));
            long tookMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            dribble.interrupt();
            assertEquals(VerbsException.Reason.TIMEOUT, timeout.reason(), timeout.getMessage());
            assertTrue(tookMs < 1500, "accept() with a 1 s deadline returned after " + tookMs + " ms");
        }
    }

    /**
     * Requests the listener cannot apply: depths outside what ibv_modify_qp takes, an endpoint or private data longer
     * than the wire allows. The client hears why; the accept call goes on and serves the next client.
     */
    @ParameterizedTest
    @ValueSource(strings = {"initiator depth 1000", "responder resources -1", "endpoint of 65535 bytes",
        "private data of 65535 bytes"})
    void shouldRefuseARequestItCannotApplyAndGoOnAccepting(String what) throws Exception {
        byte[] bad = switch (what) {
            case "initiator depth 1000" -> request(someEndpoint(), 16, 1000, new byte[0]);
            case "responder resources -1" -> request(someEndpoint(), -1, 16, new byte[0]);
            case "endpoint of 65535 bytes" -> bytes(o -> { // the header only: 64 KiB announced, never sent
                o.writeInt(ConnectionManagerRig.REQUEST);
                o.writeShort(0xFFFF);
            });
            default -> bytes(o -> {
                o.writeInt(ConnectionManagerRig.REQUEST);
                o.writeUTF(someEndpoint());
                o.writeInt(16);
                o.writeInt(16);
                o.writeShort(0xFFFF);
            });
        };
        try (ConnectionManagerRig server = new ConnectionManagerRig(); ConnectionManagerRig client =
            new ConnectionManagerRig(); var listener = server.listen()) {
            CompletableFuture<ConnectionManager.Connection> accepted = CompletableFuture.supplyAsync(
                () -> listener.accept(server.init(), parameters(null, TWO_SECONDS)));
            byte[] answer;
            try (Socket hostile = connectRaw(listener.localAddress())) {
                send(hostile, hello(false, new byte[16]), bad);
                readServerHello(hostile);
                answer = readAvailable(hostile, 512, 1000);
            }
            if (accepted.isDone()) { // the bad request ended the accept call: say how
                ExecutionException ended = assertThrows(ExecutionException.class, accepted::get);
                throw new AssertionError(what + " ended the accept call: " + ended.getCause(), ended.getCause());
            }
            assertTrue(answer.length >= 6 && answer[3] == REJECT, what + ": expected a REJECT, got "
                + Arrays.toString(Arrays.copyOf(answer, Math.min(16, answer.length))));
            ConnectionManager.Connection connection = ConnectionManager.connect(client.domain, client.init(),
                listener.localAddress(), parameters(null, TWO_SECONDS));
            ConnectionManager.Connection serverSide = accepted.get(5, TimeUnit.SECONDS);
            try (QueuePair a = connection.queuePair(); QueuePair b = serverSide.queuePair()) {
                assertCarriesTraffic(server, serverSide, client, connection, utf8("after " + what));
            }
        }
    }

    /** A client that sends a valid request and vanishes must not leave a queue pair behind on the server. */
    @Test
    void shouldNotLeaveAQueuePairBehindWhenTheClientVanishesAfterItsRequest() throws Exception {
        try (ConnectionManagerRig server = new ConnectionManagerRig(); ConnectionManagerRig client =
            new ConnectionManagerRig(); var listener = server.listen()) {
            CompletableFuture<ConnectionManager.Connection> accepted = CompletableFuture.supplyAsync(
                () -> listener.accept(server.init(), parameters(null, TWO_SECONDS)));
            for (int i = 0; i < 5; i++) {
                Socket vanishing = connectRaw(listener.localAddress());
                readServerHello(vanishing); // the listener is reading this connection now
                send(vanishing, hello(false, new byte[16]), request(someEndpoint(), 16, 16, new byte[0]));
                vanishing.setSoLinger(true, 0);
                vanishing.close();
            }
            Thread.sleep(100);
            ConnectionManager.Connection connection = ConnectionManager.connect(client.domain, client.init(),
                listener.localAddress(), parameters(null, TWO_SECONDS));
            ConnectionManager.Connection serverSide = accepted.get(5, TimeUnit.SECONDS);
            try (QueuePair a = connection.queuePair(); QueuePair b = serverSide.queuePair()) {
                assertEquals(1, server.queuePairs(), "server queue pairs: the client's, and any left behind");
                assertCarriesTraffic(server, serverSide, client, connection, utf8("after vanishing clients"));
            }
        }
    }

    /**
     * A client that does not know the secret must get nothing it could test guesses against offline: the server
     * sends its proof (an HMAC over nonces the client knows) only after the client's proof checked out.
     */
    @Test
    void shouldNotProveTheSecretToAClientThatHasNotProvedIt() throws Exception {
        try (ConnectionManagerRig server = new ConnectionManagerRig(); ConnectionManagerRig client =
            new ConnectionManagerRig(); var listener = server.listen()) {
            CompletableFuture<ConnectionManager.Connection> accepted = CompletableFuture.supplyAsync(
                () -> listener.accept(server.init(), parameters(SECRET, TWO_SECONDS)));
            byte[] clientNonce = new byte[16];
            byte[] early;
            byte[] afterWrongProof;
            try (Socket fishing = connectRaw(listener.localAddress())) {
                byte[] serverNonce = readServerHello(fishing);
                send(fishing, hello(true, clientNonce));
                early = readAvailable(fishing, 64, 300);
                boolean isServerProof = early.length == 32
                    && Arrays.equals(early, mac(SECRET, 'S', serverNonce, clientNonce));
                assertEquals(0, early.length, "the server sent " + early.length + " bytes before the client proved"
                    + " the secret" + (isServerProof ? ": its own HMAC-SHA256 proof, material for an offline"
                    + " dictionary attack on the secret" : ""));
                send(fishing, new byte[32]);
                afterWrongProof = readAvailable(fishing, 64, 1000);
            }
            assertEquals(0, afterWrongProof.length, "a wrong proof is answered by closing, nothing else");
            ConnectionManager.Connection connection = ConnectionManager.connect(client.domain, client.init(),
                listener.localAddress(), parameters(SECRET, TWO_SECONDS));
            ConnectionManager.Connection serverSide = accepted.get(5, TimeUnit.SECONDS);
            try (QueuePair a = connection.queuePair(); QueuePair b = serverSide.queuePair()) {
                assertCarriesTraffic(server, serverSide, client, connection, utf8("after a fishing client"));
            }
        }
    }

    /**
     * With no descriptor left, the server socket's accept fails at once, and keeps failing while the connection
     * waits in the backlog: the listener must back off instead of spinning a core until its deadline, and must take
     * the waiting client in once descriptors are back.
     */
    @Test
    void shouldBackOffWhileOutOfDescriptorsAndThenServeTheClientThatWaited() throws Exception {
        assumeTrue(Files.isDirectory(Path.of("/proc/self/fd")), "needs Linux");
        ThreadMXBean threads = ManagementFactory.getThreadMXBean();
        assumeTrue(threads.isCurrentThreadCpuTimeSupported());
        try (ConnectionManagerRig server = new ConnectionManagerRig(); ConnectionManagerRig client =
            new ConnectionManagerRig(); var listener = server.listen()) {
            // Warm up: everything the accept path loads is loaded before no file can be opened.
            warmUp(server, client, listener);
            Socket waiting = connectRaw(listener.localAddress()); // stays in the backlog
            long[] limit = ConnectionManagerRig.FileLimit.get();
            List<FileChannel> fillers = new ArrayList<>();
            VerbsException failure = null;
            long cpuNs;
            long wallNs;
            long maxFd = 0;
            try (var fds = Files.list(Path.of("/proc/self/fd"))) {
                for (Path p : (Iterable<Path>) fds::iterator) {
                    maxFd = Math.max(maxFd, Long.parseLong(p.getFileName().toString()));
                }
            }
            ConnectionManagerRig.FileLimit.set(maxFd + 1, limit[1]);
            try {
                try {
                    while (fillers.size() < 10_000) { // fill the holes below the limit
                        fillers.add(FileChannel.open(Path.of("/dev/null")));
                    }
                } catch (IOException full) {
                    // EMFILE: no descriptor left
                }
                long cpuStart = threads.getCurrentThreadCpuTime();
                long wallStart = System.nanoTime();
                try {
                    listener.accept(server.init(), parameters(null, Duration.ofMillis(600)));
                } catch (VerbsException e) {
                    failure = e;
                }
                cpuNs = threads.getCurrentThreadCpuTime() - cpuStart;
                wallNs = System.nanoTime() - wallStart;
            } finally {
                for (FileChannel f : fillers) {
                    f.close();
                }
                ConnectionManagerRig.FileLimit.set(limit[0], limit[1]);
            }
            String summary = "accept() out of descriptors: " + TimeUnit.NANOSECONDS.toMillis(cpuNs) + " ms CPU in "
                + TimeUnit.NANOSECONDS.toMillis(wallNs) + " ms (" + (failure != null ? failure.getMessage() : "-")
                + ")";
            System.out.println(summary);
            assertTrue(failure != null && failure.reason() == VerbsException.Reason.TIMEOUT, summary);
            assertTrue(cpuNs < wallNs / 4, summary);

            // Descriptors are back: the client that waited in the backlog is taken in, and a new one connects.
            CompletableFuture<ConnectionManager.Connection> accepted = CompletableFuture.supplyAsync(
                () -> listener.accept(server.init(), parameters(null, TWO_SECONDS)));
            try (waiting) {
                readServerHello(waiting);
            }
            ConnectionManager.Connection connection = ConnectionManager.connect(client.domain, client.init(),
                listener.localAddress(), parameters(null, TWO_SECONDS));
            ConnectionManager.Connection serverSide = accepted.get(5, TimeUnit.SECONDS);
            try (QueuePair a = connection.queuePair(); QueuePair b = serverSide.queuePair()) {
                assertCarriesTraffic(server, serverSide, client, connection, utf8("after EMFILE"));
            }
        }
    }

    @Test
    void shouldEndABlockedAcceptPromptlyWhenTheListenerCloses() throws Exception {
        try (ConnectionManagerRig server = new ConnectionManagerRig()) {
            var listener = server.listen();
            CompletableFuture<ConnectionManager.Connection> accepted = CompletableFuture.supplyAsync(
                () -> listener.accept(server.init(), parameters(null, Duration.ofSeconds(3))));
            Thread.sleep(200);
            long start = System.nanoTime();
            listener.close();
            ExecutionException ended = assertThrows(ExecutionException.class,
                () -> accepted.get(10, TimeUnit.SECONDS));
            long tookMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            VerbsException closed = assertInstanceOf(VerbsException.class, ended.getCause());
            assertTrue(tookMs < 500, "accept() ended " + tookMs + " ms after close(): " + closed.getMessage());
            assertEquals(VerbsException.Reason.CLOSED, closed.reason(), closed.getMessage());
        }
    }

    private static void warmUp(ConnectionManagerRig server, ConnectionManagerRig client,
                               ConnectionManager.ConnectionListener listener) throws Exception {
        CompletableFuture<ConnectionManager.Connection> accepted = CompletableFuture.supplyAsync(
            () -> listener.accept(server.init(), parameters(null, TWO_SECONDS)));
        ConnectionManager.Connection connection = ConnectionManager.connect(client.domain, client.init(),
            listener.localAddress(), parameters(null, TWO_SECONDS));
        ConnectionManager.Connection serverSide = accepted.get(5, TimeUnit.SECONDS);
        connection.queuePair().close();
        serverSide.queuePair().close();
        assertThrows(VerbsException.class, () -> listener.accept(server.init(),
            parameters(null, Duration.ofMillis(50))));
    }
}
