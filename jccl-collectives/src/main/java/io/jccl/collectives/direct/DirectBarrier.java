package io.jccl.collectives.direct;

import io.jccl.collectives.CollectiveException;
import io.jccl.collectives.core.Signature;
import io.jccl.collectives.core.WaitPolicy;
import io.jccl.collectives.message.MessagePath;
import io.jccl.common.CpuAffinity;
import io.jccl.common.Log;
import io.jccl.common.idle.AdaptiveSpinIdleStrategy;

import java.util.List;

/**
 * The direct path's flag barrier, and how its waits use the CPU. A rank writes its signature into its arrival
 * record of this epoch's parity and then the epoch (release); it waits until every peer's record of that parity
 * holds the epoch (acquire). The first barrier of an operation also compares signatures, so ranks that called
 * different operations get a mismatch error.
 *
 * <p>A wait spins adaptively ({@link AdaptiveSpinIdleStrategy}), then yields and parks with the abort, deadline and
 * health checks of {@link WaitPolicy}. Shared core or late peer: a waiting rank publishes the CPU it gives up and
 * compares it with the peer's ({@link #judgeWait}); the same CPU means the scheduler put both ranks on one core, and
 * the higher rank moves to another CPU of its mask ({@link CpuAffinity#moveOff}). docs/collectives.md, "Waiting", has
 * the measurements behind these rules.
 */
public final class DirectBarrier implements WaitPolicy.Subject {
    private final DirectPath path;
    private final int rank;
    private final int size;
    /**
     * Every local rank's collective thread is bound to its own CPU (JCCL_CPU_BIND=core, or a launcher's
     * {@code --bind-to core}): a peer never shares this
     * rank's core, so a wait that ends right after a yield is not evidence that it does, and the spin stays long.
     */
    private boolean coresApart;
    /** The peer a wait waits for (for timeout messages and health checks), or -1; and the signature. */
    private int waitingPeer = -1;
    private Signature waitingSig;
    /** CPUs this process may run on (for {@link #moveOffSharedCpu}), read once; null until needed. */
    private List<Integer> allowedCpus;
    /** Times this rank moved off a CPU it shared with a peer (for the log), and when it last did. */
    private long cpuMoves;
    private long lastCpuMoveNs = System.nanoTime() - 1_000_000_000L;

    /** The barrier of {@code path}. */
    public DirectBarrier(DirectPath path) {
        this.path = path;
        this.rank = path.rank();
        this.size = path.size();
    }

    /** Every local rank's thread is bound to a CPU of its own (no shared-core inference needed). */
    public void coresApart(boolean apart) {
        this.coresApart = apart;
    }

    /**
     * Meets every rank at the next epoch; with {@code checkSignature} (the first barrier of an operation) also
     * compares signatures.
     */
    public void await(Signature sig, boolean checkSignature) {
        long epoch = ++path.epoch;
        int parity = (int) (epoch & 1);
        ControlBlockFlyweight self = path.self();
        sig.write(self.segment(), ControlBlockFlyweight.signatureOffset(parity), 0);
        self.arrive(parity, epoch);
        for (int j = 0; j < size; j++) {
            if (j == rank) {
                continue;
            }
            if (arrived(j, parity) < epoch) {
                awaitArrival(j, parity, epoch, sig);
            }
        }
        if (checkSignature) {
            long at = ControlBlockFlyweight.signatureOffset(parity);
            for (int j = 0; j < size; j++) {
                if (j != rank && !sig.matches(path.control(j).segment(), at)) {
                    String other = Signature.describe(path.control(j).segment(), at);
                    throw new CollectiveException.Mismatch("collective mismatch: rank " + rank + " is running " + sig
                        + ", but rank " + j + " is running " + other, sig.toString(), j, other);
                }
            }
        }
    }

    private long arrived(int peer, int parity) {
        try {
            return path.control(peer).arrivedEpoch(parity);
        } catch (IllegalStateException e) {
            // the mapping of a peer that released its memory (closed or died) can no longer be read
            MessagePath m = path.messagePath();
            throw m.peerFailed(m.peer(peer), "rank " + peer + "'s shared memory went away (it closed, aborted or "
                + "died)");
        }
    }

    /**
     * Waits for {@code peer}'s arrival at {@code epoch}: the adaptive spin first (its clock read every 32 rounds: a
     * lock-step peer usually arrives before that, and a clock read costs a tenth of an 8-byte all-reduce), then
     * yield and park with the wait policy's checks; then adapts the spin from how the wait ended.
     */
    private void awaitArrival(int peer, int parity, long epoch, Signature sig) {
        WaitPolicy waits = path.waits();
        AdaptiveSpinIdleStrategy idle = waits.direct();
        long limit = idle.limitNs();
        idle.startWait();
        boolean slow = false;
        int cpu = -1;
        try {
            while (arrived(peer, parity) < epoch) {
                if (!slow && !idle.spinning()) {
                    slow = true;
                    waits.beginWait();
                    waitingPeer = peer;
                    waitingSig = sig;
                    // Where this rank waits: the peer reads it to tell a shared core from a peer that was late.
                    cpu = limit > 0 ? CpuAffinity.currentCpuIfLinked() : -1;
                    if (cpu >= 0) {
                        path.self().waitingCpu(cpu);
                    }
                }
                if (slow) {
                    waits.check(this);
                }
                idle.idle();
            }
        } finally {
            waitingPeer = -1;
        }
        if (!slow) {
            idle.endedSpinning(limit);
            return;
        }
        if (limit > 0) {
            long waited = System.nanoTime() - idle.spinStartNs();
            int peerCpu = cpu >= 0 ? path.control(peer).waitingCpu() : -1;
            switch (judgeWait(idle.idlesAfterSpin(), cpu, peerCpu, rank > peer, coresApart)) {
                // Elsewhere: the peer last waited on another CPU, so it does not share this core; it was late
                // because it too had given up its core for a moment. Busy: the peer was copying or reducing a
                // little longer than the spin. Either way, cover such a wait next time.
                case PEER_ELSEWHERE, PEER_BUSY -> idle.peerLate(limit, waited);
                // The scheduler put both ranks on one CPU: the higher rank moves to another; if it cannot, this
                // counts as a quick wait.
                case SAME_CPU -> {
                    if (moveOffSharedCpu(cpu)) {
                        idle.neutral();
                    } else {
                        idle.endedQuickly(limit);
                    }
                }
                case QUICK -> idle.endedQuickly(limit);
                case APART -> idle.neutral();
            }
        }
    }

    @Override
    public String describeWait() {
        return waitingPeer >= 0 ? "rank " + waitingPeer + " to reach the barrier of " + waitingSig + " (direct path)"
            : "progress";
    }

    @Override
    public void checkHealth() {
        if (waitingPeer >= 0) {
            MessagePath m = path.messagePath();
            m.checkPeer(m.peer(waitingPeer));
        }
    }

    /** How a direct-path wait that outlasted the spin ended, for the adaptive spin (see {@link #judgeWait}). */
    public enum WaitVerdict {
        /** Ended within two yields while the peer last waited on another CPU: it was late, not sharing a core. */
        PEER_ELSEWHERE,
        /** This rank and the peer waited on the same CPU, and this rank is the one that moves (the higher). */
        SAME_CPU,
        /** Ended within two yields, CPUs unknown (or shared, lower rank): evidence of a shared core. */
        QUICK,
        /** Needed more yields: the peer was busy (copying, reducing) or descheduled. */
        PEER_BUSY,
        /** Ranks are bound to distinct CPUs (JCCL_CPU_BIND=core or the launcher): no inference needed. */
        APART
    }

    /**
     * Classifies a wait that outlasted the spin. {@code cpu} and {@code peerCpu} are where this rank and the peer
     * last gave up their cores (-1: unknown).
     */
    public static WaitVerdict judgeWait(int yields, int cpu, int peerCpu, boolean higherRank, boolean coresApart) {
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
            Log.get().info(rank, Log.Subsys.INIT, () -> "rank " + rank + " shared CPU " + cpu + " with the rank it waits "
                + "for: moved to another CPU (the scheduler keeps it from then on)");
        }
        return true;
    }
}
