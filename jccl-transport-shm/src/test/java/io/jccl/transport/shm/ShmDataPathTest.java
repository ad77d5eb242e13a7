package io.jccl.transport.shm;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairState;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.VerbsException;
import io.jccl.verbs.WorkCompletion;
import io.jccl.verbs.WorkCompletionOpcode;
import io.jccl.verbs.WorkCompletionStatus;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

import static io.jccl.transport.shm.ShmTestSupport.ALL_REMOTE;
import static io.jccl.transport.shm.ShmTestSupport.assertSuccess;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Data path and RC error semantics between two contexts (two "processes" of the provider) in one JVM. */
class ShmDataPathTest {
    private ShmTestSupport.Side a;
    private ShmTestSupport.Side b;
    private final SendWorkRequest send = new SendWorkRequest();
    private final ReceiveWorkRequest recv = new ReceiveWorkRequest();

    @BeforeEach
    void setUp() {
        a = new ShmTestSupport.Side();
        b = new ShmTestSupport.Side();
        ShmTestSupport.connect(a, b);
    }

    @AfterEach
    void tearDown() {
        a.close();
        b.close();
    }

    @Test
    void shouldWriteAndReadThroughThePeersMapping() {
        MemoryRegion local = a.pd.allocateMemory(8192, ALL_REMOTE);
        MemoryRegion remote = b.pd.allocateMemory(8192, ALL_REMOTE);
        for (int i = 0; i < 4096; i++) {
            local.segment().set(ValueLayout.JAVA_BYTE, i, (byte) i);
        }
        a.qp.postSend(send.wrId(1).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED).local(local, 0, 4096)
            .remote(remote.address() + 100, remote.rkey()));
        WorkCompletion wc = a.next();
        assertSuccess(wc);
        assertEquals(WorkCompletionOpcode.RDMA_WRITE, wc.opcode());
        assertEquals(1, wc.wrId());
        assertEquals(MemorySegment.mismatch(local.segment(), 0, 4096, remote.segment(), 100, 4196), -1);

        remote.segment().set(ValueLayout.JAVA_LONG, 8000, 0x1122334455667788L);
        a.qp.postSend(send.wrId(2).opcode(SendOpcode.RDMA_READ).local(local, 5000, 8)
            .remote(remote.address() + 8000, remote.rkey()));
        wc = a.next();
        assertSuccess(wc);
        assertEquals(WorkCompletionOpcode.RDMA_READ, wc.opcode());
        assertEquals(8, wc.byteLength());
        assertEquals(0x1122334455667788L, local.segment().get(ValueLayout.JAVA_LONG_UNALIGNED, 5000));
    }

    @Test
    void shouldDeliverSendsIntoFileAndPrivateBuffersWithImmediates() {
        MemoryRegion source = a.pd.allocateMemory(4096, AccessFlag.LOCAL_WRITE);
        MemoryRegion fileSink = b.pd.allocateMemory(4096, AccessFlag.LOCAL_WRITE);
        try (Arena arena = Arena.ofConfined()) {
            MemoryRegion privateSink = b.pd.registerMemory(arena.allocate(4096, 64), AccessFlag.LOCAL_WRITE);
            source.segment().setString(0, "hello shm");
            // Two-entry scatter list: 4 bytes in the file region, the rest in private memory.
            recv.wrId(10);
            recv.setSgeCount(2);
            recv.sge(0).set(fileSink, 0, 4);
            recv.sge(1).set(privateSink, 0, 100);
            b.qp.postReceive(recv);
            a.qp.postSend(send.wrId(11).opcode(SendOpcode.SEND_WITH_IMM).flags(SendFlag.SIGNALED)
                .local(source, 0, 10).immediateData(0xCAFE));
            assertSuccess(a.next());
            WorkCompletion wc = b.next();
            assertSuccess(wc);
            assertEquals(10, wc.wrId());
            assertEquals(WorkCompletionOpcode.RECV, wc.opcode());
            assertEquals(10, wc.byteLength());
            assertTrue(wc.withImmediate());
            assertEquals(0xCAFE, wc.immediateData());
            assertEquals(a.qp.queuePairNumber(), wc.sourceQueuePairNumber());
            assertEquals("hell", fileSink.segment().getString(0).substring(0, 4));
            assertEquals("o shm", privateSink.segment().getString(0));

            // Inline send, no completion requested: only the receiver sees it.
            b.qp.postReceive(recv.wrId(12).local(fileSink, 100, 64));
            a.qp.postSend(send.wrId(13).opcode(SendOpcode.SEND).flags(SendFlag.INLINE).local(source, 0, 9));
            wc = b.next();
            assertSuccess(wc);
            assertEquals(9, wc.byteLength());
            assertTrue(!wc.withImmediate());
            assertEquals(0, a.pollNow());
            privateSink.close();
        }
    }

    @Test
    void shouldMakeWriteDataVisibleBeforeTheFollowingWriteWithImmediate() {
        MemoryRegion local = a.pd.allocateMemory(1 << 20, ALL_REMOTE);
        MemoryRegion remote = b.pd.allocateMemory(1 << 20, ALL_REMOTE);
        for (int round = 1; round <= 50; round++) {
            local.segment().fill((byte) round);
            b.qp.postReceive(recv.wrId(round).noData());
            a.qp.postSend(send.wrId(round).opcode(SendOpcode.RDMA_WRITE).flags(0).local(local, 0, 1 << 20)
                .remote(remote.address(), remote.rkey()));
            a.qp.postSend(send.wrId(round).opcode(SendOpcode.RDMA_WRITE_WITH_IMM).flags(0).noData()
                .remote(remote.address(), remote.rkey()).immediateData(round));
            WorkCompletion wc = b.next();
            assertSuccess(wc);
            assertEquals(WorkCompletionOpcode.RECV_RDMA_WITH_IMM, wc.opcode());
            assertEquals(round, wc.immediateData());
            assertEquals((byte) round, remote.segment().get(ValueLayout.JAVA_BYTE, (1 << 20) - 1));
        }
    }

    @Test
    void shouldRunAtomicsOnTheSharedMapping() {
        MemoryRegion result = a.pd.allocateMemory(64, AccessFlag.LOCAL_WRITE);
        MemoryRegion target = b.pd.allocateMemory(64, ALL_REMOTE);
        target.segment().set(ValueLayout.JAVA_LONG, 8, 40);
        a.qp.postSend(send.wrId(1).opcode(SendOpcode.ATOMIC_FETCH_AND_ADD).flags(SendFlag.SIGNALED)
            .local(result, 0, 8).remote(target.address() + 8, target.rkey()).atomic(2, 0));
        assertSuccess(a.next());
        assertEquals(40, result.segment().get(ValueLayout.JAVA_LONG, 0));
        assertEquals(42, target.segment().get(ValueLayout.JAVA_LONG, 8));
        a.qp.postSend(send.wrId(2).opcode(SendOpcode.ATOMIC_CMP_AND_SWP).local(result, 16, 8)
            .remote(target.address() + 8, target.rkey()).atomic(42, 7));
        WorkCompletion wc = a.next();
        assertSuccess(wc);
        assertEquals(WorkCompletionOpcode.COMP_SWAP, wc.opcode());
        assertEquals(42, result.segment().get(ValueLayout.JAVA_LONG, 16));
        assertEquals(7, target.segment().get(ValueLayout.JAVA_LONG, 8));
        a.qp.postSend(send.wrId(3).opcode(SendOpcode.ATOMIC_CMP_AND_SWP).local(result, 16, 8)
            .remote(target.address() + 8, target.rkey()).atomic(42, 9));
        assertSuccess(a.next());
        assertEquals(7, result.segment().get(ValueLayout.JAVA_LONG, 16));
        assertEquals(7, target.segment().get(ValueLayout.JAVA_LONG, 8), "failed compare leaves the target alone");
    }

    @Test
    void shouldWriteAndReadPrivateMemoryByCrossMemoryAttach() {
        MemoryRegion local = a.pd.allocateMemory(4096, AccessFlag.LOCAL_WRITE);
        try (Arena arena = Arena.ofShared()) {
            MemoryRegion remote = b.pd.registerMemory(arena.allocate(4096, 64), AccessFlag.LOCAL_WRITE,
                AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ);
            local.segment().setString(0, "private bytes");
            a.qp.postSend(send.wrId(1).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED).local(local, 0, 14)
                .remote(remote.address() + 64, remote.rkey()));
            assertSuccess(a.next());
            assertEquals("private bytes", remote.segment().getString(64));
            remote.segment().setString(1000, "back again");
            a.qp.postSend(send.wrId(2).opcode(SendOpcode.RDMA_READ).local(local, 2000, 11)
                .remote(remote.address() + 1000, remote.rkey()));
            assertSuccess(a.next());
            assertEquals("back again", local.segment().getString(2000));
            remote.close();
        }
    }

    @Test
    void shouldRunAtomicsOnRegisteredMemoryUnderTheRegionLock() {
        MemoryRegion result = a.pd.allocateMemory(64, AccessFlag.LOCAL_WRITE);
        try (Arena arena = Arena.ofShared()) {
            MemoryRegion target = b.pd.registerMemory(arena.allocate(64, 8), ALL_REMOTE);
            target.segment().set(ValueLayout.JAVA_LONG, 8, 100);
            a.qp.postSend(send.wrId(1).opcode(SendOpcode.ATOMIC_FETCH_AND_ADD).flags(SendFlag.SIGNALED).local(result, 0, 8)
                .remote(target.address() + 8, target.rkey()).atomic(5, 0));
            assertSuccess(a.next());
            assertEquals(100, result.segment().get(ValueLayout.JAVA_LONG, 0));
            a.qp.postSend(send.wrId(2).opcode(SendOpcode.ATOMIC_CMP_AND_SWP).flags(SendFlag.SIGNALED).local(result, 8, 8)
                .remote(target.address() + 8, target.rkey()).atomic(105, 7));
            assertSuccess(a.next());
            assertEquals(105, result.segment().get(ValueLayout.JAVA_LONG, 8));
            a.qp.postSend(send.wrId(3).opcode(SendOpcode.ATOMIC_CMP_AND_SWP).flags(SendFlag.SIGNALED).local(result, 16, 8)
                .remote(target.address() + 8, target.rkey()).atomic(105, 9));
            assertSuccess(a.next());
            assertEquals(7, result.segment().get(ValueLayout.JAVA_LONG, 16));
            assertEquals(7, target.segment().get(ValueLayout.JAVA_LONG, 8), "failed compare stores nothing");
            VerbsException e = assertThrows(VerbsException.class,
                () -> b.pd.registerMemory(arena.allocate(64, 8).asSlice(4, 16), ALL_REMOTE));
            assertEquals(VerbsException.Reason.INVALID_ARGUMENT, e.reason(), "atomic targets must be aligned");
            target.close();
        }
    }

    @Test
    void shouldAnswerBadKeysWithRemoteAccessErrorAndMoveBothQueuePairsToError() {
        MemoryRegion local = a.pd.allocateMemory(4096, ALL_REMOTE);
        MemoryRegion remote = b.pd.allocateMemory(4096, AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_READ);
        b.qp.postReceive(recv.wrId(77).local(remote, 0, 16));
        // Region lacks REMOTE_WRITE.
        a.qp.postSend(send.wrId(1).opcode(SendOpcode.RDMA_WRITE).flags(0).local(local, 0, 8)
            .remote(remote.address(), remote.rkey()));
        a.qp.postSend(send.wrId(2).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED).local(local, 0, 8)
            .remote(remote.address(), remote.rkey()));
        WorkCompletion wc = a.next();
        assertEquals(WorkCompletionStatus.REM_ACCESS_ERR, wc.status(), "unsignaled failures complete too");
        assertEquals(1, wc.wrId());
        assertEquals(WorkCompletionStatus.WR_FLUSH_ERR, a.next().status());
        assertEquals(QueuePairState.ERROR, a.qp.state());
        wc = b.next();
        assertEquals(WorkCompletionStatus.WR_FLUSH_ERR, wc.status());
        assertEquals(77, wc.wrId());
        assertEquals(QueuePairState.ERROR, b.qp.state());
    }

    @Test
    void shouldSeeRevocationAndRangeErrors() {
        MemoryRegion local = a.pd.allocateMemory(4096, ALL_REMOTE);
        MemoryRegion remote = b.pd.allocateMemory(4096, ALL_REMOTE);
        a.qp.postSend(send.wrId(1).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED).local(local, 0, 8)
            .remote(remote.address(), remote.rkey()));
        assertSuccess(a.next());
        long address = remote.address();
        int rkey = remote.rkey();
        remote.close();
        a.qp.postSend(send.wrId(2).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED).local(local, 0, 8)
            .remote(address, rkey));
        assertEquals(WorkCompletionStatus.REM_ACCESS_ERR, a.next().status());
    }

    @Test
    void shouldRejectOutOfRangeAndQueuePairAccess() {
        MemoryRegion local = a.pd.allocateMemory(4096, ALL_REMOTE);
        ShmTestSupport.Side c = new ShmTestSupport.Side();
        ShmTestSupport.Side d = new ShmTestSupport.Side();
        try {
            // c accepts only READ at QP level: a WRITE is an invalid request for it.
            c.qp.modify(QueuePairAttributes.toInit(AccessFlag.REMOTE_READ));
            d.qp.modify(QueuePairAttributes.toInit(AccessFlag.REMOTE_READ));
            c.qp.modify(QueuePairAttributes.toReadyToReceive(d.qp.localEndpoint()));
            d.qp.modify(QueuePairAttributes.toReadyToReceive(c.qp.localEndpoint()));
            d.qp.modify(QueuePairAttributes.toReadyToSend(d.qp.initialPsn()));
            MemoryRegion target = c.pd.allocateMemory(4096, ALL_REMOTE);
            MemoryRegion source = d.pd.allocateMemory(4096, ALL_REMOTE);
            d.qp.postSend(send.wrId(5).opcode(SendOpcode.RDMA_WRITE).flags(0).local(source, 0, 8)
                .remote(target.address(), target.rkey()));
            assertEquals(WorkCompletionStatus.REM_INV_REQ_ERR, d.next().status());
            c.pollNow();
            assertEquals(QueuePairState.ERROR, c.qp.state());
        } finally {
            c.close();
            d.close();
        }
        MemoryRegion remote = b.pd.allocateMemory(4096, ALL_REMOTE);
        a.qp.postSend(send.wrId(3).opcode(SendOpcode.RDMA_READ).local(local, 0, 16)
            .remote(remote.address() + 4090, remote.rkey()));
        assertEquals(WorkCompletionStatus.REM_ACCESS_ERR, a.next().status());
    }

    @Test
    void shouldReportLocalProtectionErrors() {
        MemoryRegion readOnly = a.pd.allocateMemory(4096, AccessFlag.REMOTE_READ);
        MemoryRegion remote = b.pd.allocateMemory(4096, ALL_REMOTE);
        // READ into a region without LOCAL_WRITE.
        a.qp.postSend(send.wrId(1).opcode(SendOpcode.RDMA_READ).local(readOnly, 0, 8)
            .remote(remote.address(), remote.rkey()));
        assertEquals(WorkCompletionStatus.LOC_PROT_ERR, a.next().status());
        assertEquals(QueuePairState.ERROR, a.qp.state());
        b.pollNow();
        assertEquals(QueuePairState.READY_TO_SEND, b.qp.state(), "a local error leaves the peer alone");
    }

    @Test
    void shouldFailTooLongMessagesOnBothSides() {
        MemoryRegion source = a.pd.allocateMemory(4096, AccessFlag.LOCAL_WRITE);
        MemoryRegion sink = b.pd.allocateMemory(4096, AccessFlag.LOCAL_WRITE);
        b.qp.postReceive(recv.wrId(9).local(sink, 0, 16));
        a.qp.postSend(send.wrId(8).opcode(SendOpcode.SEND).flags(0).local(source, 0, 64));
        assertEquals(WorkCompletionStatus.REM_INV_REQ_ERR, a.next().status());
        WorkCompletion wc = b.next();
        assertEquals(WorkCompletionStatus.LOC_LEN_ERR, wc.status());
        assertEquals(9, wc.wrId());
        assertEquals(QueuePairState.ERROR, b.qp.state());
    }

    @Test
    void shouldRetryReceiverNotReadyThenSucceed() {
        MemoryRegion source = a.pd.allocateMemory(4096, AccessFlag.LOCAL_WRITE);
        MemoryRegion sink = b.pd.allocateMemory(4096, AccessFlag.LOCAL_WRITE);
        a.qp.postSend(send.wrId(1).opcode(SendOpcode.SEND).flags(SendFlag.SIGNALED).local(source, 0, 8));
        a.qp.postSend(send.wrId(2).opcode(SendOpcode.SEND).flags(SendFlag.SIGNALED).local(source, 0, 8));
        assertEquals(0, a.pollNow(), "no receive yet: the send waits (RNR)");
        b.qp.postReceive(recv.wrId(21).local(sink, 0, 64));
        b.qp.postReceive(recv.wrId(22).local(sink, 64, 64));
        WorkCompletion wc = a.next();
        assertSuccess(wc);
        assertEquals(1, wc.wrId());
        assertEquals(2, a.next().wrId(), "in order");
        assertEquals(21, b.next().wrId());
        assertEquals(22, b.next().wrId());
    }

    @Test
    void shouldFailWithRnrRetryExceeded() {
        ShmTestSupport.Side c = new ShmTestSupport.Side();
        ShmTestSupport.Side d = new ShmTestSupport.Side();
        try {
            ShmTestSupport.connect(c, d, 2);
            MemoryRegion source = c.pd.allocateMemory(4096, AccessFlag.LOCAL_WRITE);
            c.qp.postSend(send.wrId(4).opcode(SendOpcode.SEND).flags(SendFlag.SIGNALED).local(source, 0, 8));
            WorkCompletion wc = c.next();
            assertEquals(WorkCompletionStatus.RNR_RETRY_EXC_ERR, wc.status());
            assertEquals(QueuePairState.ERROR, c.qp.state());
        } finally {
            c.close();
            d.close();
        }
    }

    @Test
    void shouldFailRequestsToADestroyedPeerWithRetryExceeded() {
        MemoryRegion local = a.pd.allocateMemory(4096, ALL_REMOTE);
        MemoryRegion remote = b.pd.allocateMemory(4096, ALL_REMOTE);
        b.qp.close();
        a.qp.postSend(send.wrId(1).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED).local(local, 0, 8)
            .remote(remote.address(), remote.rkey()));
        assertEquals(WorkCompletionStatus.RETRY_EXC_ERR, a.next().status());
    }

    @Test
    void shouldDeliverWhatADestroyedPeerCompletedBeforeFailingRequestsToIt() {
        // b's WRITE_WITH_IMM completed at b, so a has received it; then b destroys its QP. a's next request to b
        // fails, but after that message in a's CQ: the failure came first, and an application read it as the peer's
        // link failing before its goodbye (Rendezvous over shm0, one run in two under load).
        MemoryRegion local = a.pd.allocateMemory(4096, ALL_REMOTE);
        MemoryRegion remote = b.pd.allocateMemory(4096, ALL_REMOTE);
        a.qp.postReceive(recv.wrId(7).local(local, 64, 8));
        b.qp.postSend(send.wrId(8).opcode(SendOpcode.RDMA_WRITE_WITH_IMM).flags(SendFlag.SIGNALED).immediateData(42)
            .local(remote, 0, 8).remote(local.address(), local.rkey()));
        assertSuccess(b.next());
        b.qp.close();
        a.qp.postSend(send.wrId(9).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED).local(local, 0, 8)
            .remote(remote.address(), remote.rkey()));
        WorkCompletion first = a.next();
        assertSuccess(first);
        assertEquals(7, first.wrId());
        assertEquals(42, first.immediateData());
        WorkCompletion second = a.next();
        assertEquals(9, second.wrId());
        assertEquals(WorkCompletionStatus.RETRY_EXC_ERR, second.status());
    }

    @Test
    void shouldFlushRequestsPostedInError() {
        MemoryRegion local = a.pd.allocateMemory(4096, ALL_REMOTE);
        a.qp.modify(new QueuePairAttributes().state(QueuePairState.ERROR));
        a.qp.postReceive(recv.wrId(3).local(local, 0, 8));
        assertEquals(WorkCompletionStatus.WR_FLUSH_ERR, a.next().status());
        a.qp.postSend(send.wrId(4).opcode(SendOpcode.SEND).flags(0).local(local, 0, 8));
        assertEquals(WorkCompletionStatus.WR_FLUSH_ERR, a.next().status());
        // The peer's sends now find our QP in ERR.
        b.qp.postSend(send.wrId(5).opcode(SendOpcode.SEND).flags(0).noData());
        assertEquals(WorkCompletionStatus.RETRY_EXC_ERR, b.next().status());
    }

    @Test
    void shouldRefuseKeysOfAnotherProtectionDomain() {
        MemoryRegion local = a.pd.allocateMemory(4096, ALL_REMOTE);
        io.jccl.verbs.ProtectionDomain otherDomain = b.context.allocateProtectionDomain();
        MemoryRegion foreign = otherDomain.allocateMemory(4096, ALL_REMOTE);
        VerbsException e = assertThrows(VerbsException.class,
            () -> a.qp.mapRemote(foreign.address(), 8, foreign.rkey(), false));
        assertEquals(VerbsException.Reason.PERMISSION_DENIED, e.reason());
        a.qp.postSend(send.wrId(1).opcode(SendOpcode.RDMA_READ).local(local, 0, 8)
            .remote(foreign.address(), foreign.rkey()));
        assertEquals(WorkCompletionStatus.REM_ACCESS_ERR, a.next().status());
    }

    @Test
    void shouldRefusePrivateMemoryAfterDeregistration() {
        MemoryRegion local = a.pd.allocateMemory(4096, AccessFlag.LOCAL_WRITE);
        try (Arena arena = Arena.ofShared()) {
            MemoryRegion remote = b.pd.registerMemory(arena.allocate(4096, 64), AccessFlag.LOCAL_WRITE,
                AccessFlag.REMOTE_WRITE);
            long address = remote.address();
            int rkey = remote.rkey();
            remote.close();
            a.qp.postSend(send.wrId(1).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED).local(local, 0, 8)
                .remote(address, rkey));
            assertEquals(WorkCompletionStatus.REM_ACCESS_ERR, a.next().status());
        }
    }
}
