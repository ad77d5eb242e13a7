package io.jccl.transport.tcp;

import io.jccl.transport.tcp.TcpTestSupport.Side;
import io.jccl.verbs.Context;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairState;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.WorkCompletion;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import static io.jccl.transport.tcp.TcpTestSupport.ALL;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A receiver that takes the last message and closes its queue pair at once must still acknowledge that message, as
 * an RC NIC has by the time the receive completes: the sender's request completes with success, not with
 * RETRY_EXC_ERR when the connection goes. (The ACK of a message a poll delivers may be held back for the answer to
 * carry; closing must send it instead of dropping it — the end of every collective job.)
 */
class TcpCloseTest {
    private Context ca;
    private Context cb;

    @BeforeEach
    void open() {
        ca = TcpTestSupport.open();
        cb = TcpTestSupport.open();
    }

    @AfterEach
    void close() {
        ca.close();
        cb.close();
    }

    @ParameterizedTest
    @ValueSource(booleans = {false, true})
    void shouldAcknowledgeTheLastMessageBeforeClosing(boolean errorFirst) {
        for (int round = 0; round < 40; round++) {
            Side a = Side.create(ca);
            Side b = Side.create(cb);
            TcpTestSupport.connect(a.qp(), b.qp());
            MemoryRegion ma = a.pd().allocateMemory(64, ALL);
            MemoryRegion mb = b.pd().allocateMemory(64, ALL);
            b.qp().postReceive(new ReceiveWorkRequest().local(mb, 0, 64));
            a.qp().postSend(new SendWorkRequest().opcode(SendOpcode.SEND).flags(SendFlag.SIGNALED).local(ma, 0, 8)
                .wrId(round));
            // The receiver polls (application-driven progress), takes the message and closes right away.
            WorkCompletion received = TcpTestSupport.pollSuccess(b.cq());
            assertTrue(received.opcode().isReceive(), received.toString());
            if (errorFirst) {
                b.qp().modify(new QueuePairAttributes().state(QueuePairState.ERROR));
            }
            b.qp().close();
            WorkCompletion sent = TcpTestSupport.poll(a.cq());
            assertEquals(round, sent.wrId());
            assertTrue(sent.isSuccess(), "round " + round + ": the sender's SEND completed with " + sent.status()
                + " after the receiver took it and closed");
            a.qp().close(); // CQs and domains go with the contexts
        }
    }
}
