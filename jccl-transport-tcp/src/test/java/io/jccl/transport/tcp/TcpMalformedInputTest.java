package io.jccl.transport.tcp;

import io.jccl.transport.tcp.TcpTestSupport.Side;
import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.Context;
import io.jccl.verbs.Counter;
import io.jccl.verbs.Endpoint;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.QueuePairState;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Random;
import java.util.function.Function;

import static io.jccl.transport.tcp.TcpTestSupport.ALL;
import static io.jccl.transport.tcp.TcpTestSupport.pollSuccess;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Feeds hostile input to a live tcp context through raw sockets: garbage after a valid handshake, forged keys,
 * impossible lengths, wrong PSNs, truncated frames, randomly mutated valid frames, and connections that cannot
 * authenticate. Nothing may escape, no byte outside the registered region may change, errors are counted, the
 * attacked QP ends in ERR, and the context keeps serving its other QPs.
 */
class TcpMalformedInputTest {
    private static final int GUARD = 4096;
    private static final byte GUARD_BYTE = (byte) 0xA5;

    private Context victim;
    private Context friend;
    private Arena arena;
    private MemorySegment memory;
    private MemoryRegion region;
    private Side servingA;
    private Side servingB;

    @BeforeEach
    void setUp() {
        victim = TcpTestSupport.open();
        friend = TcpTestSupport.open();
        arena = Arena.ofShared();
        memory = arena.allocate(3 * GUARD, 4096);
        memory.fill(GUARD_BYTE);
        servingA = Side.create(victim);
        servingB = Side.create(friend);
        TcpTestSupport.connect(servingA.qp(), servingB.qp());
        // Only the middle page is registered; the pages around it are guard bytes that must never change.
        region = servingA.pd().registerMemory(memory.asSlice(GUARD, GUARD), ALL);
    }

    @AfterEach
    void tearDown() {
        victim.close();
        friend.close();
        arena.close();
    }

    /** A victim QP at RTR waiting for a peer we impersonate with a raw socket. */
    private final class Victim implements AutoCloseable {
        final QueuePair qp;
        final int fakeQpn;
        final int fakePsn = 0x123456;
        final long fakeHigh = 0x1111222233334444L;
        final long fakeLow = 0x5555666677778888L;
        final EndpointAddress address;

        Victim() {
            this(servingA);
        }

        Victim(Side side) {
            QueuePair created;
            do {
                created = side.pd().createQueuePair(QueuePairInitAttributes.of(side.cq()));
            } while (created.queuePairNumber() == 0xFFFFFF);
            qp = created;
            fakeQpn = qp.queuePairNumber() + 1; // larger QPN: the fake peer is the side that connects
            qp.modify(QueuePairAttributes.toInit(AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ,
                AccessFlag.REMOTE_ATOMIC));
            String fakeAddress = "127.0.0.1:9/" + HexFormat.of().toHexDigits(fakeHigh)
                + HexFormat.of().toHexDigits(fakeLow);
            qp.modify(QueuePairAttributes.toReadyToReceive(new Endpoint("tcp", "tcp0", fakeQpn, fakePsn,
                fakeAddress)));
            address = EndpointAddress.parse(qp.localEndpoint().address());
        }

        /** The connecting side of the handshake with the fake peer's and the victim's records. */
        TcpTestSupport.RawConnector rawPeer(long peerLowXor) {
            return new TcpTestSupport.RawConnector(fakeQpn, fakeHigh, fakeLow ^ peerLowXor, qp.queuePairNumber(),
                address.secretHigh(), address.secretLow());
        }

        /** Connects and completes the handshake (HELLO, CHALLENGE, PROOF) with the pair key. */
        Socket connect() throws IOException {
            return rawPeer(0).connect(address.socketAddress());
        }

        byte[] frame(int type, int psn, int length, int rkey, long va, long op1, int payload) {
            ByteBuffer b = ByteBuffer.allocate(Wire.HEADER + payload);
            b.put(0, (byte) type).putInt(Wire.OFF_PSN, psn).putInt(Wire.OFF_LENGTH, length)
                .putInt(Wire.OFF_RKEY, rkey).putLong(Wire.OFF_VA, va).putLong(Wire.OFF_OPERAND1, op1);
            for (int i = 0; i < payload; i++) {
                b.put(Wire.HEADER + i, (byte) 0x77);
            }
            return b.array();
        }

        @Override
        public void close() {
            qp.close();
        }
    }

    private long errors() {
        var c = victim.counters();
        return c.get(Counter.PORT_RCV_ERRORS) + c.get(Counter.REMOTE_ACCESS_ERRORS);
    }

    private void assertGuardsIntact() {
        for (int i = 0; i < GUARD; i++) {
            assertEquals(GUARD_BYTE, memory.get(ValueLayout.JAVA_BYTE, i), "guard byte before the region");
            assertEquals(GUARD_BYTE, memory.get(ValueLayout.JAVA_BYTE, 2L * GUARD + i), "guard byte after it");
        }
    }

    private void assertStillServing() {
        MemoryRegion local = servingB.pd().allocateMemory(64, ALL);
        local.segment().fill((byte) 3);
        servingB.qp().postSend(new SendWorkRequest().wrId(1).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
            .remote(region.address() + 8, region.rkey()).local(local, 0, 64));
        pollSuccess(servingB.cq());
        assertEquals(3, region.segment().get(ValueLayout.JAVA_BYTE, 8 + 63));
        local.close();
        assertEquals(QueuePairState.READY_TO_SEND, servingA.qp().state());
    }

    /** Sends {@code bytes} after a valid handshake and expects the victim QP to fail on them. */
    private void attack(String what, Function<Victim, byte[]> garbage, boolean trailer) throws IOException {
        long before = errors();
        try (Victim v = new Victim(); Socket socket = v.connect()) {
            OutputStream out = socket.getOutputStream();
            try {
                out.write(garbage.apply(v));
                // Whatever the bytes meant, a header with an unknown opcode afterwards must end it.
                if (trailer) {
                    out.write(v.frame(0xEE, 0, 0, 0, 0, 0, 0));
                }
                out.flush();
                // A mutation may leave the victim legitimately waiting for more payload: end the stream too.
                socket.shutdownOutput();
            } catch (IOException closedOnUs) {
                // the victim may close first: fine
            }
            TcpTestSupport.awaitState(v.qp, QueuePairState.ERROR);
            drain(socket.getInputStream());
        }
        assertTrue(errors() > before, what + ": no error counted");
        assertGuardsIntact();
    }

    /**
     * A READ_LIST whose header says {@code count} READs and carries (and has the length of) {@code entries} entries
     * of 64 bytes each, the first at {@code va} and each next 64 bytes further.
     */
    private byte[] readList(Victim v, int count, int entries, long va) {
        byte[] f = v.frame(Wire.READ_LIST, v.fakePsn, entries * Wire.LIST_ENTRY, 0, 0, 0,
            entries * Wire.LIST_ENTRY);
        ByteBuffer b = ByteBuffer.wrap(f);
        b.putInt(Wire.OFF_IMM, count);
        for (int k = 0; k < entries; k++) {
            int at = Wire.HEADER + k * Wire.LIST_ENTRY;
            b.putInt(at + Wire.LIST_OFF_RKEY, region.rkey()).putInt(at + Wire.LIST_OFF_LENGTH, 64)
                .putLong(at + Wire.LIST_OFF_VA, va + 64L * k);
        }
        return f;
    }

    private static void drain(InputStream in) {
        try {
            in.readNBytes(1 << 20);
        } catch (IOException ignored) {
            // reset by the victim: fine
        }
    }

    @Test
    void shouldContainGarbageFromAnAuthenticatedPeer() throws IOException {
        Random random = new Random(42);
        List<Object[]> cases = new ArrayList<>();
        cases.add(new Object[] {"random bytes", (Function<Victim, byte[]>) v -> {
            byte[] b = new byte[200 + random.nextInt(300)];
            random.nextBytes(b);
            b[0] = (byte) 0xF0; // not a valid type, whatever else follows
            return b;
        }});
        cases.add(new Object[] {"unknown opcode", (Function<Victim, byte[]>) v -> v.frame(0x42,
            v.fakePsn, 0, 0, 0, 0, 0)});
        cases.add(new Object[] {"forged rkey", (Function<Victim, byte[]>) v -> v.frame(Wire.WRITE,
            v.fakePsn, 64, region.rkey() ^ 0x5555, region.address(), 0, 64)});
        cases.add(new Object[] {"write into the guard page", (Function<Victim, byte[]>) v -> v.frame(
            Wire.WRITE, v.fakePsn, 64, region.rkey(), region.address() - 64, 0, 64)});
        cases.add(new Object[] {"write past the end", (Function<Victim, byte[]>) v -> v.frame(Wire.WRITE,
            v.fakePsn, 128, region.rkey(), region.address() + GUARD - 64, 0, 128)});
        cases.add(new Object[] {"wrapping address", (Function<Victim, byte[]>) v -> v.frame(Wire.WRITE,
            v.fakePsn, 64, region.rkey(), -32L, 0, 64)});
        cases.add(new Object[] {"oversized length", (Function<Victim, byte[]>) v -> v.frame(Wire.WRITE,
            v.fakePsn, 0x7FFFFFFF, region.rkey(), region.address(), 0, 0)});
        cases.add(new Object[] {"negative length", (Function<Victim, byte[]>) v -> v.frame(Wire.SEND,
            v.fakePsn, -1, 0, 0, 0, 0)});
        cases.add(new Object[] {"read beyond the region", (Function<Victim, byte[]>) v -> v.frame(
            Wire.READ_REQUEST, v.fakePsn, GUARD + 1, region.rkey(), region.address(), 0, 0)});
        cases.add(new Object[] {"atomic with a 16-byte length", (Function<Victim, byte[]>) v -> v.frame(
            Wire.FETCH_ADD, v.fakePsn, 16, region.rkey(), region.address(), 1, 0)});
        cases.add(new Object[] {"atomic in the guard page", (Function<Victim, byte[]>) v -> v.frame(
            Wire.FETCH_ADD, v.fakePsn, 8, region.rkey(), region.address() + GUARD, 1, 0)});
        cases.add(new Object[] {"wrong PSN", (Function<Victim, byte[]>) v -> v.frame(Wire.WRITE,
            v.fakePsn + 5, 8, region.rkey(), region.address(), 0, 8)});
        cases.add(new Object[] {"unsolicited ACK", (Function<Victim, byte[]>) v -> v.frame(Wire.ACK, 77, 0,
            0, 0, 0, 0)});
        cases.add(new Object[] {"unsolicited READ response", (Function<Victim, byte[]>) v -> v.frame(
            Wire.READ_RESPONSE, 0, 1 << 20, 0, 0, 0, 0)});
        cases.add(new Object[] {"reserved bits set", (Function<Victim, byte[]>) v -> {
            byte[] f = v.frame(Wire.WRITE, v.fakePsn, 0, 0, 0, 0, 0);
            f[Wire.OFF_RESERVED] = 1;
            return f;
        }});
        // READ lists: a list of one, a count that disagrees with the length, a listed READ of the guard page (the
        // READ before it is answered, that one NAKed), and a list response nobody asked for.
        cases.add(new Object[] {"READ_LIST of one READ", (Function<Victim, byte[]>) v -> readList(v, 1, 1,
            region.address())});
        cases.add(new Object[] {"READ_LIST count and length disagree", (Function<Victim, byte[]>) v -> readList(v,
            3, 2, region.address())});
        cases.add(new Object[] {"READ_LIST into the guard page", (Function<Victim, byte[]>) v -> readList(v, 2, 2,
            region.address() + GUARD - 64)});
        cases.add(new Object[] {"unsolicited READ_RESPONSE_LIST", (Function<Victim, byte[]>) v -> {
            byte[] f = v.frame(Wire.READ_RESPONSE_LIST, 0, 128, 0, 0, 0, 128);
            ByteBuffer.wrap(f).putInt(Wire.OFF_IMM, 2);
            return f;
        }});
        for (Object[] c : cases) {
            @SuppressWarnings("unchecked")
            Function<Victim, byte[]> g = (Function<Victim, byte[]>) c[1];
            attack((String) c[0], g, true);
        }
        // Truncations: half a header, or a payload cut short, then the stream ends.
        attack("truncated header", v -> java.util.Arrays.copyOf(v.frame(
            Wire.WRITE, v.fakePsn, 8, region.rkey(), region.address(), 0, 8), 20), false);
        attack("truncated payload", v -> java.util.Arrays.copyOf(v.frame(
            Wire.WRITE, v.fakePsn, 1000, region.rkey(), region.address(), 0, 1000), Wire.HEADER + 10),
            false);
        // 6 access violations were NAKed; the other 11 crafted inputs were protocol errors.
        assertTrue(victim.counters().get(Counter.REMOTE_ACCESS_ERRORS) >= 6, victim.counters().toString());
        assertTrue(victim.counters().get(Counter.PORT_RCV_ERRORS) >= 11, victim.counters().toString());
        // Random mutations of valid frames.
        for (int round = 0; round < 25; round++) {
            int r = round;
            attack("mutation " + round, v -> {
                int[] types = {Wire.WRITE, Wire.READ_REQUEST, Wire.FETCH_ADD, Wire.COMPARE_SWAP, Wire.SEND};
                int type = types[r % types.length];
                int len = type == Wire.WRITE || type == Wire.READ_REQUEST ? 64 : type == Wire.SEND ? 16 : 8;
                byte[] f = v.frame(type, v.fakePsn, len, region.rkey(),
                    region.address() + 128, 1, Wire.requestCarriesPayload(type) ? len : 0);
                for (int m = 0; m < 1 + random.nextInt(3); m++) {
                    f[random.nextInt(Wire.HEADER)] ^= (byte) (1 + random.nextInt(255));
                }
                return f;
            }, true);
        }
        assertStillServing();
    }

    /**
     * PING and PONG (TcpLiveness): a PING is answered with a PONG echoing its sequence number by the victim's engine,
     * with nothing posted and no application involved, and consecutive PINGs are answered cumulatively; a PING out
     * of sequence, a PONG for no outstanding PING, and either with a length, a payload or another non-zero field are
     * protocol errors like any other malformed frame. The wire values are written out as the documented table has
     * them (PING 0x21, PONG 0x22).
     */
    @Test
    void shouldAnswerPingsAndRefuseMalformedProbes() throws IOException {
        int ping = 0x21;
        int pong = 0x22;
        try (Victim v = new Victim(); Socket socket = v.connect()) {
            OutputStream out = socket.getOutputStream();
            InputStream in = socket.getInputStream();
            out.write(v.frame(ping, 1, 0, 0, 0, 0, 0));
            assertPong(in.readNBytes(Wire.HEADER), pong, 1);
            out.write(v.frame(ping, 2, 0, 0, 0, 0, 0));
            out.write(v.frame(ping, 3, 0, 0, 0, 0, 0));
            byte[] answer = in.readNBytes(Wire.HEADER);
            if (ByteBuffer.wrap(answer).getInt(Wire.OFF_PSN) == 2) {
                assertPong(answer, pong, 2);
                answer = in.readNBytes(Wire.HEADER); // not coalesced: a PONG each
            }
            assertPong(answer, pong, 3);
            assertEquals(QueuePairState.READY_TO_RECEIVE, v.qp.state());
        }
        long before = victim.counters().get(Counter.PORT_RCV_ERRORS);
        attack("PING out of sequence", v -> v.frame(ping, 2, 0, 0, 0, 0, 0), false);
        attack("PONG for no PING", v -> v.frame(pong, 1, 0, 0, 0, 0, 0), false);
        attack("PING with a payload", v -> v.frame(ping, 1, 8, 0, 0, 0, 8), false);
        attack("PING with a non-zero field", v -> v.frame(ping, 1, 0, 5, 0, 0, 0), false);
        attack("PONG with a non-zero field", v -> v.frame(pong, 0, 0, 0, 0, 7, 0), false);
        assertTrue(victim.counters().get(Counter.PORT_RCV_ERRORS) >= before + 5, victim.counters().toString());
        assertStillServing();
    }

    private static void assertPong(byte[] frame, int pong, int sequence) {
        assertEquals(Wire.HEADER, frame.length, "no PONG");
        ByteBuffer b = ByteBuffer.wrap(frame);
        assertEquals(pong, b.get(Wire.OFF_TYPE) & 0xFF, "type");
        assertEquals(sequence, b.getInt(Wire.OFF_PSN), "echoed sequence number");
        for (int i = 0; i < Wire.HEADER; i++) {
            if (i != Wire.OFF_TYPE && (i < Wire.OFF_PSN || i >= Wire.OFF_PSN + 4)) {
                assertEquals(0, frame[i], "PONG byte " + i);
            }
        }
    }

    @Test
    void shouldRefuseConnectionsThatCannotAuthenticate() throws IOException {
        try (Victim v = new Victim()) {
            long before = victim.counters().get(Counter.PORT_RCV_ERRORS);
            Random random = new Random(7);
            TcpTestSupport.RawConnector peer = v.rawPeer(0);
            // Each case: what the client sends first, and whether the victim answers with a CHALLENGE before it
            // closes (after a valid HELLO: the PROOF is what fails).
            List<Object[]> cases = new ArrayList<>();
            TcpTestSupport.RawConnector wrongVictimSecret = new TcpTestSupport.RawConnector(v.fakeQpn, v.fakeHigh,
                v.fakeLow, v.qp.queuePairNumber(), v.address.secretHigh() ^ 1, v.address.secretLow());
            cases.add(new Object[] {"HELLO signed with a key from a wrong victim secret",
                wrongVictimSecret.hello(1, 2), false});
            cases.add(new Object[] {"HELLO of a peer that knows the victim's secret but not the connected peer's",
                v.rawPeer(1).hello(3, 4), false});
            byte[] otherSource = peer.hello(5, 6);
            ByteBuffer.wrap(otherSource).putInt(Wire.HS_OFF_SOURCE_QPN, v.fakeQpn ^ 0x10);
            cases.add(new Object[] {"HELLO from another source QPN", otherSource, false});
            byte[] unknown = peer.hello(7, 8);
            ByteBuffer.wrap(unknown).putInt(Wire.HS_OFF_DEST_QPN, v.qp.queuePairNumber() ^ 0x10);
            cases.add(new Object[] {"HELLO for an unknown QP number", unknown, false});
            byte[] version2 = peer.hello(9, 10);
            version2[Wire.HS_OFF_VERSION] = 2;
            cases.add(new Object[] {"version 2", version2, false});
            byte[] noise = new byte[Wire.HANDSHAKE];
            random.nextBytes(noise);
            cases.add(new Object[] {"noise", noise, false});
            cases.add(new Object[] {"truncated, then the stream ends", new byte[10], false});
            // A valid HELLO (nonce 11, 12), then a PROOF that is not for this challenge: a CHALLENGE, then closed.
            byte[] wrongProof = new byte[2 * Wire.HANDSHAKE];
            System.arraycopy(peer.hello(11, 12), 0, wrongProof, 0, Wire.HANDSHAKE);
            byte[] staleChallenge = new byte[Wire.HANDSHAKE];
            ByteBuffer.wrap(staleChallenge).putInt(Wire.MAGIC).put((byte) Wire.VERSION)
                .put((byte) Wire.KIND_CHALLENGE).putShort((short) 0).putInt(v.fakeQpn)
                .putInt(v.qp.queuePairNumber()).putLong(13).putLong(14);
            System.arraycopy(peer.proof(staleChallenge, 11, 12), 0, wrongProof, Wire.HANDSHAKE, Wire.HANDSHAKE);
            cases.add(new Object[] {"valid HELLO, PROOF for another challenge", wrongProof, true});
            // The same valid HELLO again (a replay): refused before any challenge.
            cases.add(new Object[] {"replayed HELLO", peer.hello(11, 12), false});
            int expected = 0;
            for (Object[] c : cases) {
                byte[] h = (byte[]) c[1];
                try (Socket socket = new Socket()) {
                    socket.connect(new InetSocketAddress(v.address.socketAddress().getAddress(),
                        v.address.socketAddress().getPort()), 5000);
                    socket.setSoTimeout(5000);
                    socket.getOutputStream().write(h);
                    if (h.length < Wire.HANDSHAKE) {
                        socket.shutdownOutput();
                    }
                    if ((Boolean) c[2]) {
                        byte[] challenge = socket.getInputStream().readNBytes(Wire.HANDSHAKE);
                        assertTrue(peer.challengeValid(challenge, 11, 12), c[0] + ": CHALLENGE");
                    }
                    // then the victim closes without a word
                    assertEquals(-1, readOrReset(socket.getInputStream()), (String) c[0]);
                }
                expected++;
                long want = before + expected;
                TcpTestSupport.awaitTrue(c[0] + ": port_rcv_errors >= " + want,
                    () -> victim.counters().get(Counter.PORT_RCV_ERRORS) >= want);
            }
            // Reflection: a valid HELLO, then a PROOF carrying the MAC of the victim's own CHALLENGE.
            try (Socket socket = new Socket()) {
                socket.connect(v.address.socketAddress(), 5000);
                socket.setSoTimeout(5000);
                socket.getOutputStream().write(peer.hello(21, 22));
                byte[] challenge = socket.getInputStream().readNBytes(Wire.HANDSHAKE);
                assertTrue(peer.challengeValid(challenge, 21, 22), "CHALLENGE");
                byte[] reflected = peer.proof(challenge, 21, 22);
                System.arraycopy(challenge, Wire.HS_OFF_MAC, reflected, Wire.HS_OFF_MAC, HmacSha256.MAC_BYTES);
                socket.getOutputStream().write(reflected);
                assertEquals(-1, readOrReset(socket.getInputStream()), "reflected MAC");
            }
            long want = before + expected + 1;
            TcpTestSupport.awaitTrue("reflection: port_rcv_errors >= " + want,
                () -> victim.counters().get(Counter.PORT_RCV_ERRORS) >= want);
            // Nobody authenticated, so nothing happened to the QP: it still waits for its real peer.
            assertNotEquals(QueuePairState.ERROR, v.qp.state());
            assertGuardsIntact();
            // And the real peer still gets in.
            try (Socket socket = v.connect()) {
                socket.getOutputStream().write(v.frame(Wire.WRITE, v.fakePsn, 8, region.rkey(), region.address(),
                    0, 8));
                byte[] ack = socket.getInputStream().readNBytes(Wire.HEADER);
                assertEquals(Wire.ACK, ack[0]);
            }
        }
        assertStillServing();
    }

    /** One byte, or -1 at the end of the stream or when the peer reset the connection. */
    private static int readOrReset(InputStream in) {
        try {
            return in.read();
        } catch (IOException reset) {
            return -1;
        }
    }

    @Test
    void shouldGiveUpOnAPeerThatStopsAnswering() throws IOException {
        try (Context impatient = TcpTestSupport.open()) {
            Side side = Side.create(impatient);
            try (Victim v = new Victim(side); Socket socket = v.connect()) {
                // The smallest limit: 4.096 us x 2 x 2 is raised to TcpLiveness.MIN_LIMIT_NS (1 s).
                v.qp.modify(QueuePairAttributes.toReadyToSend(v.qp.initialPsn()).timeout(1).retryCount(1));
                MemoryRegion local = side.pd().allocateMemory(64, ALL);
                v.qp.postSend(new SendWorkRequest().wrId(7).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
                    .remote(0x1000, 1).local(local, 0, 64));
                // The fake peer reads the request and never answers, but keeps the connection open.
                byte[] request = socket.getInputStream().readNBytes(Wire.HEADER + 64);
                assertEquals(Wire.WRITE, request[0]);
                var wc = TcpTestSupport.poll(side.cq());
                assertEquals(io.jccl.verbs.WorkCompletionStatus.RETRY_EXC_ERR, wc.status());
                assertEquals(7, wc.wrId());
                assertTrue(impatient.counters().get(Counter.LOCAL_ACK_TIMEOUT_ERR) >= 1);
            }
        }
    }
}
