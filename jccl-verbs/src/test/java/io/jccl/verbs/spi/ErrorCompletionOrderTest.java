package io.jccl.verbs.spi;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.Context;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.QueuePairState;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.WorkCompletionOpcode;
import io.jccl.verbs.WorkCompletionStatus;
import io.jccl.verbs.testing.LoopProvider;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * The state a poller sees beside an error completion: the QP is in ERR once its error completion is in the queue
 * (ibv_poll_cq(3)), and the flushes of the requests behind it come after it.
 */
class ErrorCompletionOrderTest {
    /** A completion queue that notes, for every completion pushed, its status and the QP's state at that moment. */
    private static final class RecordingQueue extends SoftCompletionQueue {
        final List<String> pushed = new ArrayList<>();
        volatile QueuePair watched;

        RecordingQueue(Context context) {
            super(context, 16);
        }

        @Override
        public void push(long wrId, WorkCompletionStatus status, WorkCompletionOpcode opcode, int byteLength,
                         int immediateData, boolean withImm, int queuePairNumber, int sourceQueuePairNumber,
                         int vendorError) {
            pushed.add(wrId + " " + status + " with the QP in " + watched.state());
            super.push(wrId, status, opcode, byteLength, immediateData, withImm, queuePairNumber,
                sourceQueuePairNumber, vendorError);
        }
    }

    @Test
    void aQueuePairIsInErrorWhenItsErrorCompletionIsPushedAndItsFlushesFollow() {
        try (Context context = new LoopProvider().devices().getFirst().open()) {
            ProtectionDomain pd = context.allocateProtectionDomain();
            RecordingQueue cq = new RecordingQueue(context);
            QueuePair a = pd.createQueuePair(QueuePairInitAttributes.of(cq));
            QueuePair b = pd.createQueuePair(QueuePairInitAttributes.of(context.createCompletionQueue(16)));
            cq.watched = a;
            a.modify(QueuePairAttributes.toInit(AccessFlag.REMOTE_WRITE));
            b.modify(QueuePairAttributes.toInit(AccessFlag.REMOTE_WRITE));
            a.modify(QueuePairAttributes.toReadyToReceive(b.localEndpoint()));
            b.modify(QueuePairAttributes.toReadyToReceive(a.localEndpoint()));
            a.modify(QueuePairAttributes.toReadyToSend(0));
            b.modify(QueuePairAttributes.toReadyToSend(0));
            MemoryRegion source = pd.allocateMemory(64, AccessFlag.LOCAL_WRITE);
            MemoryRegion target = pd.allocateMemory(64, AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE);
            SendWorkRequest bad = new SendWorkRequest().wrId(1).opcode(SendOpcode.RDMA_WRITE)
                .flags(SendFlag.SIGNALED).local(source, 0, 64).remote(target.address(), target.rkey() ^ 0x5A5A);
            SendWorkRequest behind = new SendWorkRequest().wrId(2).opcode(SendOpcode.RDMA_WRITE)
                .flags(SendFlag.SIGNALED).local(source, 0, 64).remote(target.address(), target.rkey());
            a.postSend(new SendWorkRequest[] {bad, behind}, 2);
            assertEquals(List.of("1 REM_ACCESS_ERR with the QP in ERROR", "2 WR_FLUSH_ERR with the QP in ERROR"),
                cq.pushed);
            assertEquals(QueuePairState.ERROR, a.state());
        }
    }
}
