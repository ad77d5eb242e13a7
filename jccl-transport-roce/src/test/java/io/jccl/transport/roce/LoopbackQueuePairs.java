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
        return connect(ca, cb, completionQueueDepth, -1, access);
    }

    /**
     * As {@link #connect(Context, Context, int, AccessFlag...)} with local ACK timeout code {@code timeoutCode} on
     * both (0: no ACK timer, so that a host that stalls the test past it adds no go-back-N to what a test counts;
     * -1: the default).
     */
    static LoopbackQueuePairs connect(Context ca, Context cb, int completionQueueDepth, int timeoutCode,
                                      AccessFlag... access) {
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
        QueuePairAttributes rtsA = QueuePairAttributes.toReadyToSend(a.initialPsn());
        QueuePairAttributes rtsB = QueuePairAttributes.toReadyToSend(b.initialPsn());
        if (timeoutCode >= 0) {
            rtsA.timeout(timeoutCode);
            rtsB.timeout(timeoutCode);
        }
        a.modify(rtsA);
        b.modify(rtsB);
        return new LoopbackQueuePairs(pa, pb, qa, qb, a, b);
    }
}
