package io.jccl.transport.shm;

import io.jccl.verbs.Counter;
import io.jccl.verbs.WorkCompletionOpcode;
import io.jccl.verbs.WorkCompletionStatus;
import io.jccl.verbs.spi.CounterSet;
import io.jccl.verbs.spi.ReceiveSlot;
import io.jccl.verbs.spi.SoftMemoryRegion;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;
import java.util.concurrent.locks.LockSupport;

import static io.jccl.transport.shm.QueuePairFile.*;

/**
 * The receive side of an shm queue pair: the inbound ring in this QP's file ({@link QueuePairFile}: {@code rq tail},
 * {@code rq head} and the descriptors). Posting a receive resolves its scatter list once into a descriptor the peer's
 * requester reads and copies into; the peer claims descriptors by CAS on {@code rq head} and publishes each result
 * in the descriptor itself ({@code done = index + 1}, a release store). Draining completes those results in order;
 * flushing first takes every unclaimed descriptor away from the sender, so a sender and the flush never finish the
 * same entry. The receive-queue ring of slots is the base class's; everything here runs under the queue pair's lock,
 * except {@link #resultPublished}, the pollers' lock-free look.
 */
final class ShmReceiver {
    private static final VarHandle LONG = ShmKeyTable.LONG;
    private static final long FLUSH_WAIT_NS = 500_000_000L;
    private static final WorkCompletionStatus[] STATUSES = WorkCompletionStatus.values();
    private static final WorkCompletionOpcode[] OPCODES = WorkCompletionOpcode.values();

    private final ShmQueuePair qp;
    private final ShmRequester requester;
    private final MemorySegment file;
    private final int depth;
    private final int entrySize;
    /** The queue pair's share of the context's counters (every update under the QP lock, so no atomics). */
    private final CounterSet.Local counters;

    /**
     * Creates the receive side of {@code qp} over the ring in its file.
     *
     * @param qp the queue pair whose receive queue this serves
     * @param requester the same queue pair's requester (whether the peer lives, while a flush waits on it)
     * @param file this queue pair's mapped file
     * @param depth receive-ring entries (max_recv_wr)
     * @param entrySize bytes per descriptor ({@link QueuePairFile#entrySize})
     * @param counters the queue pair's share of the context's counters
     */
    ShmReceiver(ShmQueuePair qp, ShmRequester requester, MemorySegment file, int depth, int entrySize,
                CounterSet.Local counters) {
        this.qp = qp;
        this.requester = requester;
        this.file = file;
        this.depth = depth;
        this.entrySize = entrySize;
        this.counters = counters;
    }

    /**
     * Whether the peer published the result of the receive at ring position {@code index}: the pollers'
     * lock-free look (an acquire load of its {@code done} word).
     */
    boolean resultPublished(long index) {
        return (long) LONG.getAcquire(file, ENTRIES + (index % depth) * entrySize + E_DONE) == index + 1;
    }

    /** RESET: the base class restarts both rings at index 0, so forget every descriptor and result. */
    void reset() {
        LONG.setVolatile(file, HEAD, 0L);
        LONG.setVolatile(file, TAIL, 0L);
        for (int i = 0; i < depth; i++) {
            LONG.setVolatile(file, ENTRIES + (long) i * entrySize + E_DONE, 0L);
        }
    }

    /**
     * Publishes the descriptor of a posted receive: its sges resolved once, now, to (file id, offset) or (private
     * address), plus key slot and rkey, which the sender re-validates before copying. A bad lkey is flagged for the
     * sender to report (receiver LOC_PROT_ERR, sender REM_OP_ERR). Ends with the release store of {@code rq tail}.
     */
    void post(ReceiveSlot slot, long index) {
        long e = ENTRIES + (index % depth) * entrySize;
        LONG.set(file, e + E_DONE, 0L);
        int flags = 0;
        int count = 0;
        for (int i = 0; i < slot.sgeCount; i++) {
            int len = slot.sgeLength[i];
            if (len == 0) {
                continue;
            }
            SoftMemoryRegion found = qp.checkedLocalRegion(slot.sgeAddress[i], len, slot.sgeLkey[i], true);
            if (!(found instanceof ShmMemoryRegion region) || region.keySlot() < 0) {
                flags |= FLAG_BAD_LKEY;
                break;
            }
            long s = e + E_SGES + (long) count * SGE_SIZE;
            file.set(ValueLayout.JAVA_INT, s + S_KIND, region.kind());
            file.set(ValueLayout.JAVA_INT, s + S_LENGTH, len);
            file.set(ValueLayout.JAVA_LONG, s + S_FILE_ID, region.fileId());
            file.set(ValueLayout.JAVA_LONG, s + S_OFFSET, region.kind() == ShmKeyTable.KIND_FILE
                ? region.fileOffset() + (slot.sgeAddress[i] - region.address()) : slot.sgeAddress[i]);
            file.set(ValueLayout.JAVA_INT, s + S_SLOT, region.keySlot());
            file.set(ValueLayout.JAVA_INT, s + S_RKEY, region.rkey());
            count++;
        }
        file.set(ValueLayout.JAVA_INT, e + E_SGE_COUNT, count);
        file.set(ValueLayout.JAVA_INT, e + E_FLAGS, flags);
        file.set(ValueLayout.JAVA_LONG, e + E_TOTAL, slot.length);
        // Release: a sender that sees the new tail sees the whole descriptor.
        LONG.setRelease(file, TAIL, index + 1);
    }

    /** Completes receives whose results the peer published, in order (must hold the lock). */
    int drain() {
        int work = 0;
        while (qp.receiveHead() < qp.receiveTail()) {
            long index = qp.receiveHead();
            long e = ENTRIES + (index % depth) * entrySize;
            if ((long) LONG.getAcquire(file, e + E_DONE) != index + 1) {
                break;
            }
            int statusOrdinal = file.get(ValueLayout.JAVA_INT, e + E_STATUS);
            int opcodeOrdinal = file.get(ValueLayout.JAVA_INT, e + E_OPCODE);
            WorkCompletionStatus status = statusOrdinal >= 0 && statusOrdinal < STATUSES.length
                ? STATUSES[statusOrdinal] : WorkCompletionStatus.GENERAL_ERR;
            WorkCompletionOpcode opcode = opcodeOrdinal >= 0 && opcodeOrdinal < OPCODES.length
                && OPCODES[opcodeOrdinal].isReceive() ? OPCODES[opcodeOrdinal] : WorkCompletionOpcode.RECV;
            int byteLength = file.get(ValueLayout.JAVA_INT, e + E_BYTE_LEN);
            if (status == WorkCompletionStatus.SUCCESS) {
                counters.increment(Counter.RDMA_RECVS);
                counters.add(Counter.PORT_RCV_DATA, byteLength);
                counters.increment(Counter.PORT_RCV_PACKETS);
            }
            qp.completeReceived(status, opcode, byteLength, file.get(ValueLayout.JAVA_INT, e + E_IMM),
                file.get(ValueLayout.JAVA_INT, e + E_WITH_IMM) != 0, file.get(ValueLayout.JAVA_INT, e + E_SRC_QPN));
            work++;
        }
        return work;
    }

    /**
     * The ring's part of a flush, after the state word said ERR (senders stop): claims every unclaimed descriptor
     * with one CAS on {@code rq head}, then waits (bounded to {@link #FLUSH_WAIT_NS}, and only while the peer lives)
     * for the descriptors a sender had already claimed to be finished, and completes those with their real result.
     * The base class flushes the rest.
     */
    void reclaimBeforeFlush() {
        long receiveTail = qp.receiveTail();
        long head;
        do {
            head = (long) LONG.getVolatile(file, HEAD);
        } while (head < receiveTail && !LONG.compareAndSet(file, HEAD, head, receiveTail));
        long claimedBySender = Math.min(head, receiveTail);
        long deadline = System.nanoTime() + FLUSH_WAIT_NS;
        drain();
        while (qp.receiveHead() < claimedBySender && System.nanoTime() - deadline < 0
            && requester.peerMayBeAlive()) {
            LockSupport.parkNanos(50_000);
            drain();
        }
    }
}
