package io.jccl.collectives;

import io.jccl.collectives.core.Signature;
import io.jccl.collectives.message.Exchange;
import io.jccl.collectives.message.MessagePath;
import io.jccl.collectives.message.Peer;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;

/**
 * Point-to-point sends and receives (NCCL's {@code ncclSend}/{@code ncclRecv} with group calls): a call outside a
 * group runs at once; calls between {@link #start} and {@link #end} are queued and then run as one exchange, so a
 * rank can send to and receive from several peers without deadlock. Transfers with one peer are matched in call
 * order by a per-peer, per-direction sequence number (they involve two ranks only, so they do not advance the
 * communicator's collective sequence).
 */
final class PointToPoint {
    /** One queued send or receive. */
    record Pending(boolean send, MemorySegment buf, long count, DataType type, int peer) {
        long bytes() {
            return count * type.sizeBytes();
        }
    }

    private List<Pending> group;

    /** Opens a group. */
    void start() {
        if (group != null) {
            throw new IllegalStateException("groupStart() while a group is open");
        }
        group = new ArrayList<>();
    }

    /** Closes the group and returns its calls (to run together). */
    List<Pending> end() {
        if (group == null) {
            throw new IllegalStateException("groupEnd() without groupStart()");
        }
        List<Pending> ops = group;
        group = null;
        return ops;
    }

    /** Checks {@code op} (a peer other than this rank, a buffer large enough); queues it in an open group. */
    boolean queue(Pending op, int rank, int size) {
        if (op.peer() < 0 || op.peer() >= size || op.peer() == rank) {
            throw new IllegalArgumentException("peer " + op.peer() + " is not another rank of 0.." + (size - 1));
        }
        if (op.count() < 0 || op.type() == null) {
            throw new IllegalArgumentException(op.type() == null ? "data type is null"
                : "count " + op.count() + " is negative");
        }
        CollectiveCall.checkSize(op.buf(), CollectiveCall.bytes(op.count(), op.type().sizeBytes(), "count "
            + op.count() + " of " + op.type()), op.send() ? "send" : "recv");
        if (group != null) {
            group.add(op);
            return true;
        }
        return false;
    }

    /** Runs {@code ops} as one exchange over {@code path}. */
    static void run(List<Pending> ops, MessagePath path, Exchange exchange) {
        // Heap sends need native copies that live until the whole group is done (one per send: running part of a
        // group early could deadlock against a peer's group).
        try (Arena copies = Arena.ofShared()) {
            for (Pending op : ops) {
                Peer p = path.peer(op.peer());
                long seq = op.send() ? p.nextSendSequence() : p.nextReceiveSequence();
                Signature s = new Signature().set(seq, Collective.SEND_RECV, op.count(), op.type(), null, -1);
                long bytes = op.bytes();
                if (op.send()) {
                    MemorySegment src = op.buf();
                    if (!src.isNative()) {
                        src = copies.allocate(Math.max(1, bytes), 64).asSlice(0, bytes);
                        MemorySegment.copy(op.buf(), 0, src, 0, bytes);
                    }
                    exchange.send(p, s, src, 0, bytes);
                } else {
                    exchange.receive(p, s, op.buf(), 0, bytes, null, null);
                }
            }
            exchange.run();
        }
    }
}
