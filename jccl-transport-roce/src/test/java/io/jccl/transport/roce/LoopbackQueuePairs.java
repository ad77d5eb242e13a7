package io.jccl.transport.roce;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.Context;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairInitAttributes;

/**
 * Two roce0 queue pairs, one per context, connected to each other and ready to send (RTS), each with its own
 * protection domain and completion queue: the setup the module's single-link tests share.
 */
record LoopbackQueuePairs(ProtectionDomain pa, ProtectionDomain pb, CompletionQueue qa, CompletionQueue qb,
                          QueuePair a, QueuePair b) {
    /** Connects a queue pair of {@code ca} with one of {@code cb}, both granting {@code access} to the peer. */
    static LoopbackQueuePairs connect(Context ca, Context cb, int completionQueueDepth, AccessFlag... access) {
        ProtectionDomain pa = ca.allocateProtectionDomain();
        ProtectionDomain pb = cb.allocateProtectionDomain();
        CompletionQueue qa = ca.createCompletionQueue(completionQueueDepth);
        CompletionQueue qb = cb.createCompletionQueue(completionQueueDepth);
        QueuePair a = pa.createQueuePair(QueuePairInitAttributes.of(qa));
        QueuePair b = pb.createQueuePair(QueuePairInitAttributes.of(qb));
        a.modify(QueuePairAttributes.toInit(access));
        b.modify(QueuePairAttributes.toInit(access));
        a.modify(QueuePairAttributes.toReadyToReceive(b.localEndpoint()));
        b.modify(QueuePairAttributes.toReadyToReceive(a.localEndpoint()));
        a.modify(QueuePairAttributes.toReadyToSend(a.initialPsn()));
        b.modify(QueuePairAttributes.toReadyToSend(b.initialPsn()));
        return new LoopbackQueuePairs(pa, pb, qa, qb, a, b);
    }
}
