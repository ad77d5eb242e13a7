package io.jccl.transport.tcp;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.Context;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.QueuePairState;
import io.jccl.verbs.WorkCompletion;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.util.concurrent.ThreadLocalRandom;
import java.util.function.BooleanSupplier;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/** Shared setup for the tcp tests: loopback contexts, connected QP pairs, polling with deadlines. */
final class TcpTestSupport {
    static final AccessFlag[] ALL = {AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ,
        AccessFlag.REMOTE_ATOMIC};

    private TcpTestSupport() {
    }

    static TcpSettings loopback() {
        return TcpSettings.fromConfig().withAddress("127.0.0.1");
    }

    static Context open() {
        return TcpProvider.device().open(loopback());
    }

    /** One side of a connection: context objects, a QP and its CQ. */
    record Side(Context context, ProtectionDomain pd, CompletionQueue cq, QueuePair qp) {
        static Side create(Context context, QueuePairInitAttributes attributes) {
            ProtectionDomain pd = context.allocateProtectionDomain();
            CompletionQueue cq = context.createCompletionQueue(4096);
            QueuePair qp = pd.createQueuePair(attributes == null ? QueuePairInitAttributes.of(cq)
                : new QueuePairInitAttributes(cq, cq, attributes.maxSendWorkRequests(),
                attributes.maxReceiveWorkRequests(), attributes.maxSendSge(), attributes.maxReceiveSge(),
                attributes.maxInlineData(), attributes.signalAll()));
            qp.modify(QueuePairAttributes.toInit(AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ,
                AccessFlag.REMOTE_ATOMIC));
            return new Side(context, pd, cq, qp);
        }

        static Side create(Context context) {
            return create(context, null);
        }
    }

    /** Connects two QPs in INIT to each other and drives both to RTS. */
    static void connect(QueuePair a, QueuePair b) {
        a.modify(QueuePairAttributes.toReadyToReceive(b.localEndpoint()));
        b.modify(QueuePairAttributes.toReadyToReceive(a.localEndpoint()));
        a.modify(QueuePairAttributes.toReadyToSend(a.initialPsn()));
        b.modify(QueuePairAttributes.toReadyToSend(b.initialPsn()));
    }

    /** Polls until one completion arrives (10 s deadline). */
    static WorkCompletion poll(CompletionQueue cq) {
        WorkCompletion[] wc = WorkCompletion.array(1);
        long deadline = System.nanoTime() + 10_000_000_000L;
        while (System.nanoTime() < deadline) {
            if (cq.poll(wc, 1, 1_000_000L) == 1) {
                return wc[0];
            }
        }
        fail("no completion within 10 s");
        return null;
    }

    static WorkCompletion pollSuccess(CompletionQueue cq) {
        WorkCompletion wc = poll(cq);
        assertTrue(wc.isSuccess(), "completion " + wc.status() + " for wr " + wc.wrId());
        return wc;
    }

    static void awaitTrue(String what, BooleanSupplier condition) {
        long deadline = System.nanoTime() + 10_000_000_000L;
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                fail("timed out waiting for " + what);
            }
            try {
                Thread.sleep(1);
            } catch (InterruptedException e) {
                throw new AssertionError(e);
            }
        }
    }

    static void awaitState(QueuePair qp, QueuePairState state) {
        awaitTrue(qp + " to reach " + state, () -> qp.state() == state);
        assertEquals(state, qp.state());
    }

    /**
     * The connecting side of the handshake (version 3) over a raw socket, for tests that play a peer with the
     * endpoint records a real peer has: its own (QPN, secret) and the acceptor's.
     */
    static final class RawConnector {
        final int connectorQpn;
        final int acceptorQpn;
        final HmacSha256 key = new HmacSha256();

        RawConnector(int connectorQpn, long connectorHigh, long connectorLow, int acceptorQpn, long acceptorHigh,
                     long acceptorLow) {
            this.connectorQpn = connectorQpn;
            this.acceptorQpn = acceptorQpn;
            HelloFlyweight.pairKey(key, connectorQpn, connectorHigh, connectorLow, acceptorQpn, acceptorHigh,
                acceptorLow, new byte[HmacSha256.MAC_BYTES]);
        }

        /** A HELLO with nonce {@code nC}, signed with the pair key. */
        byte[] hello(long nCHigh, long nCLow) {
            ByteBuffer b = ByteBuffer.allocate(Wire.HANDSHAKE);
            new HelloFlyweight().wrap(b, 0).write(Wire.KIND_HELLO, acceptorQpn, connectorQpn, nCHigh, nCLow, 16)
                .sign(key, 0, 0, 0, 0);
            return b.array();
        }

        /** Whether {@code challenge} is the acceptor's valid answer to a HELLO with nonce {@code nC}. */
        boolean challengeValid(byte[] challenge, long nCHigh, long nCLow) {
            HelloFlyweight h = new HelloFlyweight().wrap(ByteBuffer.wrap(challenge), 0);
            return challenge.length == Wire.HANDSHAKE && h.wellFormed(Wire.KIND_CHALLENGE)
                && h.destinationQpn() == connectorQpn && h.sourceQpn() == acceptorQpn
                && h.macMatches(key, nCHigh, nCLow, 0, 0);
        }

        /** The PROOF answering {@code challenge} for a HELLO with nonce {@code nC}. */
        byte[] proof(byte[] challenge, long nCHigh, long nCLow) {
            HelloFlyweight c = new HelloFlyweight().wrap(ByteBuffer.wrap(challenge), 0);
            ByteBuffer b = ByteBuffer.allocate(Wire.HANDSHAKE);
            new HelloFlyweight().wrap(b, 0).write(Wire.KIND_PROOF, acceptorQpn, connectorQpn, 0, 0, 0)
                .sign(key, nCHigh, nCLow, c.nonceHigh(), c.nonceLow());
            return b.array();
        }

        /** Connects to {@code listener} and completes the handshake; the acceptor's CHALLENGE must be valid. */
        Socket connect(InetSocketAddress listener) throws IOException {
            Socket socket = new Socket();
            socket.connect(listener, 5000);
            socket.setSoTimeout(5000);
            long nCHigh = ThreadLocalRandom.current().nextLong();
            long nCLow = ThreadLocalRandom.current().nextLong();
            socket.getOutputStream().write(hello(nCHigh, nCLow));
            byte[] challenge = socket.getInputStream().readNBytes(Wire.HANDSHAKE);
            assertTrue(challengeValid(challenge, nCHigh, nCLow), "CHALLENGE");
            socket.getOutputStream().write(proof(challenge, nCHigh, nCLow));
            return socket;
        }
    }
}
