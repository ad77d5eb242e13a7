package io.jccl.transport.tcp;

import io.jccl.transport.tcp.TcpTestSupport.Side;
import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.Context;
import io.jccl.verbs.Counter;
import io.jccl.verbs.Endpoint;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairState;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.stream.Stream;

import static io.jccl.transport.tcp.TcpTestSupport.ALL;
import static io.jccl.transport.tcp.TcpTestSupport.pollSuccess;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Attacks on connection set-up from the issue "Trust under attack": an outsider that saw a legitimate handshake on
 * the network replays it, floods the acceptor's parked-connection slots while it is still in INIT, or opens a
 * thousand connections that say nothing or garbage. None of them may become the queue pair's connection, read or
 * write its registered memory, or keep the legitimate pair from connecting.
 */
class TcpHandshakeAttackTest {
    private static final int INBOX = 4096;
    private static final int SECRET_BYTES = 256;
    private static final long ATTACK_WRITE_OFFSET = 512;
    private static final long LEGIT_WRITE_OFFSET = 1024;

    private Context ca;
    private Context cb;
    private final List<AutoCloseable> closeLater = new ArrayList<>();

    @BeforeEach
    void setUp() {
        ca = TcpTestSupport.open();
        cb = TcpTestSupport.open();
    }

    @AfterEach
    void tearDown() throws Exception {
        for (AutoCloseable c : closeLater) {
            c.close();
        }
        ca.close();
        cb.close();
    }

    /** A legitimate pair in INIT: the side that will accept (smaller QPN) and the side that will connect. */
    private final class Pair {
        final Side acceptor;
        final Side connector;
        final MemoryRegion inbox;
        final byte[] secretContent = new byte[SECRET_BYTES];

        Pair() {
            Side x;
            Side y;
            do {
                x = Side.create(ca);
                y = Side.create(cb);
            } while (x.qp().queuePairNumber() == y.qp().queuePairNumber());
            // Election: the QP with the larger QPN connects.
            boolean xAccepts = x.qp().queuePairNumber() < y.qp().queuePairNumber();
            acceptor = xAccepts ? x : y;
            connector = xAccepts ? y : x;
            inbox = acceptor.pd().allocateMemory(INBOX, ALL);
            new Random(99).nextBytes(secretContent);
            resetInbox();
        }

        void resetInbox() {
            inbox.segment().fill((byte) 0);
            MemorySegment.copy(MemorySegment.ofArray(secretContent), 0, inbox.segment(), 0, SECRET_BYTES);
        }

        InetSocketAddress listener() {
            return EndpointAddress.parse(acceptor.qp().localEndpoint().address()).socketAddress();
        }

        void acceptorReady() {
            acceptor.qp().modify(QueuePairAttributes.toReadyToReceive(connector.qp().localEndpoint()));
            acceptor.qp().modify(QueuePairAttributes.toReadyToSend(acceptor.qp().initialPsn()));
        }

        void connectorReady(Endpoint acceptorEndpoint) {
            connector.qp().modify(QueuePairAttributes.toReadyToReceive(acceptorEndpoint));
            connector.qp().modify(QueuePairAttributes.toReadyToSend(connector.qp().initialPsn()));
        }

        boolean connected() {
            return ((TcpQueuePair) acceptor.qp()).connected() && ((TcpQueuePair) connector.qp()).connected();
        }

        /** Both QPs back to RESET and INIT: same QP numbers, same secrets, ready for another set-up. */
        void backToInit() {
            for (QueuePair qp : List.of(acceptor.qp(), connector.qp())) {
                qp.modify(new QueuePairAttributes().state(QueuePairState.RESET));
                qp.modify(QueuePairAttributes.toInit(AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ,
                    AccessFlag.REMOTE_ATOMIC));
            }
            TcpTestSupport.awaitTrue("both connections closed", () -> !connected());
        }

        /**
         * The frames an impostor sends once it believes it is the connector: a READ of the secret content and a
         * WRITE next to it, with the PSNs the acceptor expects from its real peer (in the endpoint record).
         */
        byte[] impostorFrames() {
            int psn = connector.qp().initialPsn();
            ByteBuffer b = ByteBuffer.allocate(2 * Wire.HEADER + 64);
            b.put(0, (byte) Wire.READ_REQUEST).putInt(Wire.OFF_PSN, psn).putInt(Wire.OFF_LENGTH, SECRET_BYTES)
                .putInt(Wire.OFF_RKEY, inbox.rkey()).putLong(Wire.OFF_VA, inbox.address());
            int w = Wire.HEADER;
            b.put(w, (byte) Wire.WRITE).putInt(w + Wire.OFF_PSN, (psn + 1) & Wire.PSN_MASK)
                .putInt(w + Wire.OFF_LENGTH, 64).putInt(w + Wire.OFF_RKEY, inbox.rkey())
                .putLong(w + Wire.OFF_VA, inbox.address() + ATTACK_WRITE_OFFSET);
            for (int i = 0; i < 64; i++) {
                b.put(2 * Wire.HEADER + i, (byte) 0xEE);
            }
            return b.array();
        }

        /** The legitimate pair works: the connector READs the secret content and WRITEs next to it. */
        void assertWorks(byte marker) {
            Side c = connector;
            MemoryRegion local = c.pd().allocateMemory(INBOX, ALL);
            try {
                c.qp().postSend(new SendWorkRequest().wrId(1).opcode(SendOpcode.RDMA_READ).flags(SendFlag.SIGNALED)
                    .remote(inbox.address(), inbox.rkey()).local(local, 0, SECRET_BYTES));
                assertEquals(1, pollSuccess(c.cq()).wrId());
                byte[] read = new byte[SECRET_BYTES];
                MemorySegment.copy(local.segment(), ValueLayout.JAVA_BYTE, 0, read, 0, SECRET_BYTES);
                assertArrayEquals(secretContent, read, "the connector READ the acceptor's inbox");
                local.segment().asSlice(SECRET_BYTES, 64).fill(marker);
                c.qp().postSend(new SendWorkRequest().wrId(2).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
                    .remote(inbox.address() + LEGIT_WRITE_OFFSET, inbox.rkey()).local(local, SECRET_BYTES, 64));
                assertEquals(2, pollSuccess(c.cq()).wrId());
                assertEquals(marker, inbox.segment().get(ValueLayout.JAVA_BYTE, LEGIT_WRITE_OFFSET + 63));
            } finally {
                local.close();
            }
        }

        /** Nothing an impostor sent reached memory, and nothing it received carries the secret content. */
        void assertUntouchedBy(List<Impostor> impostors) {
            for (Impostor impostor : impostors) {
                byte[] got = impostor.received();
                assertFalse(contains(got, Arrays.copyOf(secretContent, 32)),
                    "an impostor READ the inbox (" + got.length + " bytes came back to it)");
            }
            for (int i = 0; i < 64; i++) {
                assertEquals(0, inbox.segment().get(ValueLayout.JAVA_BYTE, ATTACK_WRITE_OFFSET + i),
                    "an impostor WROTE into the inbox");
            }
        }
    }

    /** An attacker's connection to a listener: sends its bytes at once, collects whatever comes back. */
    private final class Impostor implements AutoCloseable {
        final Socket socket = new Socket();
        private final ByteArrayOutputStream in = new ByteArrayOutputStream();
        private boolean finished;

        Impostor(InetSocketAddress listener, byte[]... parts) throws IOException {
            closeLater.add(this);
            socket.connect(listener, 5000);
            socket.setSoTimeout(50);
            OutputStream out = socket.getOutputStream();
            try {
                for (byte[] part : parts) {
                    out.write(part);
                }
                out.flush();
            } catch (IOException closedOnUs) {
                // the listener may drop it at once: fine
            }
        }

        /** What came back until the victim closed the connection or 1 s passed without a byte. */
        synchronized byte[] received() {
            if (!finished) {
                finished = true;
                byte[] buf = new byte[8192];
                long quietSince = System.nanoTime();
                try {
                    InputStream s = socket.getInputStream();
                    while (System.nanoTime() - quietSince < 1_000_000_000L) {
                        int n;
                        try {
                            n = s.read(buf);
                        } catch (SocketTimeoutException e) {
                            continue;
                        }
                        if (n < 0) {
                            break;
                        }
                        in.write(buf, 0, n);
                        quietSince = System.nanoTime();
                    }
                } catch (IOException reset) {
                    // reset by the victim: what arrived before counts
                }
            }
            return in.toByteArray();
        }

        @Override
        public void close() throws IOException {
            socket.close();
        }
    }

    /**
     * A TCP relay between a connector and the acceptor's listener that records what the connector sends on the
     * first connection: what a passive observer of the network sees.
     */
    private static final class Sniffer implements AutoCloseable {
        final ServerSocket server;
        final InetSocketAddress target;
        private final ByteArrayOutputStream captured = new ByteArrayOutputStream();
        private final List<Socket> sockets = new CopyOnWriteArrayList<>();
        private int connections;

        Sniffer(InetSocketAddress target) throws IOException {
            this.target = target;
            this.server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
            Thread.ofPlatform().daemon().start(this::acceptLoop);
        }

        int port() {
            return server.getLocalPort();
        }

        private void acceptLoop() {
            while (!server.isClosed()) {
                try {
                    Socket from = server.accept();
                    Socket to = new Socket();
                    to.connect(target, 5000);
                    sockets.add(from);
                    sockets.add(to);
                    boolean record;
                    synchronized (this) {
                        record = connections++ == 0;
                    }
                    Thread.ofPlatform().daemon().start(() -> relay(from, to, record));
                    Thread.ofPlatform().daemon().start(() -> relay(to, from, false));
                } catch (IOException e) {
                    return;
                }
            }
        }

        void relay(Socket from, Socket to, boolean record) {
            byte[] buf = new byte[65536];
            try {
                InputStream in = from.getInputStream();
                OutputStream out = to.getOutputStream();
                int n;
                while ((n = in.read(buf)) > 0) {
                    if (record) {
                        synchronized (this) {
                            captured.write(buf, 0, n); // recorded before it is forwarded
                        }
                    }
                    out.write(buf, 0, n);
                }
                to.shutdownOutput();
            } catch (IOException e) {
                // one side closed
            }
        }

        synchronized byte[] captured() {
            return captured.toByteArray();
        }

        @Override
        public void close() throws IOException {
            server.close();
            for (Socket s : sockets) {
                s.close();
            }
        }
    }

    /**
     * A listener at an address the connector was given that is not its peer's: it answers the first {@code rogue}
     * HELLOs with CHALLENGEs it cannot sign (a random MAC, then one under a key guessed from the acceptor's record
     * alone), then relays further connections to the real listener.
     */
    private static final class RogueAcceptor implements AutoCloseable {
        final ServerSocket server;
        private final Pair pair;
        private final int rogue;
        private final Sniffer relay;
        private int connections;
        /** Rogue sessions the connector ended by closing, and bytes it sent after a rogue CHALLENGE. */
        private int refused;
        private long bytesAfterChallenge;

        RogueAcceptor(Pair pair, int rogue, Sniffer relay) throws IOException {
            this.pair = pair;
            this.rogue = rogue;
            this.relay = relay;
            this.server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
            Thread.ofPlatform().daemon().start(this::acceptLoop);
        }

        int port() {
            return server.getLocalPort();
        }

        synchronized int refused() {
            return refused;
        }

        synchronized long bytesAfterChallenge() {
            return bytesAfterChallenge;
        }

        private void acceptLoop() {
            while (!server.isClosed()) {
                try {
                    Socket s = server.accept();
                    int n;
                    synchronized (this) {
                        n = connections++;
                    }
                    if (n < rogue) {
                        Thread.ofPlatform().daemon().start(() -> answer(s, n));
                    } else {
                        Socket to = new Socket();
                        to.connect(relay.target, 5000);
                        Thread.ofPlatform().daemon().start(() -> relay.relay(s, to, false));
                        Thread.ofPlatform().daemon().start(() -> relay.relay(to, s, false));
                    }
                } catch (IOException e) {
                    return;
                }
            }
        }

        private void answer(Socket s, int n) {
            try (s) {
                s.setSoTimeout(5000);
                byte[] hello = s.getInputStream().readNBytes(Wire.HANDSHAKE);
                HelloFlyweight h = new HelloFlyweight().wrap(ByteBuffer.wrap(hello), 0);
                EndpointAddress acceptor = EndpointAddress.parse(pair.acceptor.qp().localEndpoint().address());
                HmacSha256 guess = new HmacSha256();
                HelloFlyweight.pairKey(guess, h.sourceQpn(), 1, 2, h.destinationQpn(), acceptor.secretHigh(),
                    acceptor.secretLow(), new byte[HmacSha256.MAC_BYTES]);
                ByteBuffer challenge = ByteBuffer.allocate(Wire.HANDSHAKE);
                new HelloFlyweight().wrap(challenge, 0).write(Wire.KIND_CHALLENGE, h.sourceQpn(), h.destinationQpn(),
                    7, 8, 16).sign(guess, h.nonceHigh(), h.nonceLow(), 0, 0);
                if (n == 0) {
                    byte[] random = new byte[HmacSha256.MAC_BYTES];
                    new Random(n).nextBytes(random);
                    challenge.put(Wire.HS_OFF_MAC, random);
                }
                s.getOutputStream().write(challenge.array());
                long after = 0;
                try {
                    while (s.getInputStream().read() >= 0) {
                        after++;
                    }
                } catch (IOException reset) {
                    // closed by the connector: fine
                }
                synchronized (this) {
                    refused++;
                    bytesAfterChallenge += after;
                }
            } catch (IOException e) {
                // the connector went away
            }
        }

        @Override
        public void close() throws IOException {
            server.close();
        }
    }

    /** The endpoint record with its socket address replaced by {@code port} on loopback (same QPN, PSN, secret). */
    private static Endpoint via(Endpoint endpoint, int port) {
        String address = endpoint.address();
        return new Endpoint(endpoint.provider(), endpoint.device(), endpoint.queuePairNumber(),
            endpoint.packetSequenceNumber(), "127.0.0.1:" + port + address.substring(address.lastIndexOf('/')));
    }

    private static boolean contains(byte[] haystack, byte[] needle) {
        outer:
        for (int i = 0; i + needle.length <= haystack.length; i++) {
            for (int j = 0; j < needle.length; j++) {
                if (haystack[i + j] != needle[j]) {
                    continue outer;
                }
            }
            return true;
        }
        return false;
    }

    /**
     * Connects the pair once through a {@link Sniffer} and returns what the connector sent before any work
     * request was posted: the complete handshake as a passive observer of the network saw it.
     */
    private byte[] sniffHandshake(Pair pair) throws IOException {
        Sniffer sniffer = new Sniffer(pair.listener());
        closeLater.add(sniffer);
        pair.acceptorReady();
        pair.connectorReady(via(pair.acceptor.qp().localEndpoint(), sniffer.port()));
        TcpTestSupport.awaitTrue("the sniffed pair to connect", pair::connected);
        byte[] handshake = sniffer.captured();
        assertTrue(handshake.length > 0, "nothing captured");
        return handshake;
    }

    private long receiveErrors() {
        return ca.counters().get(Counter.PORT_RCV_ERRORS) + cb.counters().get(Counter.PORT_RCV_ERRORS);
    }

    private static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            throw new AssertionError(e);
        }
    }

    // ================================================================================================ 1. replay

    @Test
    void shouldNotLetAReplayedHandshakeActAsThePeerDuringSetUpOrAfterwards() throws IOException {
        Pair pair = new Pair();
        byte[] sniffed = sniffHandshake(pair);
        List<Impostor> impostors = new ArrayList<>();

        // Afterwards: the pair is connected; the replay comes from a third socket.
        impostors.add(new Impostor(pair.listener(), sniffed, pair.impostorFrames()));
        pair.assertUntouchedBy(impostors);
        pair.assertWorks((byte) 0x31);

        // During the next set-up of the same two QPs (same QP numbers, same secrets): a replay while the acceptor
        // is still in INIT (its connection is parked), and one while it waits at RTR for its peer.
        pair.backToInit();
        pair.resetInbox();
        long errorsBefore = receiveErrors();
        impostors.add(new Impostor(pair.listener(), sniffed, pair.impostorFrames()));
        sleep(200);
        pair.acceptorReady();
        impostors.add(new Impostor(pair.listener(), sniffed, pair.impostorFrames()));
        sleep(200);
        pair.connectorReady(pair.acceptor.qp().localEndpoint());

        pair.assertUntouchedBy(impostors);
        pair.assertWorks((byte) 0x32);
        assertTrue(receiveErrors() >= errorsBefore + 2, "the replays were not counted");
    }

    @Test
    void shouldMakeTheConnectorRetryPastAnAcceptorThatCannotProveThePairKey() throws IOException {
        Pair pair = new Pair();
        Sniffer relay = new Sniffer(pair.listener());
        RogueAcceptor rogue = new RogueAcceptor(pair, 2, relay);
        closeLater.add(rogue);
        closeLater.add(relay);
        Context connectorContext = pair.connector.context();
        long before = connectorContext.counters().get(Counter.PORT_RCV_ERRORS);
        pair.acceptorReady();
        pair.connectorReady(via(pair.acceptor.qp().localEndpoint(), rogue.port()));
        pair.assertWorks((byte) 0x61);
        // Both rogue CHALLENGEs were refused: the connector closed without a PROOF, counted, and tried again.
        TcpTestSupport.awaitTrue("both rogue sessions closed", () -> rogue.refused() == 2);
        assertEquals(0, rogue.bytesAfterChallenge(), "the connector answered a CHALLENGE it could not verify");
        assertTrue(connectorContext.counters().get(Counter.PORT_RCV_ERRORS) >= before + 2);
    }

    // ================================================================================================ 2. parked slot

    /**
     * A HELLO from an outsider that knows the acceptor's whole endpoint record (QPN and secret, as from a store
     * readable in clear) and the connector's QPN, but not the connector's secret: its best guess at the pair key.
     */
    private static byte[] forgedHello(Pair pair, Random random) {
        EndpointAddress acceptor = EndpointAddress.parse(pair.acceptor.qp().localEndpoint().address());
        return new TcpTestSupport.RawConnector(pair.connector.qp().queuePairNumber(), random.nextLong(),
            random.nextLong(), pair.acceptor.qp().queuePairNumber(), acceptor.secretHigh(), acceptor.secretLow())
            .hello(random.nextLong(), random.nextLong());
    }

    /** The sniffed HELLO with a nonce of the attacker's own (the MAC left as sniffed). */
    private static byte[] withFreshNonce(byte[] sniffed, Random random) {
        byte[] hello = Arrays.copyOf(sniffed, Wire.HANDSHAKE);
        ByteBuffer.wrap(hello).putLong(Wire.HS_OFF_NONCE, random.nextLong())
            .putLong(Wire.HS_OFF_NONCE + 8, random.nextLong());
        return hello;
    }

    @Test
    void shouldNeverDisplaceAParkedConnectionNorAcceptAnImpostorThroughTheParkedSlot() throws Exception {
        Pair pair = new Pair();
        byte[] sniffed = sniffHandshake(pair);
        pair.backToInit();
        pair.resetInbox();
        long errorsBefore = receiveErrors();
        Random random = new Random(5);
        List<Impostor> impostors = new CopyOnWriteArrayList<>();
        // The acceptor is in INIT. A flood of HELLOs starts: replays of the sniffed handshake and HELLOs made from
        // the acceptor's endpoint record. The legitimate connector reaches RTR in the middle of it (its HELLO is
        // parked, or dropped and retried), the acceptor reaches RTR later, the flood goes on a little after that.
        TcpConnection acceptorConnection = ((TcpQueuePair) pair.acceptor.qp()).connection;
        TcpContext acceptorContext = (TcpContext) pair.acceptor.context();
        int[] most = new int[2];
        long start = System.nanoTime();
        Thread flood = Thread.ofPlatform().start(() -> {
            int i = 0;
            while (System.nanoTime() - start < 600_000_000L) {
                try {
                    byte[] hello = switch (i++ % 3) {
                        case 0 -> sniffed; // the whole sniffed handshake, replayed
                        case 1 -> forgedHello(pair, random);
                        default -> withFreshNonce(sniffed, random); // the sniffed HELLO with a nonce of its own
                    };
                    impostors.add(new Impostor(pair.listener(), hello, pair.impostorFrames()));
                } catch (IOException e) {
                    throw new AssertionError(e);
                }
                most[0] = Math.max(most[0], acceptorConnection.candidates());
                most[1] = Math.max(most[1], acceptorContext.candidateConnections());
                sleep(3);
            }
        });
        sleep(100);
        pair.connectorReady(pair.acceptor.qp().localEndpoint());
        sleep(300);
        pair.acceptorReady();
        flood.join();

        pair.assertUntouchedBy(impostors);
        pair.assertWorks((byte) 0x41);
        assertTrue(impostors.size() > 20, "flood too small: " + impostors.size());
        // Parked connections are bounded per QP and per context (and none is left once the pair is connected).
        assertTrue(most[0] <= TcpConnection.MAX_CANDIDATES, "candidates at the QP: " + most[0]);
        assertTrue(most[1] <= TcpContext.MAX_CANDIDATES, "candidates in the context: " + most[1]);
        assertEquals(0, acceptorConnection.candidates());
        assertTrue(receiveErrors() > errorsBefore, "the flood was not counted");
    }

    // ================================================================================================ 3. bounds

    private static long openDescriptors() throws IOException {
        try (Stream<Path> fds = Files.list(Path.of("/proc/self/fd"))) {
            return fds.count();
        }
    }

    @Test
    void shouldBoundWhatAThousandSilentOrGarbageConnectionsHold() throws Exception {
        Pair pair = new Pair();
        long baseline = openDescriptors();
        List<Socket> flood = new ArrayList<>();
        Random random = new Random(11);
        try {
            for (int i = 0; i < 1000; i++) {
                Socket s = new Socket();
                flood.add(s);
                s.connect(pair.listener(), 5000);
                if (i % 2 == 1) {
                    byte[] garbage = new byte[1 + random.nextInt(300)];
                    random.nextBytes(garbage);
                    s.getOutputStream().write(garbage);
                }
            }
            // The test's own 1000 client sockets are its descriptors; the rest is the listener's.
            TcpContext listener = (TcpContext) pair.acceptor.context();
            long most = 0;
            int mostPending = 0;
            for (int i = 0; i < 20; i++) {
                most = Math.max(most, openDescriptors() - baseline - flood.size());
                mostPending = Math.max(mostPending, listener.pendingConnections());
                sleep(50);
            }
            // Pending connections, plus those closed this round whose descriptors the next select releases.
            assertTrue(most <= TcpContext.MAX_PENDING + 64,
                "the listener holds " + most + " descriptors for 1000 silent/garbage connections");
            assertTrue(mostPending <= TcpContext.MAX_PENDING, "pending connections: " + mostPending);

            // The legitimate pair connects while the flood's connections are still open.
            pair.acceptorReady();
            pair.connectorReady(pair.acceptor.qp().localEndpoint());
            pair.assertWorks((byte) 0x51);
        } finally {
            for (Socket s : flood) {
                s.close();
            }
        }
    }
}
