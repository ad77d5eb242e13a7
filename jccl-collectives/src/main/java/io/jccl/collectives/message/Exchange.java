package io.jccl.collectives.message;

import io.jccl.collectives.CollectiveException;
import io.jccl.collectives.DataType;
import io.jccl.collectives.ReduceOp;
import io.jccl.collectives.core.Signature;
import io.jccl.collectives.core.WaitPolicy;
import io.jccl.collectives.kernel.ReduceKernels;
import io.jccl.common.idle.AdaptiveSpinIdleStrategy;
import io.jccl.verbs.MemoryRegion;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * The exchange loop of the message path, what every message-path algorithm is written against (Gloo's algorithms
 * see only pairs and buffers): an algorithm adds {@link #send}s and {@link #receive}s to the peers of its group
 * ({@link #peer}, {@link #groupRank}, {@link #groupSize}) and {@link #run}s them; run returns when all are done.
 * Transfers in one direction with one peer run in the order they were added (FIFO streams); a send can be
 * pipelined behind a receive ({@link Transfer#after}). Every chunk header carries the operation's signature, so a
 * peer running a different operation is reported as a mismatch instead of corrupting data. One per communicator;
 * only the thread running the current operation uses it.
 */
public final class Exchange implements WaitPolicy.Subject {
    private final MessagePath path;
    private final WaitPolicy waits;
    private final ReduceKernels kernels;
    private final int rank;
    private final Transfer[] transfers;
    private final int[] world;
    /** Current group of the algorithms (world ranks), its size and this rank's index in it. */
    private int[] group;
    private int groupSize;
    private int groupRank;
    private int added;
    private int active;

    /** The exchange of {@code rank} in a communicator of {@code size} ranks over {@code path}. */
    public Exchange(MessagePath path, WaitPolicy waits, ReduceKernels kernels, int rank, int size) {
        this.path = path;
        this.waits = waits;
        this.kernels = kernels;
        this.rank = rank;
        transfers = new Transfer[4 * size + 8];
        for (int i = 0; i < transfers.length; i++) {
            transfers[i] = new Transfer();
        }
        world = new int[size];
        for (int i = 0; i < size; i++) {
            world[i] = i;
        }
        group = world;
        groupSize = size;
        groupRank = rank;
    }

    /** The reduction kernels (algorithms divide by the group size for AVG). */
    public ReduceKernels kernels() {
        return kernels;
    }

    /** The message path underneath (point-to-point calls address peers by world rank). */
    public MessagePath path() {
        return path;
    }

    // ------------------------------------------------------------------------------------------------ groups

    /** The peer at group index {@code i} (mod the group size). */
    public Peer peer(int i) {
        return path.peer(group[Math.floorMod(i, groupSize)]);
    }

    /** This rank's index in the current group. */
    public int groupRank() {
        return groupRank;
    }

    /** The size of the current group. */
    public int groupSize() {
        return groupSize;
    }

    /** Runs the algorithms on a subset of ranks ({@code members} in order; this rank among them). */
    public void useGroup(int[] members) {
        int me = -1;
        for (int i = 0; i < members.length; i++) {
            if (members[i] == rank) {
                me = i;
            }
        }
        if (me < 0) {
            throw new IllegalStateException("rank " + rank + " is not in group " + java.util.Arrays.toString(members));
        }
        group = members;
        groupSize = members.length;
        groupRank = me;
    }

    /** Back to the whole communicator. */
    public void useWorld() {
        group = world;
        groupSize = world.length;
        groupRank = rank;
    }

    // ------------------------------------------------------------------------------------------------ transfers

    private Transfer add() {
        return transfers[added++].reset();
    }

    /** Adds a send of {@code len} bytes of {@code seg} (native) from {@code off} to {@code p}. */
    public Transfer send(Peer p, Signature sig, MemorySegment seg, long off, long len) {
        Transfer x = add();
        x.peer = p;
        x.send = true;
        x.seg = seg;
        x.off = off;
        x.len = len;
        x.sig = sig;
        MemoryRegion r = path.sourceRegion(p.device, seg);
        x.region = r;
        x.regionOff = RegistrationCache.offsetIn(r, seg) + off;
        return x;
    }

    /**
     * Adds a receive of {@code len} bytes from {@code p} into {@code seg} at {@code off}: copied, or, with a
     * {@code reduceType}, combined with what is there ({@link Transfer#reduceWith} names another operand).
     */
    public Transfer receive(Peer p, Signature sig, MemorySegment seg, long off, long len, DataType reduceType,
                            ReduceOp op) {
        Transfer x = add();
        x.peer = p;
        x.send = false;
        x.seg = seg;
        x.off = off;
        x.len = len;
        x.sig = sig;
        x.reduce = reduceType != null;
        x.type = reduceType;
        x.op = op;
        return x;
    }

    /**
     * Runs the transfers added since the last run until all are done and their sends completed (all but those
     * copied at post time, which later polls reap). Waits with the message idle strategy: an adaptive spin, then
     * yield and park, checking abort, deadline and the needed peers' health.
     */
    public void run() {
        int n = added;
        active = n;
        waits.beginWait();
        AdaptiveSpinIdleStrategy idle = waits.message();
        idle.startWait();
        long spinLimit = idle.limitNs();
        long startNs = System.nanoTime();
        boolean waited = false;
        try {
            // Sends go out before the first poll: that poll would otherwise flush the ACK a transport may be
            // holding back for this rank's next message to carry (tcp: one write instead of two per exchange;
            // docs/collectives.md, "Message path protocol").
            for (int i = 0; i < n; i++) {
                Transfer x = transfers[i];
                if (x.send && !x.finished && !blocked(i)) {
                    pumpSend(x);
                }
            }
            while (true) {
                int work = path.poll();
                boolean allDone = true;
                for (int i = 0; i < n; i++) {
                    Transfer x = transfers[i];
                    if (x.finished || blocked(i)) {
                        if (!x.finished) {
                            allDone = false;
                        }
                        continue;
                    }
                    work += x.send ? pumpSend(x) : pumpReceive(x);
                    if (!x.finished) {
                        allDone = false;
                    }
                }
                boolean sendsPending = false;
                for (int i = 0; i < n; i++) {
                    Transfer x = transfers[i];
                    Peer p = x.peer;
                    // Credits go back only while more chunks from that peer are expected in this exchange: a peer
                    // that sent everything may already have finished (and closed), and it gets the deferred
                    // credits with the next chunk this rank sends it, or when this rank expects one from it later.
                    if (!x.send && !x.finished && p.pendingCredits > 0) {
                        path.flushCredits(p);
                    }
                    // Sends copied at post time (inline) are not waited for: later polls reap them.
                    if (p.sendsAwaited > 0) {
                        sendsPending = true;
                    }
                }
                if (allDone && !sendsPending) {
                    if (waited && spinLimit > 0) {
                        // Adapts the spin without the direct path's CPU evidence (see AdaptiveSpinIdleStrategy).
                        idle.waitEnded(spinLimit, System.nanoTime() - startNs);
                    }
                    return;
                }
                if (work > 0) {
                    idle.reset();
                    continue;
                }
                waited = true;
                if (!idle.spinning()) {
                    waits.check(this);
                }
                idle.idle();
            }
        } catch (CollectiveException.PeerFailure e) {
            // The peer that failed is often not the one this rank waited for: a rank that timed out breaks all its
            // links, and its neighbours learn of it before their own deadline. Saying what this rank still waited
            // for lets the job's reports lead to the rank that never came (failure path only, so the string is fine).
            throw new CollectiveException.PeerFailure(e.rank(), e.getMessage() + "; rank " + rank
                + " was waiting for " + describeWait(n));
        } finally {
            added = 0;
            active = 0;
        }
    }

    @Override
    public String describeWait() {
        return active > 0 ? describeWait(active) : "progress";
    }

    /** Only peers this exchange still needs: a peer that delivered everything may have closed already. */
    @Override
    public void checkHealth() {
        for (int i = 0; i < active; i++) {
            Transfer x = transfers[i];
            if (!x.finished || (x.send && x.peer.sendsAwaited > 0)) {
                path.checkPeer(x.peer);
            }
        }
    }

    private String describeWait(int n) {
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < n; i++) {
            Transfer x = transfers[i];
            if (!x.finished) {
                sb.append(x.send ? "send to rank " : "data from rank ").append(x.peer.rank).append(" (")
                    .append(x.done).append('/').append(x.len).append(" bytes")
                    .append(x.rdv == Transfer.RDV_ACTIVE ? ", rendezvous" : x.rdv == Transfer.RDV_WANTED && x.send
                        ? ", waiting for the receiver's clear-to-send" : "")
                    .append(x.send && !path.canSend(x.peer) ? ", no credit: peer has not consumed earlier chunks" : "")
                    .append("); ");
            } else if (x.send && x.peer.sendsAwaited > 0) {
                sb.append("send completions from rank ").append(x.peer.rank).append("; ");
            }
        }
        return sb.append("in ").append(transfers[0].sig).toString();
    }

    /** An earlier unfinished transfer in the same direction with the same peer goes first (FIFO streams). */
    private boolean blocked(int i) {
        Transfer x = transfers[i];
        for (int j = 0; j < i; j++) {
            Transfer y = transfers[j];
            if (!y.finished && y.send == x.send && y.peer == x.peer) {
                return true;
            }
        }
        return false;
    }

    private static CollectiveException.Mismatch mismatch(String message, Signature local, int otherRank,
                                                         String other) {
        return new CollectiveException.Mismatch("collective mismatch: " + message, local.toString(), otherRank,
            other);
    }

    private int pumpSend(Transfer x) {
        int work = 0;
        Peer p = x.peer;
        if (x.rdv == Transfer.RDV_WANTED) {
            if (p.ctsConsumed >= p.ctsArrived) {
                return 0;
            }
            MemorySegment inbox = p.inbox.segment();
            long at = path.ctsOffset(p, p.ctsConsumed);
            long length = inbox.get(ValueLayout.JAVA_LONG_UNALIGNED, at + MessagePath.CTS_LENGTH);
            if (!x.sig.matches(inbox, at) || Signature.chunkBytes(inbox, at) != -1 || length != x.len) {
                String other = Signature.describe(inbox, at);
                throw mismatch("rank " + rank + " is running " + x.sig + " and sends " + x.len + " bytes to rank "
                    + p.rank + ", but rank " + p.rank + " is ready for " + length + " bytes of " + other, x.sig,
                    p.rank, other);
            }
            p.ctsConsumed++;
            x.remoteAddress = inbox.get(ValueLayout.JAVA_LONG_UNALIGNED, at + MessagePath.CTS_ADDRESS);
            x.remoteKey = inbox.get(ValueLayout.JAVA_INT_UNALIGNED, at + MessagePath.CTS_RKEY);
            x.rdv = x.remoteAddress != 0 ? Transfer.RDV_ACTIVE : Transfer.EAGER;
            work++;
        }
        if (x.rdv == Transfer.RDV_ACTIVE) {
            while (!x.finished && path.canSendPiece(p)) {
                int n = (int) Math.min(x.len - x.done, p.chunkBytes);
                if (x.after != null && x.after.done < x.done + n) {
                    break;
                }
                path.sendPiece(p, x.region, x.regionOff + x.done, n, x.remoteAddress + x.done, x.remoteKey);
                x.done += n;
                work++;
                if (x.done >= x.len) {
                    x.finished = true;
                }
            }
            return work;
        }
        while (!x.finished && path.canSend(p)) {
            int n = (int) Math.min(x.len - x.done, p.chunkBytes);
            if (x.after != null && x.after.done < x.done + n) {
                break;
            }
            path.sendChunk(p, x.sig, x.region, x.regionOff + x.done, n);
            x.done += n;
            work++;
            if (x.done >= x.len) {
                x.finished = true;
            }
        }
        return work;
    }

    private int pumpReceive(Transfer x) {
        int work = 0;
        Peer p = x.peer;
        MemorySegment inbox = p.inbox.segment();
        if (x.rdv == Transfer.RDV_WANTED) {
            // First turn of this transfer (earlier ones from this peer are done): offer the destination.
            if (!path.canPostControl(p)) {
                return 0;
            }
            x.rdv = path.sendClearToSend(p, x.sig, x.seg, x.off, x.len) ? Transfer.RDV_ACTIVE : Transfer.EAGER;
            work++;
        }
        if (x.rdv == Transfer.RDV_ACTIVE) {
            // The data is in place when a piece's completion arrives (RC delivers writes in order).
            while (!x.finished && p.piecesConsumed < p.piecesArrived) {
                x.done += Math.min(x.len - x.done, p.chunkBytes);
                p.piecesConsumed++;
                work++;
                if (x.done >= x.len) {
                    x.finished = true;
                }
            }
            if (!x.finished && p.consumed < p.arrived) {
                // A chunk in the inbox before the last piece (completions arrive in order): the peer runs
                // something else. Chunks of the peer's next operation may arrive only after the last piece.
                long slot = path.nextSlotOffset(p);
                String other = Signature.describe(inbox, slot);
                throw mismatch("rank " + rank + " is running " + x.sig + " and expected " + x.len
                    + " bytes by rendezvous from rank " + p.rank + ", but rank " + p.rank + " sent a chunk of "
                    + Signature.chunkBytes(inbox, slot) + " bytes for " + other, x.sig, p.rank, other);
            }
            return work;
        }
        while (!x.finished && p.consumed < p.arrived) {
            long slot = path.nextSlotOffset(p);
            int expect = (int) Math.min(x.len - x.done, p.chunkBytes);
            if (!x.sig.matches(inbox, slot) || Signature.chunkBytes(inbox, slot) != expect) {
                String other = Signature.describe(inbox, slot);
                throw mismatch("rank " + rank + " is running " + x.sig + " and expected " + expect
                    + " bytes from rank " + p.rank + ", but rank " + p.rank + " sent " + Signature.chunkBytes(inbox,
                    slot) + " bytes for " + other, x.sig, p.rank, other);
            }
            if (expect > 0) {
                long at = x.off + x.done;
                if (x.reduce) {
                    kernels.reduce(x.type, x.op.combiner(), x.src != null ? x.src : x.seg, at, inbox,
                        slot + Signature.BYTES, x.seg, at, expect / x.type.sizeBytes(), 0);
                } else {
                    MemorySegment.copy(inbox, slot + Signature.BYTES, x.seg, at, expect);
                }
            }
            x.done += expect;
            p.consumed++;
            p.pendingCredits++;
            work++;
            if (x.done >= x.len) {
                x.finished = true;
            }
        }
        return work;
    }
}
