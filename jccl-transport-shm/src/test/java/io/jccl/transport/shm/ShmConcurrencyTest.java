package io.jccl.transport.shm;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.QueuePairState;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.WorkCompletion;
import io.jccl.verbs.WorkCompletionStatus;
import org.junit.jupiter.api.Test;

import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static io.jccl.transport.shm.ShmTestSupport.ALL_REMOTE;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Races: atomics from several requesters and the owner's CPU; a receiver failing while a sender streams. */
class ShmConcurrencyTest {
    private static final VarHandle LONG = ValueLayout.JAVA_LONG.varHandle();

    @Test
    void shouldKeepAtomicsExactAgainstOtherRequestersAndTheOwnersCpu() throws Exception {
        int perThread = 20_000;
        // One target context with two QPs (same PD); two requester contexts, each connected to one of them.
        ShmTestSupport.Side target = new ShmTestSupport.Side();
        ShmTestSupport.Side requester1 = new ShmTestSupport.Side();
        ShmTestSupport.Side requester2 = new ShmTestSupport.Side();
        try {
            ShmTestSupport.connect(requester1, target);
            QueuePair targetQp2 = target.pd.createQueuePair(QueuePairInitAttributes.of(target.cq));
            ShmTestSupport.connect(targetQp2, requester2.qp.localEndpoint(), 7, AccessFlag.REMOTE_ATOMIC);
            ShmTestSupport.connect(requester2.qp, targetQp2.localEndpoint(), 7);
            MemoryRegion word = target.pd.allocateMemory(64, ALL_REMOTE);
            List<CompletableFuture<Void>> workers = List.of(
                CompletableFuture.runAsync(() -> fetchAndAdd(requester1, word, perThread)),
                CompletableFuture.runAsync(() -> fetchAndAdd(requester2, word, perThread)));
            for (int i = 0; i < perThread; i++) {
                LONG.getAndAdd(word.segment(), 8L, 1L); // the owner's CPU on the same word
            }
            for (CompletableFuture<Void> worker : workers) {
                worker.get(60, TimeUnit.SECONDS);
            }
            assertEquals(3L * perThread, (long) LONG.getVolatile(word.segment(), 8L));
        } finally {
            requester1.close();
            requester2.close();
            target.close();
        }
    }

    @Test
    void shouldKeepAtomicsOnRegisteredMemoryExactAcrossRequesters() throws Exception {
        int perThread = 3_000;
        ShmTestSupport.Side target = new ShmTestSupport.Side();
        ShmTestSupport.Side requester1 = new ShmTestSupport.Side();
        ShmTestSupport.Side requester2 = new ShmTestSupport.Side();
        try (java.lang.foreign.Arena arena = java.lang.foreign.Arena.ofShared()) {
            ShmTestSupport.connect(requester1, target);
            QueuePair targetQp2 = target.pd.createQueuePair(QueuePairInitAttributes.of(target.cq));
            ShmTestSupport.connect(targetQp2, requester2.qp.localEndpoint(), 7, AccessFlag.REMOTE_ATOMIC);
            ShmTestSupport.connect(requester2.qp, targetQp2.localEndpoint(), 7);
            // Caller-owned memory: each verbs atomic is a locked read-modify-write by cross-memory attach.
            MemoryRegion word = target.pd.registerMemory(arena.allocate(64, 64), ALL_REMOTE);
            List<CompletableFuture<Void>> workers = List.of(
                CompletableFuture.runAsync(() -> fetchAndAdd(requester1, word, perThread)),
                CompletableFuture.runAsync(() -> fetchAndAdd(requester2, word, perThread)));
            for (CompletableFuture<Void> worker : workers) {
                worker.get(60, TimeUnit.SECONDS);
            }
            assertEquals(2L * perThread, word.segment().get(ValueLayout.JAVA_LONG, 8));
            word.close();
        } finally {
            requester1.close();
            requester2.close();
            target.close();
        }
    }

    private static void fetchAndAdd(ShmTestSupport.Side side, MemoryRegion word, int n) {
        QueuePair qp = side.qp;
        MemoryRegion result = side.pd.allocateMemory(64, AccessFlag.LOCAL_WRITE);
        SendWorkRequest request = new SendWorkRequest();
        WorkCompletion[] wc = WorkCompletion.array(64);
        for (int i = 0; i < n; i++) {
            boolean signaled = (i & 31) == 31;
            qp.postSend(request.opcode(SendOpcode.ATOMIC_FETCH_AND_ADD).flags(signaled ? SendFlag.SIGNALED : 0)
                .local(result, 0, 8).remote(word.address() + 8, word.rkey()).atomic(1, 0));
            if (signaled) {
                int got = side.cq.poll(wc, 64, ShmTestSupport.WAIT_NS);
                for (int k = 0; k < got; k++) {
                    assertTrue(wc[k].isSuccess(), wc[k].toString());
                }
            }
        }
    }

    @Test
    void shouldCompleteEveryReceiveExactlyOnceWhenTheReceiverFailsWhileASenderStreams() throws Exception {
        try (ShmTestSupport.Side sender = new ShmTestSupport.Side(); ShmTestSupport.Side receiver =
            new ShmTestSupport.Side()) {
            ShmTestSupport.connect(sender, receiver);
            MemoryRegion source = sender.pd.allocateMemory(4096, AccessFlag.LOCAL_WRITE);
            MemoryRegion sink = receiver.pd.allocateMemory(1 << 16, AccessFlag.LOCAL_WRITE);
            ReceiveWorkRequest recv = new ReceiveWorkRequest();
            long posted = 0;
            for (; posted < 16; posted++) {
                receiver.qp.postReceive(recv.wrId(posted).local(sink, 64L * (posted % 1024), 64));
            }
            CompletableFuture<WorkCompletionStatus> stream = CompletableFuture.supplyAsync(() -> {
                SendWorkRequest send = new SendWorkRequest();
                WorkCompletion[] wc = WorkCompletion.array(16);
                for (long i = 0; ; i++) {
                    sender.qp.postSend(send.wrId(i).opcode(SendOpcode.SEND).flags(SendFlag.SIGNALED)
                        .local(source, 0, 32));
                    int got = sender.cq.poll(wc, 16, ShmTestSupport.WAIT_NS);
                    for (int k = 0; k < got; k++) {
                        if (!wc[k].isSuccess()) {
                            return wc[k].status();
                        }
                    }
                }
            });
            WorkCompletion[] wc = WorkCompletion.array(16);
            long expected = 0;
            int successes = 0;
            int flushed = 0;
            boolean failed = false;
            while (expected < posted) {
                int got = receiver.cq.poll(wc, 16, ShmTestSupport.WAIT_NS);
                assertTrue(got > 0, "receiver stalled at " + expected);
                for (int k = 0; k < got; k++) {
                    assertEquals(expected++, wc[k].wrId(), "in order, each exactly once");
                    if (wc[k].isSuccess()) {
                        assertEquals(0, flushed, "no success after a flush");
                        successes++;
                        if (!failed) {
                            receiver.qp.postReceive(recv.wrId(posted).local(sink, 64L * (posted % 1024), 64));
                            posted++;
                        }
                    } else {
                        assertEquals(WorkCompletionStatus.WR_FLUSH_ERR, wc[k].status());
                        flushed++;
                    }
                }
                if (!failed && successes >= 200) {
                    // Fail while the sender streams into the outstanding receives, then post more: they flush.
                    receiver.qp.modify(new QueuePairAttributes().state(QueuePairState.ERROR));
                    failed = true;
                    for (int i = 0; i < 5; i++) {
                        receiver.qp.postReceive(recv.wrId(posted).local(sink, 0, 64));
                        posted++;
                    }
                }
            }
            assertTrue(flushed >= 5 && successes >= 200, successes + " delivered, " + flushed + " flushed");
            WorkCompletionStatus senderEnd = stream.get(30, TimeUnit.SECONDS);
            assertTrue(senderEnd == WorkCompletionStatus.RETRY_EXC_ERR || senderEnd == WorkCompletionStatus.WR_FLUSH_ERR,
                "sender ends with " + senderEnd);
        }
    }
}
