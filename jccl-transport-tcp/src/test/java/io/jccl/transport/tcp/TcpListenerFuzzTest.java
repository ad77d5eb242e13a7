package io.jccl.transport.tcp;

import io.jccl.common.testing.Footprint;
import io.jccl.transport.tcp.TcpTestSupport.Side;
import io.jccl.verbs.Context;
import io.jccl.verbs.Counter;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairState;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.WorkCompletion;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.io.InputStream;
import java.lang.foreign.ValueLayout;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;

import static io.jccl.transport.tcp.TcpTestSupport.ALL;
import static io.jccl.transport.tcp.TcpTestSupport.pollSuccess;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The listener of a tcp0 context under a seeded storm of hostile connections (issue 15: every listener is fuzzed):
 * random bytes, handshake messages built with {@link HelloFlyweight} and then mutated, truncated or given impossible
 * fields, CHALLENGEs and PROOFs where a HELLO belongs, well-formed HELLOs for QP numbers that do not exist followed by
 * frame headers with oversized lengths, frames without any handshake, floods of bytes, connections reset at once, and
 * a few hundred connections that never speak. Meanwhile and afterwards legitimate QP pairs connect through the same
 * listener and move data correctly, and the process's footprint stays bounded: threads, heap after GC, and open
 * descriptors back near the baseline once the hostile connections are closed.
 *
 * <p>Complements {@link TcpHandshakeAttackTest} (replays, parked-slot takeover, a thousand silent or garbage
 * connections, a rogue listener) and {@link TcpMalformedInputTest} (crafted frames after a valid handshake, a few
 * unauthenticated cases): this one varies the first bytes a listener sees, at volume, and measures what remains.
 * The seed is fixed ({@code -Djccl.fuzz.seed} changes it); about 2 s.
 */
class TcpListenerFuzzTest {
    private static final long SEED = Long.getLong("jccl.fuzz.seed", 0x7C9_15_07L);
    private static final int STORM_CASES = 4000;
    private static final int BATCH = 40;
    private static final int IDLE_CONNECTIONS = 300;
    private static final int INBOX = 1 << 16;

    /** A legitimate pair whose acceptor is a QP of the fuzzed context (so it connects through its listener). */
    private static final class Pair {
        final Side acceptor;
        final Side connector;
        final MemoryRegion inbox;
        final MemoryRegion local;

        Pair(Context fuzzed, Context other) {
            Side a;
            Side c;
            do {
                a = Side.create(fuzzed);
                c = Side.create(other);
            } while (a.qp().queuePairNumber() >= c.qp().queuePairNumber()); // the larger QPN connects
            acceptor = a;
            connector = c;
            inbox = acceptor.pd().allocateMemory(INBOX, ALL);
            local = connector.pd().allocateMemory(INBOX, ALL);
        }

        void connect() {
            TcpTestSupport.connect(acceptor.qp(), connector.qp());
        }

        /** A SEND into a posted receive and an RDMA WRITE, both checked byte for byte. */
        void assertWorks(byte marker) {
            acceptor.qp().postReceive(new ReceiveWorkRequest().wrId(7).local(inbox, 0, 4096));
            local.segment().asSlice(0, 4096).fill(marker);
            local.segment().set(ValueLayout.JAVA_BYTE, 100, (byte) (marker + 1));
            connector.qp().postSend(new SendWorkRequest().wrId(1).opcode(SendOpcode.SEND).flags(SendFlag.SIGNALED)
                .local(local, 0, 4096));
            assertEquals(1, pollSuccess(connector.cq()).wrId());
            WorkCompletion received = pollSuccess(acceptor.cq());
            assertEquals(7, received.wrId());
            assertEquals(4096, received.byteLength());
            assertEquals(-1L, inbox.segment().asSlice(0, 4096).mismatch(local.segment().asSlice(0, 4096)),
                "SEND payload");
            local.segment().asSlice(8192, 32768).fill((byte) (marker ^ 0x5A));
            connector.qp().postSend(new SendWorkRequest().wrId(2).opcode(SendOpcode.RDMA_WRITE)
                .flags(SendFlag.SIGNALED).remote(inbox.address() + 8192, inbox.rkey()).local(local, 8192, 32768));
            assertEquals(2, pollSuccess(connector.cq()).wrId());
            assertEquals(-1L, inbox.segment().asSlice(8192, 32768).mismatch(local.segment().asSlice(8192, 32768)),
                "WRITE payload");
            assertEquals(QueuePairState.READY_TO_SEND, acceptor.qp().state());
            assertEquals(QueuePairState.READY_TO_SEND, connector.qp().state());
        }
    }

    @Test
    void shouldStayBoundedUnderHostileConnectionsAndStillConnectLegitimatePairs() throws Exception {
        try (Context fuzzed = TcpTestSupport.open(); Context other = TcpTestSupport.open()) {
            TcpContext listener = (TcpContext) fuzzed;
            InetSocketAddress address = listener.advertised;
            Random random = new Random(SEED);

            // Warm up (class loading, the first connections, a GC) so that the baseline is the steady state.
            Pair warm = new Pair(fuzzed, other);
            warm.connect();
            warm.assertWorks((byte) 1);
            Pair during = new Pair(fuzzed, other); // in INIT: hostile HELLOs for it are parked until its RTR
            int[] known = {warm.acceptor.qp().queuePairNumber(), during.acceptor.qp().queuePairNumber()};
            storm(address, random, 2 * BATCH, known);
            awaitDescriptorsAtMost(Long.MAX_VALUE, listener);
            int baseThreads = Footprint.threads();
            long baseHeap = Footprint.heapUsedAfterGc();
            long baseFds = Footprint.openDescriptors();
            long baseErrors = fuzzed.counters().get(Counter.PORT_RCV_ERRORS);

            // 1. The storm, with a legitimate pair connecting through the listener in the middle of it.
            long start = System.nanoTime();
            int maxThreads = storm(address, random, STORM_CASES / 2, known);
            during.connect();
            maxThreads = Math.max(maxThreads, storm(address, random, STORM_CASES / 2, known));
            long stormMs = (System.nanoTime() - start) / 1_000_000;
            during.assertWorks((byte) 2);

            // 2. Connections that never speak, held open: bounded, and a new pair still connects meanwhile.
            List<Socket> idle = new ArrayList<>();
            long mostHeld = 0;
            int mostPending = 0;
            Pair afterwards;
            try {
                for (int i = 0; i < IDLE_CONNECTIONS; i++) {
                    Socket s = new Socket();
                    idle.add(s);
                    s.connect(address, 5000);
                }
                afterwards = new Pair(fuzzed, other);
                afterwards.connect();
                for (int i = 0; i < 10; i++) {
                    // The test's own client sockets are its descriptors; the rest is the listener's.
                    mostHeld = Math.max(mostHeld, Footprint.openDescriptors() - baseFds - idle.size());
                    mostPending = Math.max(mostPending, listener.pendingConnections());
                    maxThreads = Math.max(maxThreads, Footprint.threads());
                    Thread.sleep(20);
                }
                afterwards.assertWorks((byte) 3);
            } finally {
                for (Socket s : idle) {
                    s.close();
                }
            }

            // 3. Everything hostile closed: back near the baseline.
            long fds = awaitDescriptorsAtMost(baseFds + 16, listener);
            long heap = Footprint.heapUsedAfterGc() - baseHeap;
            long errors = fuzzed.counters().get(Counter.PORT_RCV_ERRORS) - baseErrors;
            String summary = STORM_CASES + " hostile connections in " + stormMs + " ms + " + IDLE_CONNECTIONS
                + " idle (seed 0x" + Long.toHexString(SEED) + "): threads " + baseThreads + " -> max " + maxThreads
                + ", descriptors " + baseFds + " -> " + fds + " (listener held at most " + mostHeld + " with "
                + mostPending + " pending), heap " + (heap >= 0 ? "+" : "") + (heap >> 10) + " KiB after GC, "
                + errors + " refusals counted";
            System.out.println(summary);
            assertTrue(maxThreads <= baseThreads + 2, summary);
            assertTrue(heap < 4L << 20, summary);
            assertTrue(mostPending <= TcpContext.MAX_PENDING, summary);
            assertTrue(mostHeld <= TcpContext.MAX_PENDING + 64, summary);
            // The pairs connected since the baseline hold two sockets each (both ends live in this process).
            assertTrue(fds <= baseFds + 16, summary);
            assertTrue(errors >= STORM_CASES / 2, summary);
            assertEquals(0, listener.candidateConnections(), summary);

            // Every pair still works, the oldest too.
            warm.assertWorks((byte) 4);
            during.assertWorks((byte) 5);
            afterwards.assertWorks((byte) 6);
        }
    }

    /** {@code cases} hostile connections, {@link #BATCH} open at a time; returns the most threads seen. */
    private static int storm(InetSocketAddress address, Random random, int cases, int[] known) throws IOException {
        int maxThreads = 0;
        for (int done = 0; done < cases; done += BATCH) {
            List<Socket> open = new ArrayList<>();
            try {
                for (int i = 0; i < Math.min(BATCH, cases - done); i++) {
                    Socket s = new Socket();
                    open.add(s);
                    s.connect(address, 5000);
                    byte[] bytes = hostileBytes(random, known);
                    try {
                        if (bytes.length > 0) {
                            s.getOutputStream().write(bytes);
                        }
                    } catch (IOException closedOnUs) {
                        // the listener closed it already: fine
                    }
                }
                maxThreads = Math.max(maxThreads, Footprint.threads());
                // Some get a moment for the listener to answer or close; whatever comes back is read and dropped.
                for (Socket s : open) {
                    if (random.nextInt(8) == 0) {
                        drainBriefly(s);
                    }
                }
            } finally {
                for (Socket s : open) {
                    try {
                        s.setSoLinger(true, 0); // a reset: no TIME_WAIT pile-up
                    } catch (IOException ignored) {
                        // closed already
                    }
                    s.close();
                }
            }
        }
        return maxThreads;
    }

    private static void drainBriefly(Socket s) {
        try {
            s.setSoTimeout(2);
            InputStream in = s.getInputStream();
            byte[] sink = new byte[512];
            while (in.read(sink) > 0) {
                // a listener never answers before a HELLO is authenticated; anything is dropped
            }
        } catch (IOException ignored) {
            // timeout, reset or EOF
        }
    }

    /** The first bytes of one hostile connection. */
    private static byte[] hostileBytes(Random r, int[] known) {
        int qpn = r.nextInt(4) == 0 ? known[r.nextInt(known.length)] : r.nextInt(1 << 24);
        return switch (r.nextInt(12)) {
            case 0 -> randomBytes(r, 1 + r.nextInt(300));
            case 1 -> { // a well-formed, signed HELLO with 1-3 bytes flipped (magic, version, kind, QPNs, MAC...)
                byte[] h = hello(r, qpn);
                for (int m = 0; m < 1 + r.nextInt(3); m++) {
                    h[r.nextInt(h.length)] ^= (byte) (1 + r.nextInt(255));
                }
                yield h;
            }
            case 2 -> { // a CHALLENGE or a PROOF where a HELLO belongs
                ByteBuffer b = ByteBuffer.allocate(Wire.HANDSHAKE);
                int kind = r.nextBoolean() ? Wire.KIND_CHALLENGE : Wire.KIND_PROOF;
                new HelloFlyweight().wrap(b, 0).write(kind, qpn, r.nextInt(1 << 24),
                    kind == Wire.KIND_PROOF ? 0 : r.nextLong(), kind == Wire.KIND_PROOF ? 0 : r.nextLong(),
                    kind == Wire.KIND_PROOF ? 0 : 16).sign(key(r, qpn), r.nextLong(), r.nextLong(), r.nextLong(),
                    r.nextLong());
                yield b.array();
            }
            case 3 -> Arrays.copyOf(hello(r, qpn), 1 + r.nextInt(Wire.HANDSHAKE - 1)); // truncated
            case 4 -> { // impossible fields: QPNs beyond 24 bits, max_dest_rd_atomic out of range, version 2
                byte[] h = hello(r, qpn);
                ByteBuffer b = ByteBuffer.wrap(h);
                switch (r.nextInt(4)) {
                    case 0 -> b.putInt(Wire.HS_OFF_DEST_QPN, qpn | 0x7F000000);
                    case 1 -> b.putInt(Wire.HS_OFF_SOURCE_QPN, -1);
                    case 2 -> b.putInt(Wire.HS_OFF_MAX_DEST_RD_ATOMIC, r.nextBoolean() ? -1 : 0x10000);
                    default -> b.put(Wire.HS_OFF_VERSION, (byte) 2);
                }
                yield concat(h, randomBytes(r, r.nextInt(64)));
            }
            case 5 -> concat(hello(r, r.nextInt(1 << 24)), frames(r, 1 + r.nextInt(4))); // no such QP, then frames
            case 6 -> frames(r, 1 + r.nextInt(4)); // frames without any handshake
            case 7 -> concat(hello(r, known[r.nextInt(known.length)]), frames(r, 1 + r.nextInt(3))); // wrong key
            case 8 -> randomBytes(r, 16384 + r.nextInt(49152)); // a flood of bytes
            case 9 -> new byte[0]; // connects, says nothing, is reset
            case 10 -> { // a HELLO announcing an oversized handshake: the first 96 bytes, then more "message"
                byte[] h = hello(r, qpn);
                ByteBuffer.wrap(h).putInt(Wire.HS_OFF_RESERVED, 0x7FFFFFFF);
                yield concat(h, randomBytes(r, 200));
            }
            default -> { // byte-wise noise in a valid HELLO's fields, MAC left alone
                byte[] h = hello(r, qpn);
                h[4 + r.nextInt(Wire.HS_SIGNED - 4)] = (byte) r.nextInt(256);
                yield h;
            }
        };
    }

    /** A well-formed HELLO for {@code qpn}, signed under a random pair key (nobody's). */
    private static byte[] hello(Random r, int qpn) {
        ByteBuffer b = ByteBuffer.allocate(Wire.HANDSHAKE);
        new HelloFlyweight().wrap(b, 0).write(Wire.KIND_HELLO, qpn, r.nextInt(1 << 24), r.nextLong(), r.nextLong(),
            r.nextInt(Wire.HS_MAX_DEST_RD_ATOMIC + 1)).sign(key(r, qpn), 0, 0, 0, 0);
        return b.array();
    }

    private static HmacSha256 key(Random r, int qpn) {
        HmacSha256 mac = new HmacSha256();
        HelloFlyweight.pairKey(mac, r.nextInt(1 << 24), r.nextLong(), r.nextLong(), qpn, r.nextLong(), r.nextLong(),
            new byte[HmacSha256.MAC_BYTES]);
        return mac;
    }

    /** Valid-looking frame headers (any type, including PING/PONG) with oversized, negative or plausible lengths. */
    private static byte[] frames(Random r, int n) {
        int[] types = {Wire.SEND, Wire.WRITE, Wire.WRITE_IMM, Wire.READ_REQUEST, Wire.FETCH_ADD, Wire.ACK,
            Wire.READ_RESPONSE, Wire.PING, Wire.PONG, r.nextInt(256)};
        ByteBuffer b = ByteBuffer.allocate(n * Wire.HEADER + 64);
        FrameHeaderFlyweight f = new FrameHeaderFlyweight();
        for (int i = 0; i < n; i++) {
            int length = switch (r.nextInt(4)) {
                case 0 -> 0x7FFFFFFF;
                case 1 -> -1 - r.nextInt(1000);
                case 2 -> (int) TcpContext.MAX_MESSAGE + 1;
                default -> r.nextInt(64);
            };
            f.wrap(b, i * Wire.HEADER).type(types[r.nextInt(types.length)]).flags(r.nextInt(4)).psn(r.nextInt(1 << 24))
                .length(length).rkey(r.nextInt()).va(r.nextLong()).operand1(r.nextLong()).ackWord(0);
        }
        byte[] tail = randomBytes(r, 64);
        b.put(n * Wire.HEADER, tail);
        return b.array();
    }

    private static byte[] randomBytes(Random r, int n) {
        byte[] b = new byte[n];
        r.nextBytes(b);
        return b;
    }

    private static byte[] concat(byte[] a, byte[] b) {
        byte[] out = Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, out, a.length, b.length);
        return out;
    }

    // ------------------------------------------------------------------------------------------------ footprint

    /**
     * Waits (at most 10 s) until the process holds at most {@code bound} descriptors and the listener has no
     * connection pending (with {@link Long#MAX_VALUE}: until the count stops falling); returns the last count. A
     * connection the listener closed releases its descriptor at the next select of its progress thread.
     */
    private static long awaitDescriptorsAtMost(long bound, TcpContext listener) throws InterruptedException {
        long deadline = System.nanoTime() + 10_000_000_000L;
        long last = Footprint.openDescriptors();
        int stable = 0;
        while (System.nanoTime() < deadline) {
            Thread.sleep(20);
            long now = Footprint.openDescriptors();
            if (listener.pendingConnections() == 0 && (now <= bound || (bound == Long.MAX_VALUE && now >= last
                && ++stable >= 5))) {
                return now;
            }
            if (now < last) {
                stable = 0;
            }
            last = now;
        }
        return last;
    }
}
