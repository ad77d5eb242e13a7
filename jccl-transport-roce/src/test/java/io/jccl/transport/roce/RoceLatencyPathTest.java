package io.jccl.transport.roce;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.WorkCompletion;
import org.junit.jupiter.api.Test;

import java.lang.foreign.ValueLayout;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * What one round trip of an 8-byte WRITE ping-pong costs in system calls and datagrams, counted, never timed: the
 * loop of {@code jccl perf write_lat} (each side writes the last byte of the peer's buffer and polls its own, and
 * reaps its signaled WRITE's completion), with one thread driving both ends and the receive threads paused, so every
 * count is the polling threads' own. The floor is the C UDP ping-pong's: one send and one receive that returns data
 * per side and round trip. roce0 reaches it by carrying each side's ACK in the same {@code sendmmsg} as its answer
 * (the ACK hold, {@code RoceContext.holdsAck}).
 */
class RoceLatencyPathTest {
    private static final int ROUNDS = 200;

    @Test
    void shouldSendOneDatagramPerSidePerRoundTripOfAWritePingPong() {
        RoceSettings settings = new RoceSettings("127.0.0.1", 0, 4096);
        try (RoceContext ca = (RoceContext) RoceProvider.device().open(settings);
             RoceContext cb = (RoceContext) RoceProvider.device().open(settings)) {
            // no ACK timer: a host that stalls this thread past it would add a go-back-N's sends to the counts
            LoopbackQueuePairs link = LoopbackQueuePairs.connect(ca, cb, 64, 0, AccessFlag.REMOTE_WRITE);
            ProtectionDomain pa = link.pa();
            ProtectionDomain pb = link.pb();
            CompletionQueue qa = link.qa();
            CompletionQueue qb = link.qb();
            QueuePair a = link.a();
            QueuePair b = link.b();
            MemoryRegion sourceA = pa.allocateMemory(4096, AccessFlag.LOCAL_WRITE);
            MemoryRegion targetA = pa.allocateMemory(4096, AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE);
            MemoryRegion sourceB = pb.allocateMemory(4096, AccessFlag.LOCAL_WRITE);
            MemoryRegion targetB = pb.allocateMemory(4096, AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE);
            SendWorkRequest ping = new SendWorkRequest().opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
                .local(sourceA, 0, 8).remote(targetB.address(), targetB.rkey());
            SendWorkRequest pong = new SendWorkRequest().opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
                .local(sourceB, 0, 8).remote(targetA.address(), targetA.rkey());
            ca.pauseReceiveThreadForTest(true);
            cb.pauseReceiveThreadForTest(true);
            long pauseDeadline = System.nanoTime() + 10_000_000_000L; // a guard against hanging, not a timing check
            while (!ca.receiveThreadPausedNow() || !cb.receiveThreadPausedNow()) { // none left inside a drain
                assertTrue(System.nanoTime() < pauseDeadline, "receive threads did not pause in 10 s");
                Thread.onSpinWait();
            }
            WorkCompletion[] wc = WorkCompletion.array(4);
            int[] outstanding = new int[2];
            long sendsA = 0;
            long sendsB = 0;
            long datagramsA = 0;
            long datagramsB = 0;
            long receivesA = 0;
            long receivesB = 0;
            long slotsA = 0;
            long slotsB = 0;
            for (int round = 0; round <= ROUNDS; round++) {
                if (round == 1) { // the first round sets things up (no ACK held yet): count from the second on
                    sendsA = ca.sendSystemCalls();
                    sendsB = cb.sendSystemCalls();
                    datagramsA = ca.sendDatagrams();
                    datagramsB = cb.sendDatagrams();
                    receivesA = ca.receiveSystemCalls();
                    receivesB = cb.receiveSystemCalls();
                    slotsA = ca.receiveSlotsAsked();
                    slotsB = cb.receiveSlotsAsked();
                }
                byte value = (byte) (round % 127 + 1);
                sourceA.segment().set(ValueLayout.JAVA_BYTE, 7, value);
                a.postSend(ping.wrId(round));
                outstanding[0]++;
                // B waits for A's byte (its own last WRITE completes on the way: A's ACK came with the ping)
                awaitByte(targetB, value, qb, wc, outstanding, 1);
                sourceB.segment().set(ValueLayout.JAVA_BYTE, 7, value);
                b.postSend(pong.wrId(round));
                outstanding[1]++;
                // A waits for B's byte and for its own WRITE's completion, as write_lat's client does
                awaitByte(targetA, value, qa, wc, outstanding, 0);
                while (outstanding[0] > 0) {
                    reap(qa, wc, outstanding, 0);
                }
            }
            long rounds = ROUNDS;
            String counts = "per " + rounds + " round trips: sendmmsg A " + (ca.sendSystemCalls() - sendsA) + ", B "
                + (cb.sendSystemCalls() - sendsB) + "; datagrams A " + (ca.sendDatagrams() - datagramsA) + ", B "
                + (cb.sendDatagrams() - datagramsB) + "; recvmmsg with data A " + (ca.receiveSystemCalls() - receivesA)
                + ", B " + (cb.receiveSystemCalls() - receivesB) + "; slots asked A " + (ca.receiveSlotsAsked() - slotsA)
                + ", B " + (cb.receiveSlotsAsked() - slotsB);
            System.out.println("RoceLatencyPathTest: " + counts);
            // one sendmmsg per side and round trip: the answer carries the ACK of what it answers
            assertEquals(rounds, ca.sendSystemCalls() - sendsA, counts);
            assertEquals(rounds, cb.sendSystemCalls() - sendsB, counts);
            assertEquals(rounds, ca.receiveSystemCalls() - receivesA, counts);
            assertEquals(rounds, cb.receiveSystemCalls() - receivesB, counts);
            if (ca.gro() && cb.gro()) {
                // each of those asked for one datagram: the answer and its ACK are one small GRO datagram
                assertEquals(rounds, ca.receiveSlotsAsked() - slotsA, counts);
                assertEquals(rounds, cb.receiveSlotsAsked() - slotsB, counts);
            }
            if (ca.gso() && cb.gso() && ca.gro() && cb.gro()) {
                // and one datagram: the WRITE and the ACK as one GSO send
                assertEquals(rounds, ca.sendDatagrams() - datagramsA, counts);
                assertEquals(rounds, cb.sendDatagrams() - datagramsB, counts);
            }
            assertEquals(0, ca.receiveFailures() + cb.receiveFailures());
            ca.pauseReceiveThreadForTest(false);
            cb.pauseReceiveThreadForTest(false);
            while (outstanding[1] > 0) { // B's last WRITE: its ACK is held by A until A's next poll sends it
                reap(qb, wc, outstanding, 1);
                reap(qa, wc, outstanding, 0);
            }
            assertTrue(targetA.segment().get(ValueLayout.JAVA_BYTE, 7) == (byte) (ROUNDS % 127 + 1));
        }
    }

    /** Polls {@code cq} until byte 7 of {@code target} is {@code value}, counting send completions of {@code side}. */
    private static void awaitByte(MemoryRegion target, byte value, CompletionQueue cq, WorkCompletion[] wc,
                                  int[] outstanding, int side) {
        long deadline = System.nanoTime() + 10_000_000_000L;
        while (target.segment().get(ValueLayout.JAVA_BYTE, 7) != value) {
            reap(cq, wc, outstanding, side);
            assertTrue(System.nanoTime() < deadline, "no answer in 10 s");
        }
    }

    private static void reap(CompletionQueue cq, WorkCompletion[] wc, int[] outstanding, int side) {
        int n = cq.poll(wc, wc.length);
        for (int i = 0; i < n; i++) {
            assertTrue(wc[i].isSuccess(), wc[i]::toString);
            outstanding[side]--;
        }
    }
}
