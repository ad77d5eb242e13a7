package io.jccl.collectives;

import io.jccl.collectives.kernel.Kernels;
import io.jccl.collectives.kernel.ReduceKernels;
import io.jccl.common.CpuAffinity;
import io.jccl.common.Log;
import io.jccl.common.idle.BackoffIdleStrategy;
import io.jccl.verbs.MemoryRegion;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;
import java.util.List;

/**
 * The algorithms and the exchange loop. One engine per communicator; only the thread executing the current
 * operation uses it. Every wait checks, while idle: the abort flag, the operation's deadline and (every ~100 ms)
 * the peers' health.
 */
final class Engine {
    private static final VarHandle LONG = ValueLayout.JAVA_LONG.varHandle();
    private static final long HEALTH_INTERVAL_NS = 100_000_000L;

    final Communicator comm;
    final Transport t;
    final int rank;
    final int size;
    final ReduceKernels kernels = Kernels.get();
    private final Xfer[] xfers;
    private BackoffIdleStrategy idle = new BackoffIdleStrategy();

    /**
     * More ranks on this host than cores (Open MPI's "oversubscribed"): spin only briefly and then yield for long,
     * so the peer this rank waits for gets the core at once, instead of burning the time slice it needs.
     */
    void oversubscribed(int localRanks) {
        if (localRanks > Runtime.getRuntime().availableProcessors()
            && io.jccl.common.Config.value("JCCL_SPIN_US") == null) {
            // Yield at once (Open MPI does the same when oversubscribed): the rank this one waits for is runnable
            // and needs the core; spinning only delays it by the rest of the time slice.
            idle = new BackoffIdleStrategy(0, 5_000_000, BackoffIdleStrategy.PARK_MAX_NS);
            directIdle = idle;
            directSpin.off();
            messageSpin.off();
        }
    }

    /**
     * Every local rank's collective thread is bound to its own CPU (JCCL_CPU_BIND=core): a peer never shares this
     * rank's core, so a wait that ends right after a yield is not evidence that it does, and the spin stays long.
     */
    boolean coresApart;
    /**
     * Control block: 1 + the CPU this rank's collective thread last gave up in a direct-path wait (0: unknown), read
     * by the peers; a cache line of its own, written only on the slow path of a wait.
     */
    static final long CTRL_CPU = 64;
    /** Shortest adaptive spin of a wait (a lock-step peer on another core arrives within it). */
    static final long MIN_SPIN_NS = 1_000;
    /** Spin of direct-path waits ({@link #awaitArrival}) and of message-path waits ({@link #run}). */
    private final AdaptiveSpin directSpin = new AdaptiveSpin(BackoffIdleStrategy.SPIN_NS);
    private final AdaptiveSpin messageSpin = new AdaptiveSpin(BackoffIdleStrategy.SPIN_NS);

    /**
     * A spin limit that adapts like a JVM monitor's, up to {@code JCCL_SPIN_US} (0 when oversubscribed): a wait
     * that ended while spinning lets the next spin be longer; eight waits in a row that ended right after the
     * first yields (the peer ran only once this rank gave up its core) halve it, down to {@link #MIN_SPIN_NS}; a
     * wait for a late peer (busy copying, or yielding on another core) sets it to twice that wait.
     */
    static final class AdaptiveSpin {
        private long maxNs;
        private long limitNs;
        private int quickWaits;

        AdaptiveSpin(long maxNs) {
            this.maxNs = maxNs;
            this.limitNs = maxNs;
        }

        /** Never spin (oversubscribed hosts). */
        void off() {
            maxNs = 0;
            limitNs = 0;
        }

        long limitNs() {
            return limitNs;
        }

        long maxNs() {
            return maxNs;
        }

        /** A wait with spin {@code limit} ended while spinning: spin a quarter longer next time. */
        void endedSpinning(long limit) {
            limitNs = Math.min(maxNs, limit + (limit >> 2) + 100);
            quickWaits = 0;
        }

        /** A wait ended right after giving up the core: eight in a row halve the spin. */
        void endedQuickly(long limit) {
            if (++quickWaits >= 8) {
                quickWaits = 0;
                limitNs = Math.max(MIN_SPIN_NS, limit >> 1);
            }
        }

        /** The peer was late by {@code waitedNs}: cover such a wait next time (if under the maximum). */
        void peerLate(long limit, long waitedNs) {
            quickWaits = 0;
            if (waitedNs < maxNs) {
                limitNs = Math.min(maxNs, Math.max(limit, 2 * waitedNs));
            }
        }

        /** A wait that says nothing about sharing a core. */
        void neutral() {
            quickWaits = 0;
        }
    }
    /** Idler of direct-path waits after the adaptive spin: yields at once, then parks. */
    private BackoffIdleStrategy directIdle = new BackoffIdleStrategy(0, BackoffIdleStrategy.YIELD_NS, BackoffIdleStrategy.PARK_MAX_NS);
    private final MemorySegment[] sources;
    private final int[] world;
    /** Current group of the message-path algorithms (world ranks), its size and this rank's index in it. */
    private int[] group;
    private int gsize;
    private int grank;
    private final long[] sourceOffsets;
    /** Deadline of the current operation; 0 until it is known (see {@link #deadline()}). */
    long deadlineNs;
    private long opTimeoutNs;
    private long opHandle = -1;

    /**
     * A new operation: its recorder handle, the clock reading at its start (0 when the communicator did not read
     * the clock for it) and its timeout.
     */
    void opBegan(long handle, long nowNs, long timeoutNs) {
        opHandle = handle;
        opTimeoutNs = timeoutNs;
        deadlineNs = nowNs != 0 ? nowNs + timeoutNs : 0;
    }

    /**
     * The current operation's deadline; an operation begun without a clock reading gets it now, at its first wait
     * that outlasted the spin, and the flight recorder starts timing it from here.
     */
    long deadline() {
        if (deadlineNs == 0) {
            long now = System.nanoTime();
            deadlineNs = now + opTimeoutNs;
            comm.flightRecorder().timeFrom(opHandle, now);
        }
        return deadlineNs;
    }
    long directEpoch;
    long directRound;
    private long nextHealthNs;
    /** The peer a direct barrier waits for (for timeout messages), or -1. */
    private int waitingPeer = -1;
    private Signature waitingSig;

    Engine(Communicator comm, Transport t) {
        this.comm = comm;
        this.t = t;
        this.rank = comm.rank();
        this.size = comm.size();
        xfers = new Xfer[4 * size + 8];
        for (int i = 0; i < xfers.length; i++) {
            xfers[i] = new Xfer();
        }
        sources = new MemorySegment[size];
        world = new int[size];
        for (int i = 0; i < size; i++) {
            world[i] = i;
        }
        group = world;
        gsize = size;
        grank = rank;
        sourceOffsets = new long[size];
        blockOffsets = new long[size];
        outputs = new MemorySegment[size];
        outputOffsets = new long[size];
    }

    // ------------------------------------------------------------------------------------------------ waiting

    /** Called in every idle iteration of a wait: abort, deadline, health. */
    void idle(int work, Peer focus) {
        idle(work, focus, idle);
    }

    private void idle(int work, Peer focus, BackoffIdleStrategy idle) {
        if (work > 0) {
            idle.reset();
            return;
        }
        comm.checkNotAborted();
        long now = System.nanoTime();
        if (now - deadline() > 0) {
            throw comm.timeout("waiting for " + (active > 0 ? describeWait(active)
                : waitingPeer >= 0 ? "rank " + waitingPeer + " to reach the barrier of " + waitingSig + " (direct path)"
                : "progress"));
        }
        if (now - nextHealthNs > 0) {
            nextHealthNs = now + HEALTH_INTERVAL_NS;
            if (focus != null) {
                t.checkPeer(focus);
            } else {
                // Only peers this exchange still needs: a peer that delivered everything may have closed already.
                for (int i = 0; i < active; i++) {
                    Xfer x = xfers[i];
                    if (!x.finished || (x.send && x.peer.sendsAwaited > 0)) {
                        t.checkPeer(x.peer);
                    }
                }
            }
        }
        idle.idle();
    }

    void beginWait() {
        idle.reset();
        nextHealthNs = System.nanoTime() + HEALTH_INTERVAL_NS;
    }

    // ------------------------------------------------------------------------------------------------ exchange

    private int nx;
    private int active;

    private Xfer add() {
        return xfers[nx++].reset();
    }

    Xfer sendX(Peer p, Signature sig, MemorySegment seg, long off, long len) {
        Xfer x = add();
        x.peer = p;
        x.send = true;
        x.seg = seg;
        x.off = off;
        x.len = len;
        x.sig = sig;
        MemoryRegion r = comm.regionFor(p.device, seg);
        x.region = r;
        x.regionOff = comm.lastRegionOffset(p.device) + off;
        return x;
    }

    Xfer recvX(Peer p, Signature sig, MemorySegment seg, long off, long len, DataType reduceType, ReduceOp op) {
        Xfer x = add();
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
     * copied at post time, which later polls reap).
     */
    void run() {
        int n = nx;
        active = n;
        beginWait();
        BackoffIdleStrategy after = messageSpin.maxNs() == 0 ? idle : messageIdle;
        after.reset();
        long spinLimit = messageSpin.limitNs();
        long startNs = System.nanoTime();
        long idleSinceNs = 0;
        boolean waited = false;
        int yields = 0;
        try {
            // Sends go out before the first poll: that poll would otherwise flush the ACK a transport may be
            // holding back for this rank's next message to carry (tcp: one write instead of two per exchange;
            // measured 63 000 standalone ACKs against 16 carried in a 2-rank 8-byte all-reduce run).
            for (int i = 0; i < n; i++) {
                Xfer x = xfers[i];
                if (x.send && !x.finished && !blocked(i)) {
                    pumpSend(x);
                }
            }
            while (true) {
                int work = t.poll();
                boolean allDone = true;
                for (int i = 0; i < n; i++) {
                    Xfer x = xfers[i];
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
                    Xfer x = xfers[i];
                    Peer p = x.peer;
                    // Credits go back only while more chunks from that peer are expected in this exchange: a peer
                    // that sent everything may already have finished (and closed), and it gets the deferred
                    // credits with the next chunk this rank sends it, or when this rank expects one from it later.
                    if (!x.send && !x.finished && p.pendingCredits > 0) {
                        t.flushCredits(p);
                    }
                    // Sends copied at post time (inline) are not waited for: later polls reap them.
                    if (p.sendsAwaited > 0) {
                        sendsPending = true;
                    }
                }
                if (allDone && !sendsPending) {
                    if (waited && spinLimit > 0) {
                        adaptMessageSpin(spinLimit, yields, System.nanoTime() - startNs);
                    }
                    return;
                }
                if (work > 0) {
                    idleSinceNs = 0;
                    after.reset();
                    continue;
                }
                // Adaptive spin (see adaptMessageSpin), then yield, then park.
                long now = System.nanoTime();
                if (idleSinceNs == 0) {
                    idleSinceNs = now;
                    waited = true;
                }
                if (now - idleSinceNs < spinLimit) {
                    Thread.onSpinWait();
                } else {
                    idle(0, null, after);
                    yields++;
                }
            }
        } catch (CollectiveException.PeerFailure e) {
            // The peer that failed is often not the one this rank waited for: a rank that timed out breaks all its
            // links, and its neighbours learn of it before their own deadline. Saying what this rank still waited
            // for lets the job's reports lead to the rank that never came (failure path only, so the string is fine).
            throw new CollectiveException.PeerFailure(e.rank(), e.getMessage() + "; rank " + rank
                + " was waiting for " + describeWait(n));
        } finally {
            nx = 0;
            active = 0;
        }
    }

    /**
     * Idler of message-path waits after the adaptive spin: yields at once, for as long as the fixed spin and yield
     * phases together lasted, then parks (a long wait parks no earlier than with a fixed spin).
     */
    private final BackoffIdleStrategy messageIdle = new BackoffIdleStrategy(0, BackoffIdleStrategy.SPIN_NS + BackoffIdleStrategy.YIELD_NS,
        BackoffIdleStrategy.PARK_MAX_NS);
    /**
     * Adapts the spin of message-path waits with the rules of {@link AdaptiveSpin}, without the CPU evidence of
     * the direct path: a wait that needed no yield ended while spinning, one or two yields count as quick, more as
     * a late peer. Measured over tcp, 2 ranks on the shared 2-core VM: when both ranks land on one core, a fixed
     * 50 µs spin made every 8-byte all-reduce cost one whole spin (40–80 µs per op, ~50 polls per wait), against
     * 12–20 µs when each rank has a core.
     */
    private void adaptMessageSpin(long limit, int yields, long waitedNs) {
        if (yields == 0) {
            messageSpin.endedSpinning(limit);
        } else if (yields <= 2) {
            messageSpin.endedQuickly(limit);
        } else {
            messageSpin.peerLate(limit, waitedNs);
        }
    }

    private String describeWait(int n) {
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < n; i++) {
            Xfer x = xfers[i];
            if (!x.finished) {
                sb.append(x.send ? "send to rank " : "data from rank ").append(x.peer.rank).append(" (")
                    .append(x.done).append('/').append(x.len).append(" bytes")
                    .append(x.rdv == Xfer.RDV_ACTIVE ? ", rendezvous" : x.rdv == Xfer.RDV_WANTED && x.send
                        ? ", waiting for the receiver's clear-to-send" : "")
                    .append(x.send && !t.canSend(x.peer) ? ", no credit: peer has not consumed earlier chunks" : "")
                    .append("); ");
            } else if (x.send && x.peer.sendsAwaited > 0) {
                sb.append("send completions from rank ").append(x.peer.rank).append("; ");
            }
        }
        return sb.append("in ").append(xfers[0].sig).toString();
    }

    /** An earlier unfinished transfer in the same direction with the same peer goes first (FIFO streams). */
    private boolean blocked(int i) {
        Xfer x = xfers[i];
        for (int j = 0; j < i; j++) {
            Xfer y = xfers[j];
            if (!y.finished && y.send == x.send && y.peer == x.peer) {
                return true;
            }
        }
        return false;
    }

    private int pumpSend(Xfer x) {
        int work = 0;
        Peer p = x.peer;
        if (x.rdv == Xfer.RDV_WANTED) {
            if (p.ctsConsumed >= p.ctsArrived) {
                return 0;
            }
            MemorySegment inbox = p.inbox.segment();
            long at = t.ctsOffset(p, p.ctsConsumed);
            long length = inbox.get(ValueLayout.JAVA_LONG_UNALIGNED, at + Transport.CTS_LENGTH);
            if (!x.sig.matches(inbox, at) || Signature.chunkBytes(inbox, at) != -1 || length != x.len) {
                throw comm.mismatch("rank " + rank + " is running " + x.sig + " and sends " + x.len + " bytes to rank "
                    + p.rank + ", but rank " + p.rank + " is ready for " + length + " bytes of "
                    + Signature.describe(inbox, at));
            }
            p.ctsConsumed++;
            x.remoteAddress = inbox.get(ValueLayout.JAVA_LONG_UNALIGNED, at + Transport.CTS_ADDRESS);
            x.remoteKey = inbox.get(ValueLayout.JAVA_INT_UNALIGNED, at + Transport.CTS_RKEY);
            x.rdv = x.remoteAddress != 0 ? Xfer.RDV_ACTIVE : Xfer.EAGER;
            work++;
        }
        if (x.rdv == Xfer.RDV_ACTIVE) {
            while (!x.finished && t.canSendPiece(p)) {
                int n = (int) Math.min(x.len - x.done, p.chunkBytes);
                if (x.after != null && x.after.done < x.done + n) {
                    break;
                }
                t.sendPiece(p, x.region, x.regionOff + x.done, n, x.remoteAddress + x.done, x.remoteKey);
                x.done += n;
                work++;
                if (x.done >= x.len) {
                    x.finished = true;
                }
            }
            return work;
        }
        while (!x.finished && t.canSend(p)) {
            int n = (int) Math.min(x.len - x.done, p.chunkBytes);
            if (x.after != null && x.after.done < x.done + n) {
                break;
            }
            t.sendChunk(p, x.sig, x.region, x.regionOff + x.done, n);
            x.done += n;
            work++;
            if (x.done >= x.len) {
                x.finished = true;
            }
        }
        return work;
    }

    private int pumpReceive(Xfer x) {
        int work = 0;
        Peer p = x.peer;
        MemorySegment inbox = p.inbox.segment();
        if (x.rdv == Xfer.RDV_WANTED) {
            // First turn of this transfer (earlier ones from this peer are done): offer the destination.
            if (!t.canPostControl(p)) {
                return 0;
            }
            x.rdv = t.sendClearToSend(p, x.sig, x.seg, x.off, x.len) ? Xfer.RDV_ACTIVE : Xfer.EAGER;
            work++;
        }
        if (x.rdv == Xfer.RDV_ACTIVE) {
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
                long slot = t.nextSlotOffset(p);
                throw comm.mismatch("rank " + rank + " is running " + x.sig + " and expected " + x.len
                    + " bytes by rendezvous from rank " + p.rank + ", but rank " + p.rank + " sent a chunk of "
                    + Signature.chunkBytes(inbox, slot) + " bytes for " + Signature.describe(inbox, slot));
            }
            return work;
        }
        while (!x.finished && p.consumed < p.arrived) {
            long slot = t.nextSlotOffset(p);
            int expect = (int) Math.min(x.len - x.done, p.chunkBytes);
            if (!x.sig.matches(inbox, slot) || Signature.chunkBytes(inbox, slot) != expect) {
                throw comm.mismatch("rank " + rank + " is running " + x.sig + " and expected " + expect
                    + " bytes from rank " + p.rank + ", but rank " + p.rank + " sent " + Signature.chunkBytes(inbox,
                    slot) + " bytes for " + Signature.describe(inbox, slot));
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

    // ------------------------------------------------------------------------------------------------ helpers

    /** The peer at group index {@code i} (mod the group size). */
    Peer peer(int i) {
        return t.peers[group[Math.floorMod(i, gsize)]];
    }

    /** Runs the message-path algorithms on a subset of ranks ({@code members} in order; this rank among them). */
    void useGroup(int[] members) {
        group = members;
        gsize = members.length;
        grank = -1;
        for (int i = 0; i < members.length; i++) {
            if (members[i] == rank) {
                grank = i;
            }
        }
        if (grank < 0) {
            throw new IllegalStateException("rank " + rank + " is not in group " + java.util.Arrays.toString(members));
        }
    }

    /** Back to the whole communicator. */
    void useWorld() {
        group = world;
        gsize = size;
        grank = rank;
    }

    /**
     * Marks a transfer the receiver only copies (no reduction) for rendezvous when it is large enough for its
     * peer's device ({@link Peer#rendezvousBytes}): the receiver registers its destination and sends a
     * clear-to-send, the sender writes straight into it (no copy out of the inbox). Both ends of a transfer must
     * mark it, which the algorithms do by marking sends and receives of the same steps.
     */
    private static Xfer placed(Xfer x) {
        long min = x.peer.rendezvousBytes;
        if (min > 0 && x.len >= min) {
            x.rdv = Xfer.RDV_WANTED;
        }
        return x;
    }

    /**
     * Whether {@code bytes} at the start of {@code a} and of {@code b} share no byte (heap segments: whether they
     * are not views of the same array).
     */
    static boolean disjoint(MemorySegment a, MemorySegment b, long bytes) {
        if (!a.isNative() || !b.isNative()) {
            return a.heapBase().isEmpty() || !a.heapBase().equals(b.heapBase());
        }
        return a.address() + bytes <= b.address() || b.address() + bytes <= a.address();
    }

    static long blockStart(long count, int n, int b) {
        return b * (count / n) + Math.min(b, count % n);
    }

    static long blockCount(long count, int n, int b) {
        return count / n + (b < count % n ? 1 : 0);
    }

    // ------------------------------------------------------------------------------------------------ all-reduce

    /** Ring all-reduce in place on {@code buf} (native): reduce-scatter then all-gather, n-1 steps each. */
    void ringAllReduce(Signature sig, MemorySegment buf, long count, DataType type, ReduceOp op) {
        ringAllReduce(sig, buf, buf, count, type, op);
    }

    /**
     * Ring all-reduce of {@code in} into {@code buf} (both native; the same segment, or disjoint, see
     * {@link #disjoint}). Out of place nothing is copied up front: the first reduce-scatter step sends its block
     * from {@code in}, each received block is reduced with {@code in}'s block into {@code buf}, and every block of
     * {@code buf} is written by the last reduce-scatter step or the all-gather (one 16 MiB copy less per 16 MiB
     * all-reduce).
     */
    void ringAllReduce(Signature sig, MemorySegment in, MemorySegment buf, long count, DataType type, ReduceOp op) {
        int es = type.sizeBytes();
        Peer right = peer(grank + 1);
        Peer left = peer(grank - 1);
        // All steps of a phase form one exchange: step s forwards the block received (and reduced) in step s-1
        // chunk by chunk as it completes, so consecutive steps overlap (pipelined ring).
        Xfer previous = null;
        for (int s = 0; s < gsize - 1; s++) {
            int sb = Math.floorMod(grank - s, gsize);
            int rb = Math.floorMod(grank - s - 1, gsize);
            Xfer out = sendX(right, sig, s == 0 ? in : buf, blockStart(count, gsize, sb) * es,
                blockCount(count, gsize, sb) * es);
            out.after = previous;
            previous = recvX(left, sig, buf, blockStart(count, gsize, rb) * es, blockCount(count, gsize, rb) * es,
                type, op);
            if (in != buf) {
                previous.src = in;
            }
        }
        run();
        int mine = Math.floorMod(grank + 1, gsize);
        if (op == ReduceOp.AVG) {
            kernels.divide(type, buf, blockStart(count, gsize, mine) * es, blockCount(count, gsize, mine), gsize);
        }
        previous = null;
        for (int s = 0; s < gsize - 1; s++) {
            int sb = Math.floorMod(grank + 1 - s, gsize);
            int rb = Math.floorMod(grank - s, gsize);
            Xfer out = placed(sendX(right, sig, buf, blockStart(count, gsize, sb) * es,
                blockCount(count, gsize, sb) * es));
            out.after = previous;
            previous = placed(recvX(left, sig, buf, blockStart(count, gsize, rb) * es,
                blockCount(count, gsize, rb) * es, null, null));
        }
        run();
    }

    /** Binomial-tree reduce of {@code buf} (native, modified) to {@code root}. */
    void treeReduce(Signature sig, MemorySegment buf, long count, DataType type, ReduceOp op, int root) {
        long bytes = count * type.sizeBytes();
        int vr = Math.floorMod(grank - root, gsize);
        for (int mask = 1; mask < gsize; mask <<= 1) {
            if ((vr & mask) != 0) {
                sendX(peer(vr - mask + root), sig, buf, 0, bytes);
                run();
                return;
            }
            if (vr + mask < gsize) {
                recvX(peer(vr + mask + root), sig, buf, 0, bytes, type, op);
                run();
            }
        }
        if (op == ReduceOp.AVG) {
            kernels.divide(type, buf, 0, count, gsize);
        }
    }

    /** Binomial-tree broadcast of {@code buf} (native) from {@code root}. */
    void treeBroadcast(Signature sig, MemorySegment buf, long bytes, int root) {
        int vr = Math.floorMod(grank - root, gsize);
        int mask = 1;
        while (mask < gsize) {
            if ((vr & mask) != 0) {
                placed(recvX(peer(vr - mask + root), sig, buf, 0, bytes, null, null));
                run();
                break;
            }
            mask <<= 1;
        }
        mask >>= 1;
        boolean any = false;
        while (mask > 0) {
            if (vr + mask < gsize) {
                placed(sendX(peer(vr + mask + root), sig, buf, 0, bytes));
                any = true;
            }
            mask >>= 1;
        }
        if (any) {
            run();
        }
    }

    /** Pipelined chain broadcast: root → root+1 → ...; each grank forwards chunks as they arrive. */
    void ringBroadcast(Signature sig, MemorySegment buf, long bytes, int root) {
        int vr = Math.floorMod(grank - root, gsize);
        Xfer in = null;
        if (vr > 0) {
            in = placed(recvX(peer(grank - 1), sig, buf, 0, bytes, null, null));
        }
        if (vr < gsize - 1) {
            Xfer out = placed(sendX(peer(grank + 1), sig, buf, 0, bytes));
            out.after = in;
        }
        run();
    }

    /**
     * Hierarchical all-reduce of {@code buf} (native): binomial reduce to the first rank of {@code local}, all-reduce
     * among {@code leaders} (ring for large vectors, tree below 64 KiB), binomial broadcast inside {@code local}.
     * AVG sums throughout and the leaders divide once by the communicator size.
     */
    void hierAllReduce(Signature sig, MemorySegment buf, long count, DataType type, ReduceOp op, int[] local,
                       int[] leaders) {
        ReduceOp combine = op.combiner();
        long bytes = count * type.sizeBytes();
        boolean leader = local[0] == rank;
        try {
            useGroup(local);
            treeReduce(sig, buf, count, type, combine, 0);
            if (leader) {
                if (leaders.length > 1) {
                    useGroup(leaders);
                    if (bytes >= 64 * 1024) {
                        ringAllReduce(sig, buf, count, type, combine);
                    } else {
                        treeReduce(sig, buf, count, type, combine, 0);
                        treeBroadcast(sig, buf, bytes, 0);
                    }
                }
                if (op == ReduceOp.AVG) {
                    kernels.divide(type, buf, 0, count, size);
                }
            }
            useGroup(local);
            treeBroadcast(sig, buf, bytes, 0);
        } finally {
            useWorld();
        }
    }

    /**
     * Recursive doubling with whole vectors (small messages on the message path): log2(p) exchange steps over the
     * largest power of two p ≤ n; the first 2(n−p) ranks fold in pairs first (the even one hands its vector to the
     * odd one and gets the result back at the end). Each step sends a copy of the running vector from
     * {@code scratch} and reduces the partner's straight into {@code buf}. Both partners combine the same two
     * partial vectors (the kernels' two-operand combine is commutative, bit for bit), so every rank ends with an
     * identical result.
     */
    void rdAllReduce(Signature sig, MemorySegment buf, long count, DataType type, ReduceOp op, MemorySegment scratch) {
        long bytes = count * type.sizeBytes();
        int p2 = Integer.highestOneBit(gsize);
        int rem = gsize - p2;
        int vr = foldIn(sig, buf, bytes, type, op, rem);
        if (vr < 0) {
            return;
        }
        for (int d = 1; d < p2; d <<= 1) {
            int partnerV = vr ^ d;
            int partner = partnerV < rem ? 2 * partnerV + 1 : partnerV + rem;
            MemorySegment.copy(buf, 0, scratch, 0, bytes);
            sendX(peer(partner), sig, scratch, 0, bytes);
            recvX(peer(partner), sig, buf, 0, bytes, type, op);
            run();
        }
        if (op == ReduceOp.AVG) {
            kernels.divide(type, buf, 0, count, gsize);
        }
        if (grank < 2 * rem) {
            sendX(peer(grank - 1), sig, buf, 0, bytes);
            run();
        }
    }

    /**
     * The fold of recursive doubling/halving for a non-power-of-two group: of the first {@code 2 * rem} ranks each
     * even one hands its vector to the odd one after it and gets the result back at the end. Returns this rank's
     * virtual rank among the power-of-two ranks, or -1 when it was an even folder (and {@code buf} now holds the
     * result).
     */
    private int foldIn(Signature sig, MemorySegment buf, long bytes, DataType type, ReduceOp op, int rem) {
        if (grank >= 2 * rem) {
            return grank - rem;
        }
        if ((grank & 1) == 0) {
            sendX(peer(grank + 1), sig, buf, 0, bytes);
            run();
            recvX(peer(grank + 1), sig, buf, 0, bytes, null, null);
            run();
            return -1;
        }
        recvX(peer(grank - 1), sig, buf, 0, bytes, type, op);
        run();
        return grank / 2;
    }

    /** Rabenseifner: recursive-halving reduce-scatter, then recursive-doubling all-gather (any n, with folding). */
    void rhdAllReduce(Signature sig, MemorySegment buf, long count, DataType type, ReduceOp op) {
        int es = type.sizeBytes();
        long bytes = count * es;
        int p2 = Integer.highestOneBit(gsize);
        int rem = gsize - p2;
        int vr = foldIn(sig, buf, bytes, type, op, rem);
        if (vr < 0) {
            return;
        }
        int levels = Integer.numberOfTrailingZeros(p2);
        long[] lo = new long[levels + 1];
        long[] hi = new long[levels + 1];
        long l = 0;
        long h = count;
        int level = 0;
        for (int d = p2 >> 1; d >= 1; d >>= 1, level++) {
            int partnerV = vr ^ d;
            int partner = partnerV < rem ? 2 * partnerV + 1 : partnerV + rem;
            long mid = l + (h - l) / 2;
            lo[level] = l;
            hi[level] = h;
            long keepLo;
            long keepHi;
            long sendLo;
            long sendHi;
            if (vr < partnerV) {
                keepLo = l;
                keepHi = mid;
                sendLo = mid;
                sendHi = h;
            } else {
                keepLo = mid;
                keepHi = h;
                sendLo = l;
                sendHi = mid;
            }
            sendX(peer(partner), sig, buf, sendLo * es, (sendHi - sendLo) * es);
            recvX(peer(partner), sig, buf, keepLo * es, (keepHi - keepLo) * es, type, op);
            run();
            l = keepLo;
            h = keepHi;
        }
        if (op == ReduceOp.AVG) {
            kernels.divide(type, buf, l * es, h - l, gsize);
        }
        level--;
        for (int d = 1; d < p2; d <<= 1, level--) {
            int partnerV = vr ^ d;
            int partner = partnerV < rem ? 2 * partnerV + 1 : partnerV + rem;
            long pl = lo[level];
            long ph = hi[level];
            long mid = pl + (ph - pl) / 2;
            long otherLo = vr < partnerV ? mid : pl;
            long otherHi = vr < partnerV ? ph : mid;
            sendX(peer(partner), sig, buf, l * es, (h - l) * es);
            recvX(peer(partner), sig, buf, otherLo * es, (otherHi - otherLo) * es, null, null);
            run();
            l = pl;
            h = ph;
        }
        if (grank < 2 * rem) {
            sendX(peer(grank - 1), sig, buf, 0, bytes);
            run();
        }
    }

    // ------------------------------------------------------------------------------------------------ others

    /** Ring all-gather: {@code out} (native) holds n blocks of {@code blockBytes}; block {@code grank} is filled. */
    void ringAllGather(Signature sig, MemorySegment out, long blockBytes) {
        Peer right = peer(grank + 1);
        Peer left = peer(grank - 1);
        Xfer previous = null;
        for (int s = 0; s < gsize - 1; s++) {
            int sb = Math.floorMod(grank - s, gsize);
            int rb = Math.floorMod(grank - s - 1, gsize);
            placed(sendX(right, sig, out, sb * blockBytes, blockBytes)).after = previous;
            previous = placed(recvX(left, sig, out, rb * blockBytes, blockBytes, null, null));
        }
        run();
    }

    /** Ring reduce-scatter on {@code work} (native, n blocks of {@code blockCount}); block {@code grank} ends reduced. */
    void ringReduceScatter(Signature sig, MemorySegment work, long blockCount, DataType type, ReduceOp op) {
        long bb = blockCount * type.sizeBytes();
        Peer right = peer(grank + 1);
        Peer left = peer(grank - 1);
        Xfer previous = null;
        for (int s = 0; s < gsize - 1; s++) {
            int sb = Math.floorMod(grank - s - 1, gsize);
            int rb = Math.floorMod(grank - s - 2, gsize);
            sendX(right, sig, work, sb * bb, bb).after = previous;
            previous = recvX(left, sig, work, rb * bb, bb, type, op);
        }
        run();
        if (op == ReduceOp.AVG) {
            kernels.divide(type, work, grank * bb, blockCount, gsize);
        }
    }

    /** Pairwise all-to-all: block j of {@code in} goes to grank j; block j of {@code out} comes from grank j. */
    void pairwiseAllToAll(Signature sig, MemorySegment in, MemorySegment out, long blockBytes) {
        MemorySegment.copy(in, grank * blockBytes, out, grank * blockBytes, blockBytes);
        for (int k = 1; k < gsize; k++) {
            int to = Math.floorMod(grank + k, gsize);
            int from = Math.floorMod(grank - k, gsize);
            sendX(peer(to), sig, in, to * blockBytes, blockBytes);
            recvX(peer(from), sig, out, from * blockBytes, blockBytes, null, null);
            run();
        }
    }

    /** Linear gather: every grank sends {@code in} to root, which receives all concurrently. */
    void linearGather(Signature sig, MemorySegment in, MemorySegment out, long blockBytes, int root) {
        if (grank == root) {
            MemorySegment.copy(in, 0, out, root * blockBytes, blockBytes);
            for (int j = 0; j < gsize; j++) {
                if (j != root) {
                    recvX(peer(j), sig, out, j * blockBytes, blockBytes, null, null);
                }
            }
        } else {
            sendX(peer(root), sig, in, 0, blockBytes);
        }
        run();
    }

    /** Linear scatter: root sends block j of {@code in} to grank j, all concurrently. */
    void linearScatter(Signature sig, MemorySegment in, MemorySegment out, long blockBytes, int root) {
        if (grank == root) {
            MemorySegment.copy(in, root * blockBytes, out, 0, blockBytes);
            for (int j = 0; j < gsize; j++) {
                if (j != root) {
                    sendX(peer(j), sig, in, j * blockBytes, blockBytes);
                }
            }
        } else {
            recvX(peer(root), sig, out, 0, blockBytes, null, null);
        }
        run();
    }

    /** Dissemination barrier: ceil(log2 n) rounds of zero-byte messages. */
    void disseminationBarrier(Signature sig) {
        for (int k = 1; k < gsize; k <<= 1) {
            sendX(peer(grank + k), sig, MemorySegment.NULL, 0, 0);
            recvX(peer(grank - k), sig, MemorySegment.NULL, 0, 0, null, null);
            run();
        }
    }

    // ------------------------------------------------------------------------------------------------ direct

    private MemorySegment stagingOf(int r) {
        return r == rank ? t.staging.segment() : t.peers[r].staging;
    }

    private long halfOffset() {
        return (directRound & 1) * t.directStagingBytes;
    }

    /** Offset of the input descriptor (mode, allocation id, offset) that the next direct barrier publishes. */
    private long nextDescriptor() {
        return Transport.CTRL_DESC + ((directEpoch + 1) & 1) * 32;
    }

    /**
     * Publishes this rank's input for the next direct barrier and returns the descriptor's offset. Zero copy
     * ({@code allocationId >= 0}): the peers read {@code Communicator.allocate()} memory where it is (they map it
     * once), at {@code allocationOffset}; otherwise {@code bytes} of {@code in} at {@code inOffset} are copied into
     * the staging half at {@code half} first. The descriptor says which.
     */
    private long publishInput(int allocationId, long allocationOffset, MemorySegment in, long inOffset, long half,
                              long bytes) {
        MemorySegment ctrl = t.control.segment();
        long desc = nextDescriptor();
        if (allocationId >= 0) {
            ctrl.set(ValueLayout.JAVA_LONG, desc, 1);
            ctrl.set(ValueLayout.JAVA_LONG, desc + 8, allocationId);
            ctrl.set(ValueLayout.JAVA_LONG, desc + 16, allocationOffset);
        } else {
            ctrl.set(ValueLayout.JAVA_LONG, desc, 0);
            MemorySegment.copy(in, inOffset, t.staging.segment(), half, bytes);
        }
        return desc;
    }

    /** Offset in {@link #peerInput}'s segment where the peer's input starts. */
    private long peerInputOffset;

    /**
     * Peer {@code p}'s input as its descriptor at {@code desc} gives it (after the barrier): its mapped allocation,
     * or its staging half at {@code half}; the offset is left in {@link #peerInputOffset}.
     */
    private MemorySegment peerInput(Peer p, long desc, long half) {
        if (p.control.get(ValueLayout.JAVA_LONG, desc) == 1) {
            peerInputOffset = p.control.get(ValueLayout.JAVA_LONG, desc + 16);
            return comm.mappedAllocation(p, (int) p.control.get(ValueLayout.JAVA_LONG, desc + 8), deadline());
        }
        peerInputOffset = half;
        return stagingOf(p.rank);
    }

    /** Offset of the arrival record that the next direct barrier publishes (inline payload goes there first). */
    long nextRecord() {
        return Transport.CTRL_REC + ((directEpoch + 1) & 1) * Transport.REC_BYTES;
    }

    private long arrived(Peer p, long record) {
        try {
            return (long) LONG.getAcquire(p.control, record);
        } catch (IllegalStateException e) {
            // the mapping of a peer that released its memory (closed or died) can no longer be read
            throw t.peerFailed(p, "rank " + p.rank + "'s shared memory went away (it closed, aborted or died)");
        }
    }

    /**
     * Flag barrier over the mapped control blocks; the first barrier of an op also compares signatures. The rank
     * writes its signature into its arrival record of this epoch's parity and then the epoch (release); it waits
     * until every peer's record of that parity holds the epoch (acquire). A record is rewritten two epochs later,
     * which needs every peer to have arrived at the epoch in between, so whatever a peer put into it (signature,
     * inline payload) stays readable until this rank's next barrier.
     */
    void directBarrier(Signature sig, boolean checkSignature) {
        long epoch = ++directEpoch;
        MemorySegment ctrl = t.control.segment();
        long rec = Transport.CTRL_REC + (epoch & 1) * Transport.REC_BYTES;
        sig.write(ctrl, rec + Transport.REC_SIG, 0);
        LONG.setRelease(ctrl, rec, epoch);
        for (int j = 0; j < size; j++) {
            if (j == rank) {
                continue;
            }
            Peer p = t.peers[j];
            if (arrived(p, rec) < epoch) {
                awaitArrival(p, rec, epoch, sig);
            }
        }
        if (checkSignature) {
            for (int j = 0; j < size; j++) {
                if (j != rank && !sig.matches(t.peers[j].control, rec + Transport.REC_SIG)) {
                    throw comm.mismatch("rank " + rank + " is running " + sig + ", but rank " + j + " is running "
                        + Signature.describe(t.peers[j].control, rec + Transport.REC_SIG));
                }
            }
        }
    }

    /**
     * Waits for {@code p}'s arrival at {@code epoch}: an adaptive busy spin first, then the idle strategy (yield,
     * then park) with its abort, deadline and health checks.
     *
     * <p>The spin adapts ({@link AdaptiveSpin}). On 2 cores shared with other work the two ranks of a pair often end up on the same core for a while; spinning then only burns
     * the time slice the peer needs (an 8-byte all-reduce took 14–60 µs per op with a fixed 5–50 µs spin, against
     * 0.2–0.5 µs when each rank has a core). Oversubscribed hosts never spin.
     *
     * <p>Shared core or late peer: a waiting rank publishes the CPU it gives up ({@link #CTRL_CPU}) and compares it
     * with the peer's. Different CPUs mean the peer was late, not sharing this core (typically because it was
     * yielding itself): the spin grows instead of halving; without this, both ranks locked each other into
     * yielding on every operation for whole runs. The same CPU means the scheduler put both ranks on one core
     * (counted in thousands of waits per run here): the higher rank moves to another CPU of its mask
     * ({@link CpuAffinity#moveOff}).
     */
    private void awaitArrival(Peer p, long rec, long epoch, Signature sig) {
        long limit = directSpin.limitNs();
        long start = 0;
        if (limit > 0) {
            // The clock is first read after 32 spins: a lock-step peer usually arrives before that, and a clock
            // read (22 ns here) is a tenth of an 8-byte all-reduce when both ranks have a core. The spin so lasts
            // up to 32 pauses longer than the limit, and waits are measured from the first reading.
            int i = 0;
            while (true) {
                Thread.onSpinWait();
                if (arrived(p, rec) >= epoch) {
                    directSpin.endedSpinning(limit);
                    return;
                }
                if ((++i & 31) == 0) {
                    long now = System.nanoTime();
                    if (start == 0) {
                        start = now;
                    } else if (now - start > limit) {
                        break;
                    }
                }
            }
        }
        beginWait();
        directIdle.reset();
        waitingPeer = p.rank;
        waitingSig = sig;
        int yields = 0;
        // Where this rank waits: the peer reads it to tell a shared core from a peer that was merely late.
        int cpu = limit > 0 ? CpuAffinity.currentCpuIfLinked() : -1;
        if (cpu >= 0) {
            t.control.segment().set(ValueLayout.JAVA_INT, CTRL_CPU, cpu + 1);
        }
        try {
            while (arrived(p, rec) < epoch) {
                idle(0, p, directIdle);
                yields++;
            }
        } finally {
            waitingPeer = -1;
        }
        if (limit > 0) {
            long waited = System.nanoTime() - start;
            int peerCpu = cpu >= 0 ? p.control.get(ValueLayout.JAVA_INT, CTRL_CPU) - 1 : -1;
            switch (judgeWait(yields, cpu, peerCpu, rank > p.rank, coresApart)) {
                // Elsewhere: the peer last waited on another CPU, so it does not share this core; it was late
                // because it too had given up its core for a moment (a yield costs more than a short spin).
                // Halving would lock both ranks into yielding on every operation (1.5-7 us per 8-byte all-reduce
                // instead of 0.2-0.5 us). Busy: the peer was copying or reducing a little longer than the spin.
                case PEER_ELSEWHERE, PEER_BUSY -> directSpin.peerLate(limit, waited);
                // the scheduler put both ranks on one CPU (it did so for whole runs here): the higher rank moves
                // to another; if it cannot, this counts as a quick wait
                case SAME_CPU -> {
                    if (moveOffSharedCpu(cpu)) {
                        directSpin.neutral();
                    } else {
                        directSpin.endedQuickly(limit);
                    }
                }
                case QUICK -> directSpin.endedQuickly(limit);
                case APART -> directSpin.neutral();
            }
        }
    }

    /** How a direct-path wait that outlasted the spin ended, for the adaptive spin (see {@link #judgeWait}). */
    enum WaitVerdict {
        /** Ended within two yields while the peer last waited on another CPU: it was late, not sharing a core. */
        PEER_ELSEWHERE,
        /** This rank and the peer waited on the same CPU, and this rank is the one that moves (the higher). */
        SAME_CPU,
        /** Ended within two yields, CPUs unknown (or shared, lower rank): evidence of a shared core. */
        QUICK,
        /** Needed more yields: the peer was busy (copying, reducing) or descheduled. */
        PEER_BUSY,
        /** Ranks are bound to distinct CPUs (JCCL_CPU_BIND=core): no inference needed. */
        APART
    }

    /**
     * Classifies a wait that outlasted the spin. {@code cpu} and {@code peerCpu} are where this rank and the peer
     * last gave up their cores (-1: unknown).
     */
    static WaitVerdict judgeWait(int yields, int cpu, int peerCpu, boolean higherRank, boolean coresApart) {
        if (coresApart) {
            return WaitVerdict.APART;
        }
        boolean known = cpu >= 0 && peerCpu >= 0;
        if (known && peerCpu == cpu && higherRank) {
            return WaitVerdict.SAME_CPU;
        }
        if (yields > 2) {
            return WaitVerdict.PEER_BUSY;
        }
        return known && peerCpu != cpu ? WaitVerdict.PEER_ELSEWHERE : WaitVerdict.QUICK;
    }

    /** CPUs this process may run on (for {@link #moveOffSharedCpu}), read once; null until needed. */
    private List<Integer> allowedCpus;
    /** Times this rank moved off a CPU it shared with a peer (for the log), and when it last did. */
    long cpuMoves;
    private long lastCpuMoveNs = System.nanoTime() - 1_000_000_000L;

    /**
     * Moves the collective thread off {@code cpu}, which a peer it waits for also waits on, when the process has
     * another CPU (at most once a millisecond).
     */
    private boolean moveOffSharedCpu(int cpu) {
        long now = System.nanoTime();
        if (now - lastCpuMoveNs < 1_000_000L) {
            return false;
        }
        lastCpuMoveNs = now;
        if (allowedCpus == null) {
            allowedCpus = CpuAffinity.allowedCpus();
        }
        if (!CpuAffinity.moveOff(cpu, allowedCpus)) {
            return false;
        }
        if (cpuMoves++ == 0) {
            Log.get().info(rank, Log.Subsys.INIT, "rank " + rank + " shared CPU " + cpu + " with the rank it waits for: "
                + "moved to another CPU (the scheduler keeps it from then on)");
        }
        return true;
    }

    /** Largest all-reduce (bytes) that travels inline in the arrival records. */
    static final long INLINE_BYTES = Transport.INLINE_BYTES;

    /**
     * Inline all-reduce (direct path, up to {@link #INLINE_BYTES}): every rank copies its input into its arrival
     * record, meets the others in one barrier and reduces all n records in rank order into {@code out} (identical
     * results everywhere). No staging buffer, no descriptor: flag, signature and data share cache lines.
     */
    void inlineAllReduce(Signature sig, MemorySegment in, MemorySegment out, long count, DataType type,
                         ReduceOp op) {
        long payload = nextRecord() + Transport.recordPayload(count * type.sizeBytes());
        MemorySegment ctrl = t.control.segment();
        MemorySegment.copy(in, 0, ctrl, payload, count * type.sizeBytes());
        directBarrier(sig, true);
        MemorySegment[] src = sources;
        long[] offs = sourceOffsets;
        for (int j = 0; j < size; j++) {
            src[j] = j == rank ? ctrl : t.peers[j].control;
            offs[j] = payload;
        }
        kernels.reduce(type, op, src, offs, size, out, 0, count, size);
    }

    /** Up to this size a direct all-reduce has every rank reduce the whole vector itself ({@link #smallAllReduce}). */
    static final long DIRECT_SMALL_BYTES = 32 * 1024;
    /**
     * From this size a small all-reduce reads {@code allocate()} inputs where they are: the closing barrier that
     * costs is worth it (2 ranks: 4 KiB 1.5-1.6 -> 0.9 us when the vCPUs sit far apart, 0.41 -> 0.39 when close;
     * 8 KiB 0.64 -> 0.30 us, 32 KiB 2.3 -> 0.8; at 2 KiB the staged copy was faster with close vCPUs).
     */
    static final long SMALL_ZERO_COPY_BYTES = 4 * 1024;
    /** Small all-reduces that read at least one input where it is (tests check which path ran). */
    long zeroCopySmallAllReduces;

    /**
     * A direct all-reduce of at most {@link #DIRECT_SMALL_BYTES}: every rank reduces the whole vector from all inputs,
     * in rank order (identical results everywhere), after one barrier. A rank whose input is at least
     * {@link #SMALL_ZERO_COPY_BYTES} of {@link Communicator#allocate} memory that its output does not overlap
     * publishes it where it is; any other input is copied into the staging half first. Reading an input in place
     * saves that copy and reads lines its owner has not just rewritten (2 ranks, 16 KiB: 0.4-0.9 instead of
     * 1.2-4 us); it costs a closing barrier, since its owner must not return and reuse it while a peer still reads
     * it. Every rank sees every descriptor after the first barrier, so all agree on that barrier.
     */
    private void smallAllReduce(Signature sig, MemorySegment in, MemorySegment out, long count, DataType type,
                                ReduceOp op) {
        long bytes = count * type.sizeBytes();
        long half = halfOffset();
        int id = bytes >= SMALL_ZERO_COPY_BYTES && disjoint(in, out, bytes) ? comm.allocationId(in) : -1;
        long desc = publishInput(id, comm.lastAllocationOffset, in, 0, half, bytes);
        directBarrier(sig, true);
        boolean anyInPlace = id >= 0;
        for (int j = 0; j < size; j++) {
            if (j == rank) {
                sources[j] = id >= 0 ? in : t.staging.segment();
                sourceOffsets[j] = id >= 0 ? 0 : half;
            } else {
                sources[j] = peerInput(t.peers[j], desc, half);
                sourceOffsets[j] = peerInputOffset;
                anyInPlace |= t.peers[j].control.get(ValueLayout.JAVA_LONG, desc) == 1;
            }
        }
        kernels.reduce(type, op, sources, sourceOffsets, size, out, 0, count, size);
        directRound++;
        java.util.Arrays.fill(sources, null);
        if (anyInPlace) {
            zeroCopySmallAllReduces++;
            directBarrier(sig, false);
        }
    }

    /** Allocation id of the current direct all-reduce's input (zero copy), or -1; and its offset in it. */
    int zeroCopyId = -1;
    long zeroCopyOffset;

    /** Direct all-reduce from {@code in} into {@code out} (any segments), in rounds of the staging size. */
    void directAllReduce(Signature sig, MemorySegment in, MemorySegment out, long count, DataType type, ReduceOp op) {
        int es = type.sizeBytes();
        if (count * es <= INLINE_BYTES) {
            inlineAllReduce(sig, in, out, count, type, op);
            return;
        }
        if (count * es <= Math.min(DIRECT_SMALL_BYTES, t.directStagingBytes)) {
            smallAllReduce(sig, in, out, count, type, op);
            return;
        }
        zeroCopyId = comm.allocationId(in);
        zeroCopyOffset = comm.lastAllocationOffset;
        long perRound = Math.max(1, t.directStagingBytes / es);
        long firstDesc = chooseAllReduce(sig, in, out, count, type, op, perRound);
        if (firstDesc < 0) {
            return;
        }
        boolean first = true;
        for (long base = 0; base < count || first; base += perRound) {
            long n = Math.min(perRound, count - base);
            long half = halfOffset();
            MemorySegment mine = t.staging.segment();
            long desc = firstDesc; // the first round was published and met by chooseAllReduce
            if (!first) {
                desc = publishInput(zeroCopyId, zeroCopyOffset + base * es, in, base * es, half, n * es);
                directBarrier(sig, false);
            }
            first = false;
            long lo = blockStart(n, size, rank);
            long cnt = blockCount(n, size, rank);
            for (int j = 0; j < size; j++) {
                if (j == rank) {
                    sources[j] = zeroCopyId >= 0 ? in : mine;
                    sourceOffsets[j] = zeroCopyId >= 0 ? (base + lo) * es : half + lo * es;
                    continue;
                }
                sources[j] = peerInput(t.peers[j], desc, half);
                sourceOffsets[j] = peerInputOffset + lo * es;
            }
            if (cnt > 0) {
                kernels.reduce(type, op, sources, sourceOffsets, size, mine, half + lo * es, cnt, size);
            }
            directBarrier(sig, false);
            for (int j = 0; j < size; j++) {
                long jl = blockStart(n, size, j);
                long jc = blockCount(n, size, j);
                if (jc > 0) {
                    MemorySegment.copy(stagingOf(j), half + jl * es, out, (base + jl) * es, jc * es);
                }
            }
            directRound++;
            if (count == 0) {
                break;
            }
        }
        java.util.Arrays.fill(sources, null);
    }

    /** Output-descriptor flag: this rank's output shares no byte with its input. */
    private static final long OUT_SEPARATE = 1;
    /** Output-descriptor flag: this rank's output is its input (in place). */
    private static final long OUT_IN_PLACE = 2;

    /**
     * The ranks choose among three direct all-reduce algorithms, and must choose the same one although each knows only
     * its own buffers (in place or not is each rank's own choice, as in NCCL). The first round publishes, beside the
     * input descriptor, where this rank's output is and how it relates to its input; after the first barrier every
     * rank decides from the same facts:
     * <ul>
     * <li>every input and every output in {@link Communicator#allocate} memory, each output either separate from its
     * input or the input itself: each rank reduces its slice of the vector from all inputs and writes it into all
     * outputs ({@link #splitReduce}). Per rank that reads N bytes and writes N, the least an all-reduce over shared
     * memory can move, and every element is computed once, so all ranks hold bit-identical results. In place is
     * safe: each slice of each buffer is read and written by one rank only;</li>
     * <li>two ranks whose outputs are both separate from their inputs: each rank reduces the whole vector from both
     * inputs, in rank order, into its own output ({@link #pairAllReduce}): it never writes the peer's memory and never
     * reads lines the peer has just written (pulling those out of another core's cache was 2-5x slower than reading
     * its unchanged input on this VM, depending on where the host put the vCPUs);</li>
     * <li>otherwise the staged path (reduce-scatter through staging, then every rank copies every slice), which the
     * caller continues from the first round.</li>
     * </ul>
     *
     * @return -1 when the all-reduce is done, else the first round's input descriptor for the staged path
     */
    private long chooseAllReduce(Signature sig, MemorySegment in, MemorySegment out, long count, DataType type,
                                 ReduceOp op, long perRound) {
        int es = type.sizeBytes();
        long bytes = count * es;
        boolean inPlace = in.isNative() && out.isNative() && in.address() == out.address();
        boolean separate = disjoint(in, out, bytes);
        int inId = zeroCopyId;
        long inOffset = zeroCopyOffset;
        int outId = separate ? comm.allocationId(out) : inPlace ? inId : -1;
        long outOffset = separate ? comm.lastAllocationOffset : inOffset;
        long half = halfOffset();
        long desc = publishInput(inId, inOffset, in, 0, half, Math.min(perRound, count) * es);
        publishOutput(desc, outId, outOffset, (separate ? OUT_SEPARATE : 0) | (inPlace ? OUT_IN_PLACE : 0));
        directBarrier(sig, true);
        long outDesc = outputDescriptor(desc);
        boolean allShared = inId >= 0 && outId >= 0 && allZeroCopy(desc);
        boolean allSeparate = separate;
        for (int j = 0; j < size; j++) {
            if (j == rank) {
                continue;
            }
            MemorySegment c = t.peers[j].control;
            long flags = c.get(ValueLayout.JAVA_LONG, outDesc + 24);
            allShared &= c.get(ValueLayout.JAVA_LONG, outDesc) == 1 && (flags & (OUT_SEPARATE | OUT_IN_PLACE)) != 0;
            allSeparate &= (flags & OUT_SEPARATE) != 0;
        }
        if (allShared) {
            for (int j = 0; j < size; j++) {
                if (j == rank) {
                    sources[j] = in;
                    sourceOffsets[j] = 0;
                    outputs[j] = out;
                    outputOffsets[j] = 0;
                    continue;
                }
                Peer p = t.peers[j];
                sources[j] = peerInput(p, desc, half);
                sourceOffsets[j] = peerInputOffset;
                outputs[j] = comm.mappedAllocation(p, (int) p.control.get(ValueLayout.JAVA_LONG, outDesc + 8),
                    deadline(), true);
                outputOffsets[j] = p.control.get(ValueLayout.JAVA_LONG, outDesc + 16);
            }
            splitReduce(count, type, op);
            java.util.Arrays.fill(sources, null);
            java.util.Arrays.fill(outputs, null);
            directRound++;
            // no rank returns while another still reads its input or writes its output
            directBarrier(sig, false);
            return -1;
        }
        if (size == 2 && allSeparate) {
            pairAllReduce(sig, in, out, count, type, op, perRound, desc);
            return -1;
        }
        return desc;
    }

    /**
     * The two-rank whole-vector all-reduce (see {@link #chooseAllReduce}), in rounds of the staging size whether
     * or not this rank's input is zero copy (the peer's may not be, and both ranks must meet in the same barriers);
     * the first round was published and met at {@code firstDesc}. A closing barrier keeps either input from being
     * reused while the other rank still reads it.
     */
    private void pairAllReduce(Signature sig, MemorySegment in, MemorySegment out, long count, DataType type,
                               ReduceOp op, long perRound, long firstDesc) {
        int es = type.sizeBytes();
        Peer p = t.peers[1 - rank];
        for (long base = 0; base < count; base += perRound) {
            long n = Math.min(perRound, count - base);
            long half = halfOffset();
            long desc = firstDesc;
            if (base > 0) {
                desc = publishInput(zeroCopyId, zeroCopyOffset + base * es, in, base * es, half, n * es);
                directBarrier(sig, false);
            }
            // rank order, so that both ranks compute bit-identical results; the two-source kernel call (no
            // array of sources to store into)
            MemorySegment theirs = peerInput(p, desc, half);
            if (rank == 0) {
                kernels.reduce(type, op, in, base * es, theirs, peerInputOffset, out, base * es, n, 2);
            } else {
                kernels.reduce(type, op, theirs, peerInputOffset, in, base * es, out, base * es, n, 2);
            }
            directRound++;
        }
        // the peer may still read this rank's input (or staging half) until it too has reduced
        directBarrier(sig, false);
    }

    /**
     * Block of the split all-reduce: reduced into this rank's output, then copied into the other outputs while still
     * in this core's cache (with 2 ranks 16 KiB to 1 MiB measured the same within the noise; 64 KiB fits L2 with
     * room).
     */
    static final long SPLIT_BLOCK_BYTES = 64 * 1024;
    /** All-reduces that took the split path (tests check which path ran). */
    long splitAllReduces;

    /** Outputs of every rank for {@link #splitReduce} (this rank's own, the peers' mapped writable). */
    private final MemorySegment[] outputs;
    private final long[] outputOffsets;
    /** Source offsets of the current block in {@link #splitReduce}. */
    private final long[] blockOffsets;

    /**
     * This rank's slice of an all-reduce over shared buffers: {@code outputs[rank] = sum of sources} (rank order)
     * over its block of the vector, a block at a time, each block then copied, still cached, into every other rank's
     * output.
     */
    private void splitReduce(long count, DataType type, ReduceOp op) {
        int es = type.sizeBytes();
        long lo = blockStart(count, size, rank);
        long end = lo + blockCount(count, size, rank);
        long step = Math.max(1, SPLIT_BLOCK_BYTES / es);
        MemorySegment mine = outputs[rank];
        splitAllReduces++;
        for (long i = lo; i < end; i += step) {
            long n = Math.min(step, end - i);
            if (size == 2) {
                // the two-source kernel call (no array of sources to read through)
                kernels.reduce(type, op, sources[0], sourceOffsets[0] + i * es, sources[1],
                    sourceOffsets[1] + i * es, mine, i * es, n, 2);
            } else {
                for (int j = 0; j < size; j++) {
                    blockOffsets[j] = sourceOffsets[j] + i * es;
                }
                kernels.reduce(type, op, sources, blockOffsets, size, mine, i * es, n, size);
            }
            for (int j = 0; j < size; j++) {
                if (j != rank) {
                    MemorySegment.copy(mine, i * es, outputs[j], outputOffsets[j] + i * es, n * es);
                }
            }
        }
    }

    /** The output descriptor published beside input descriptor {@code desc} (same epoch parity). */
    private static long outputDescriptor(long desc) {
        return desc - Transport.CTRL_DESC + Transport.CTRL_OUT_DESC;
    }

    /**
     * Publishes where this rank's output is (mode 1, allocation id, offset; or mode 0: not shared memory) and how it
     * relates to the input ({@link #OUT_SEPARATE}, {@link #OUT_IN_PLACE}, or neither: overlapping).
     */
    private void publishOutput(long desc, int allocationId, long allocationOffset, long flags) {
        MemorySegment ctrl = t.control.segment();
        long o = outputDescriptor(desc);
        ctrl.set(ValueLayout.JAVA_LONG, o, allocationId >= 0 ? 1 : 0);
        ctrl.set(ValueLayout.JAVA_LONG, o + 8, allocationId);
        ctrl.set(ValueLayout.JAVA_LONG, o + 16, allocationOffset);
        ctrl.set(ValueLayout.JAVA_LONG, o + 24, flags);
    }

    /**
     * Direct broadcast. When the root's input lies in {@link Communicator#allocate} memory and the message is at
     * least {@link #DIRECT_SMALL_BYTES}, the root publishes a descriptor and every other rank copies the whole
     * message straight from the root's buffer (zero copy: one copy instead of two, and the readers read lines the
     * root did not just write, which on this machine's VM costs 1-5x less than pulling freshly staged lines out of
     * another core's cache); a closing barrier keeps the root from returning while a peer still reads. Otherwise
     * the root stages the message in rounds of the staging size and everyone copies each round. Every rank agrees
     * on the closing barrier from the size alone.
     */
    void directBroadcast(Signature sig, MemorySegment in, MemorySegment out, long bytes, int root) {
        long per = t.directStagingBytes;
        boolean large = bytes >= DIRECT_SMALL_BYTES;
        MemorySegment ctrl = t.control.segment();
        boolean first = true;
        for (long base = 0; base < bytes || first; base += per) {
            long n = Math.min(per, bytes - base);
            long half = halfOffset();
            long desc = nextDescriptor();
            if (rank == root) {
                int zcId = first && large ? comm.allocationId(in) : -1;
                publishInput(zcId, comm.lastAllocationOffset, in, base, half, n);
            }
            directBarrier(sig, first);
            MemorySegment rootCtrl = rank == root ? ctrl : t.peers[root].control;
            if (first && large && rootCtrl.get(ValueLayout.JAVA_LONG, desc) == 1) {
                if (rank == root) {
                    if (out != null && !in.equals(out)) {
                        MemorySegment.copy(in, 0, out, 0, bytes);
                    }
                } else if (out != null) {
                    MemorySegment src = peerInput(t.peers[root], desc, half);
                    MemorySegment.copy(src, peerInputOffset, out, 0, bytes);
                }
                directRound++;
                break;
            }
            first = false;
            if (out != null && !(rank == root && in == out)) {
                MemorySegment.copy(stagingOf(root), half, out, base, n);
            }
            directRound++;
            if (bytes == 0) {
                break;
            }
        }
        if (large) {
            directBarrier(sig, false);
        }
    }

    /** Direct reduce: every rank stages, root reduces from all. */
    void directReduce(Signature sig, MemorySegment in, MemorySegment out, long count, DataType type, ReduceOp op,
                      int root) {
        int es = type.sizeBytes();
        long perRound = Math.max(1, t.directStagingBytes / es);
        boolean first = true;
        for (long base = 0; base < count || first; base += perRound) {
            long n = Math.min(perRound, count - base);
            long half = halfOffset();
            MemorySegment.copy(in, base * es, t.staging.segment(), half, n * es);
            directBarrier(sig, first);
            first = false;
            if (rank == root && n > 0) {
                for (int j = 0; j < size; j++) {
                    sources[j] = stagingOf(j);
                    sourceOffsets[j] = half;
                }
                kernels.reduce(type, op, sources, sourceOffsets, size, out, base * es, n, size);
            }
            directRound++;
            if (count == 0) {
                break;
            }
        }
        java.util.Arrays.fill(sources, null);
    }

    /**
     * Direct all-gather. Per round (staging size) each rank either stages its block or, when its input lies in
     * {@link Communicator#allocate} memory and blocks are at least {@link #DIRECT_SMALL_BYTES}, publishes a
     * descriptor so that peers copy straight from its input (zero copy: one copy of each block instead of two);
     * then one barrier and every rank copies all blocks. Blocks of that size end with one more barrier, so no
     * peer still reads an input when its owner returns (every rank agrees on it: it depends on the size only).
     */
    void directAllGather(Signature sig, MemorySegment in, MemorySegment out, long blockBytes) {
        long per = t.directStagingBytes;
        boolean large = blockBytes >= DIRECT_SMALL_BYTES;
        int zcId = large ? comm.allocationId(in) : -1;
        long zcOffset = comm.lastAllocationOffset;
        boolean inPlace = in.isNative() && out.isNative() && in.address() == out.address() + rank * blockBytes;
        boolean first = true;
        for (long base = 0; base < blockBytes || first; base += per) {
            long n = Math.min(per, blockBytes - base);
            long half = halfOffset();
            long desc = publishInput(zcId, zcOffset + base, in, base, half, n);
            directBarrier(sig, first);
            if (first && zcId >= 0 && allZeroCopy(desc)) {
                // Every rank's input is mapped memory (each sees the same descriptors, so all take this branch): copy
                // every block whole in this one round instead of a round per staging size. Measured at 16 MiB
                // (2 ranks): 474-483 us per all-gather, against 509-799 us in 1 MiB rounds.
                n = blockBytes;
            }
            first = false;
            for (int j = 0; j < size; j++) {
                if (j == rank) {
                    if (!inPlace) {
                        MemorySegment.copy(in, base, out, j * blockBytes + base, n);
                    }
                    continue;
                }
                MemorySegment src = peerInput(t.peers[j], desc, half);
                MemorySegment.copy(src, peerInputOffset, out, j * blockBytes + base, n);
            }
            directRound++;
            if (blockBytes == 0 || base + n >= blockBytes) {
                break;
            }
        }
        if (large) {
            directBarrier(sig, false);
        }
    }

    /** Whether every peer published its input as a mapped allocation in descriptor {@code desc}. */
    private boolean allZeroCopy(long desc) {
        for (int j = 0; j < size; j++) {
            if (j != rank && t.peers[j].control.get(ValueLayout.JAVA_LONG, desc) != 1) {
                return false;
            }
        }
        return true;
    }

    /** Direct reduce-scatter: each rank stages a chunk of every block, then reduces its own block from all. */
    void directReduceScatter(Signature sig, MemorySegment in, MemorySegment out, long blockCount, DataType type,
                             ReduceOp op) {
        int es = type.sizeBytes();
        long perRound = Math.max(1, t.directStagingBytes / ((long) es * size));
        boolean first = true;
        for (long base = 0; base < blockCount || first; base += perRound) {
            long n = Math.min(perRound, blockCount - base);
            long half = halfOffset();
            MemorySegment mine = t.staging.segment();
            for (int b = 0; b < size; b++) {
                MemorySegment.copy(in, (b * blockCount + base) * es, mine, half + b * n * es, n * es);
            }
            directBarrier(sig, first);
            first = false;
            if (n > 0) {
                for (int j = 0; j < size; j++) {
                    sources[j] = stagingOf(j);
                    sourceOffsets[j] = half + rank * n * es;
                }
                kernels.reduce(type, op, sources, sourceOffsets, size, out, base * es, n, size);
            }
            directRound++;
            if (blockCount == 0) {
                break;
            }
        }
        java.util.Arrays.fill(sources, null);
    }

    /** Direct all-to-all: each rank stages a chunk of every block; rank r copies chunk r of every peer. */
    void directAllToAll(Signature sig, MemorySegment in, MemorySegment out, long blockBytes) {
        long per = Math.max(1, t.directStagingBytes / size);
        boolean first = true;
        for (long base = 0; base < blockBytes || first; base += per) {
            long n = Math.min(per, blockBytes - base);
            long half = halfOffset();
            MemorySegment mine = t.staging.segment();
            for (int b = 0; b < size; b++) {
                MemorySegment.copy(in, b * blockBytes + base, mine, half + b * n, n);
            }
            directBarrier(sig, first);
            first = false;
            for (int j = 0; j < size; j++) {
                MemorySegment.copy(stagingOf(j), half + rank * n, out, j * blockBytes + base, n);
            }
            directRound++;
            if (blockBytes == 0) {
                break;
            }
        }
    }
}
