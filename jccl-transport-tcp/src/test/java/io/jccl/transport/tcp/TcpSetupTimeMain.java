package io.jccl.transport.tcp;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.Context;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.Verbs;
import io.jccl.verbs.WorkCompletion;

import java.util.Arrays;

/**
 * Connection set-up time over loopback: per round, create a QP pair, drive both to RTS, SEND 8 bytes and poll both
 * completions, close both. Prints the first round (the process's first handshake) and the median, p90 and max of
 * the rest. Public API only, so the same class runs against older builds:
 * {@code java -cp "<jars>:target/test-classes" io.jccl.transport.tcp.TcpSetupTimeMain 300}
 * with {@code JCCL_TCP_ADDRESS=127.0.0.1}.
 */
public final class TcpSetupTimeMain {
    private TcpSetupTimeMain() {
    }

    public static void main(String[] args) {
        int rounds = args.length > 0 ? Integer.parseInt(args[0]) : 200;
        AccessFlag[] all = {AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ};
        try (Context ca = Verbs.device("tcp0").open(); Context cb = Verbs.device("tcp0").open()) {
            ProtectionDomain pa = ca.allocateProtectionDomain();
            ProtectionDomain pb = cb.allocateProtectionDomain();
            CompletionQueue qa = ca.createCompletionQueue(64);
            CompletionQueue qb = cb.createCompletionQueue(64);
            MemoryRegion ma = pa.allocateMemory(4096, all);
            MemoryRegion mb = pb.allocateMemory(4096, all);
            WorkCompletion[] wc = WorkCompletion.array(1);
            SendWorkRequest send = new SendWorkRequest();
            ReceiveWorkRequest receive = new ReceiveWorkRequest();
            long[] us = new long[rounds];
            for (int r = 0; r < rounds; r++) {
                long t0 = System.nanoTime();
                QueuePair a = pa.createQueuePair(QueuePairInitAttributes.of(qa));
                QueuePair b = pb.createQueuePair(QueuePairInitAttributes.of(qb));
                a.modify(QueuePairAttributes.toInit(AccessFlag.REMOTE_WRITE));
                b.modify(QueuePairAttributes.toInit(AccessFlag.REMOTE_WRITE));
                a.modify(QueuePairAttributes.toReadyToReceive(b.localEndpoint()));
                b.modify(QueuePairAttributes.toReadyToReceive(a.localEndpoint()));
                a.modify(QueuePairAttributes.toReadyToSend(a.initialPsn()));
                b.modify(QueuePairAttributes.toReadyToSend(b.initialPsn()));
                receive.wrId(r);
                receive.local(mb, 0, 64);
                b.postReceive(receive);
                a.postSend(send.wrId(r).opcode(SendOpcode.SEND).flags(SendFlag.SIGNALED).local(ma, 0, 8));
                await(qa, wc, r);
                await(qb, wc, r);
                us[r] = (System.nanoTime() - t0) / 1000;
                a.close();
                b.close();
            }
            long first = us[0];
            long[] rest = Arrays.copyOfRange(us, 1, rounds);
            Arrays.sort(rest);
            System.out.printf("setup+SEND: first %d us; rounds 2..%d: median %d us, p90 %d us, max %d us%n", first,
                rounds, rest[rest.length / 2], rest[rest.length * 9 / 10], rest[rest.length - 1]);
        }
    }

    private static void await(CompletionQueue cq, WorkCompletion[] wc, int round) {
        long deadline = System.nanoTime() + 10_000_000_000L;
        while (cq.poll(wc, 1, 1_000_000L) == 0) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("round " + round + ": no completion");
            }
        }
        if (!wc[0].isSuccess()) {
            throw new IllegalStateException("round " + round + ": " + wc[0].status());
        }
    }
}
