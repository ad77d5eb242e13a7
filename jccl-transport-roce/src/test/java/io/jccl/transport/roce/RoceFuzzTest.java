package io.jccl.transport.roce;

import io.jccl.transport.roce.wire.Icrc;
import io.jccl.transport.roce.wire.RoceOpcode;
import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.Counter;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.WorkCompletion;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * A bounded fuzz run at the port: real requests and responses of a connection are captured, mutated (header and
 * payload bytes, opcodes, lengths) and sent from the real peer's socket with a correct ICRC most of the time, so
 * that they pass the port checks and reach the queue pairs' state machines. Nothing may crash (both contexts still
 * serve a fresh connection afterwards) and nothing may be written outside a registered region (guard zones around
 * every region stay intact). Deterministic seed; about 6,000 datagrams.
 */
class RoceFuzzTest {
    private static final int REGION = 16 << 10;
    private static final int GUARD = 16 << 10;
    private static final byte GUARD_BYTE = (byte) 0x5A;
    private static final AccessFlag[] ALL = {AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ,
        AccessFlag.REMOTE_ATOMIC};

    private final Arena arena = Arena.ofShared();
    private RoceContext contextA;
    private RoceContext contextB;

    @AfterEach
    void close() {
        if (contextA != null) {
            contextA.close();
        }
        if (contextB != null) {
            contextB.close();
        }
        arena.close();
    }

    /** A region in the middle of a larger segment whose edges are guard bytes. */
    private record Guarded(MemorySegment whole, MemoryRegion region) {
        static Guarded register(ProtectionDomain pd, Arena arena) {
            MemorySegment whole = arena.allocate(GUARD + REGION + GUARD, 4096);
            whole.fill(GUARD_BYTE);
            MemoryRegion region = pd.registerMemory(whole.asSlice(GUARD, REGION), ALL);
            return new Guarded(whole, region);
        }

        void assertGuardsIntact(String side) {
            for (long i = 0; i < GUARD; i++) {
                if (whole.get(ValueLayout.JAVA_BYTE, i) != GUARD_BYTE
                    || whole.get(ValueLayout.JAVA_BYTE, GUARD + REGION + i) != GUARD_BYTE) {
                    fail(side + ": a byte outside the registered region changed near offset " + i);
                }
            }
        }
    }

    private record Pair(QueuePair a, QueuePair b, CompletionQueue cqA, CompletionQueue cqB) {
    }

    private static Pair connect(ProtectionDomain pdA, ProtectionDomain pdB, CompletionQueue cqA,
                                CompletionQueue cqB, int psn) {
        QueuePair a = pdA.createQueuePair(QueuePairInitAttributes.of(cqA));
        QueuePair b = pdB.createQueuePair(QueuePairInitAttributes.of(cqB));
        for (QueuePair qp : List.of(a, b)) {
            qp.modify(QueuePairAttributes.toInit(AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ,
                AccessFlag.REMOTE_ATOMIC));
        }
        a.modify(QueuePairAttributes.toReadyToReceive(b.localEndpoint()).rqPsn(psn));
        b.modify(QueuePairAttributes.toReadyToReceive(a.localEndpoint()).rqPsn(psn));
        // a short timer so that fuzzed connections give up quickly; the drain below does not depend on it
        a.modify(QueuePairAttributes.toReadyToSend(psn).timeout(8).retryCount(1).rnrRetry(1));
        b.modify(QueuePairAttributes.toReadyToSend(psn).timeout(8).retryCount(1).rnrRetry(1));
        return new Pair(a, b, cqA, cqB);
    }

    /** Copies every packet a context sends (its ICRC included). */
    private static RoceContext.PacketFilter capture(List<byte[]> into) {
        return (packet, length) -> {
            byte[] copy = new byte[length];
            packet.get(0, copy);
            synchronized (into) {
                into.add(copy);
            }
            return false;
        };
    }

    private static void traffic(Pair pair, Guarded localA, Guarded remoteB, long wrId) {
        MemoryRegion src = localA.region();
        MemoryRegion dst = remoteB.region();
        pair.b().postReceive(new ReceiveWorkRequest().wrId(wrId).local(dst, 8192, 4096));
        pair.a().postSend(new SendWorkRequest().wrId(wrId).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
            .local(src, 0, 3000).remote(dst.address(), dst.rkey()));
        pair.a().postSend(new SendWorkRequest().wrId(wrId).opcode(SendOpcode.SEND_WITH_IMM).immediateData(1)
            .flags(SendFlag.SIGNALED).local(src, 0, 2500));
        pair.a().postSend(new SendWorkRequest().wrId(wrId).opcode(SendOpcode.RDMA_READ).flags(SendFlag.SIGNALED)
            .local(src, 4096, 2500).remote(dst.address(), dst.rkey()));
        pair.a().postSend(new SendWorkRequest().wrId(wrId).opcode(SendOpcode.ATOMIC_FETCH_AND_ADD)
            .flags(SendFlag.SIGNALED).local(src, 12288, 8).remote(dst.address() + 12288, dst.rkey()).atomic(1, 0));
        pair.a().postSend(new SendWorkRequest().wrId(wrId).opcode(SendOpcode.ATOMIC_CMP_AND_SWP)
            .flags(SendFlag.SIGNALED).local(src, 12296, 8).remote(dst.address() + 12296, dst.rkey()).atomic(0, 9));
        WorkCompletion[] wc = WorkCompletion.array(8);
        int done = 0;
        long deadline = System.nanoTime() + 20_000_000_000L;
        while (done < 5) {
            if (System.nanoTime() > deadline) {
                fail("clean traffic did not complete");
            }
            done += pair.cqA().poll(wc, 8, 1_000_000L);
        }
        while (pair.cqB().poll(wc, 8, 0) > 0) {
            // the SEND's receive completion
        }
    }

    /** Mutates a copy of {@code original}: a few bytes, sometimes the opcode, sometimes the length. */
    private static int mutate(byte[] original, ByteBuffer out, SplittableRandom random) {
        out.clear();
        out.put(0, original);
        int length = original.length;
        int mutations = 1 + random.nextInt(4);
        for (int m = 0; m < mutations; m++) {
            switch (random.nextInt(6)) {
                case 0 -> out.put(0, (byte) random.nextInt(0x18)); // another RC opcode (or a reserved one)
                case 1, 2 -> { // a header byte: BTH, RETH, AETH, AtomicETH live in the first 40
                    int at = random.nextInt(Math.min(40, length));
                    out.put(at, (byte) (out.get(at) ^ (1 << random.nextInt(8))));
                }
                case 3 -> { // any byte
                    int at = random.nextInt(length);
                    out.put(at, (byte) random.nextInt(256));
                }
                case 4 -> length = Math.max(16, length - 1 - random.nextInt(Math.max(1, length / 2))); // cut short
                default -> length = Math.min(out.capacity(), length + 4 * (1 + random.nextInt(64))); // grow
            }
        }
        return length;
    }

    @Test
    void shouldSurviveMutatedDatagramsWithoutWritingOutsideRegisteredMemory() throws Exception {
        RoceSettings settings = new RoceSettings("127.0.0.1", 0, 1024).withAckTimeoutFloorUs(0);
        contextA = (RoceContext) RoceProvider.device().open(settings);
        contextB = (RoceContext) RoceProvider.device().open(settings);
        ProtectionDomain pdA = contextA.allocateProtectionDomain();
        ProtectionDomain pdB = contextB.allocateProtectionDomain();
        CompletionQueue cqA = contextA.createCompletionQueue(8192);
        CompletionQueue cqB = contextB.createCompletionQueue(8192);
        Guarded memoryA = Guarded.register(pdA, arena);
        Guarded memoryB = Guarded.register(pdB, arena);
        InetSocketAddress addressA = new InetSocketAddress("127.0.0.1", contextA.localPort());
        InetSocketAddress addressB = new InetSocketAddress("127.0.0.1", contextB.localPort());
        SplittableRandom random = new SplittableRandom(20);
        ByteBuffer out = ByteBuffer.allocateDirect(8192);
        Icrc icrc = new Icrc();
        int sent = 0;
        for (int round = 0; round < 12; round++) {
            Pair pair = connect(pdA, pdB, cqA, cqB, random.nextInt(1 << 24));
            List<byte[]> requests = new ArrayList<>();
            List<byte[]> responses = new ArrayList<>();
            contextA.dropFilter(capture(requests));
            contextB.dropFilter(capture(responses));
            traffic(pair, memoryA, memoryB, round);
            contextA.dropFilter(null);
            contextB.dropFilter(null);
            // requests from A's socket to B, responses from B's socket to A, as the real peers would send them
            for (int i = 0; i < 500; i++) {
                boolean request = random.nextInt(3) != 0 || responses.isEmpty();
                List<byte[]> from = request ? requests : responses;
                byte[] original = from.get(random.nextInt(from.size()));
                int length = mutate(original, out, random);
                RoceContext sender = request ? contextA : contextB;
                RoceContext receiver = request ? contextB : contextA;
                if (random.nextInt(10) != 0) { // mostly a valid ICRC, so the datagram gets past the port
                    int value = icrc.computeIpv4(sender.localIpv4(), receiver.localIpv4(), 0,
                        RoceContext.DONT_FRAGMENT, sender.localPort(), receiver.localPort(), out, 0, length);
                    Icrc.put(out, 0, length, value);
                }
                sender.send(out, length, request ? addressB : addressA);
                sent++;
            }
            pair.a().close();
            pair.b().close();
        }
        // both receive threads are alive and a fresh connection works
        Pair fresh = connect(pdA, pdB, cqA, cqB, 77);
        WorkCompletion[] wc = WorkCompletion.array(64);
        while (cqA.poll(wc, 64, 0) > 0 || cqB.poll(wc, 64, 0) > 0) {
            // completions of the fuzzed connections
        }
        traffic(fresh, memoryA, memoryB, 99);
        assertEquals(0, contextA.receiveFailures() + contextB.receiveFailures(),
            "a datagram made a receive thread throw");
        memoryA.assertGuardsIntact("requester");
        memoryB.assertGuardsIntact("responder");
        long dropped = contextA.counters().get(Counter.PORT_RCV_ERRORS)
            + contextB.counters().get(Counter.PORT_RCV_ERRORS);
        assertTrue(dropped > 0, "no mutated datagram was dropped at the port");
        assertEquals(12 * 500, sent);
        System.out.printf("roce fuzz: %d datagrams, %d dropped at the ports, duplicates %d, out of sequence %d%n",
            sent, dropped, contextB.counters().get(Counter.DUPLICATE_REQUEST),
            contextB.counters().get(Counter.OUT_OF_SEQ_REQUEST));
    }
}
