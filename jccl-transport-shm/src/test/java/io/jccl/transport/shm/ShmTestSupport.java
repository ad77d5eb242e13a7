package io.jccl.transport.shm;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.Context;
import io.jccl.verbs.Endpoint;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.Verbs;
import io.jccl.verbs.WorkCompletion;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Helpers: one side (context, domain, CQ, QP) and connecting two sides. */
final class ShmTestSupport {
    static final AccessFlag[] ALL_REMOTE = {AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ,
        AccessFlag.REMOTE_ATOMIC};
    static final long WAIT_NS = 5_000_000_000L;

    private ShmTestSupport() {
    }

    /** One endpoint of a connection. */
    static final class Side implements AutoCloseable {
        final Context context;
        final ProtectionDomain pd;
        final CompletionQueue cq;
        final QueuePair qp;
        final WorkCompletion[] wc = WorkCompletion.array(16);

        Side(QueuePairInitAttributesFactory attributes) {
            context = Verbs.device("shm0").open();
            pd = context.allocateProtectionDomain();
            cq = context.createCompletionQueue(1024);
            qp = pd.createQueuePair(attributes.make(cq));
        }

        Side() {
            this(QueuePairInitAttributes::of);
        }

        /** Waits for one completion and returns it. */
        WorkCompletion next() {
            int n = cq.poll(wc, 1, WAIT_NS);
            assertEquals(1, n, "no completion within 5 s");
            return wc[0];
        }

        /** Polls once without waiting; returns the count. */
        int pollNow() {
            return cq.poll(wc, 1);
        }

        @Override
        public void close() {
            context.close();
        }
    }

    @FunctionalInterface
    interface QueuePairInitAttributesFactory {
        QueuePairInitAttributes make(CompletionQueue cq);
    }

    /** Drives {@code qp} to RTS towards {@code remote}, accepting {@code access} and asking for RNR code 1. */
    static void connect(QueuePair qp, Endpoint remote, int rnrRetry, AccessFlag... access) {
        qp.modify(QueuePairAttributes.toInit(access));
        qp.modify(QueuePairAttributes.toReadyToReceive(remote));
        qp.modify(QueuePairAttributes.toReadyToSend(qp.initialPsn()).rnrRetry(rnrRetry));
    }

    /** Connects two sides both ways with every remote access and infinite RNR retry. */
    static void connect(Side a, Side b) {
        connect(a, b, 7);
    }

    static void connect(Side a, Side b, int rnrRetry) {
        Endpoint ea = a.qp.localEndpoint();
        Endpoint eb = b.qp.localEndpoint();
        a.qp.modify(QueuePairAttributes.toInit(AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ,
            AccessFlag.REMOTE_ATOMIC));
        b.qp.modify(QueuePairAttributes.toInit(AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ,
            AccessFlag.REMOTE_ATOMIC));
        a.qp.modify(QueuePairAttributes.toReadyToReceive(eb));
        b.qp.modify(QueuePairAttributes.toReadyToReceive(ea));
        a.qp.modify(QueuePairAttributes.toReadyToSend(a.qp.initialPsn()).rnrRetry(rnrRetry));
        b.qp.modify(QueuePairAttributes.toReadyToSend(b.qp.initialPsn()).rnrRetry(rnrRetry));
    }

    static void assertSuccess(WorkCompletion wc) {
        assertTrue(wc.isSuccess(), () -> "expected success, got " + wc);
    }
}
