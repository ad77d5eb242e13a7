package io.jccl.collectives.core;

import io.jccl.collectives.CollectiveException;
import io.jccl.common.Config;
import io.jccl.common.idle.AdaptiveSpinIdleStrategy;
import io.jccl.common.idle.BackoffIdleStrategy;

/**
 * How a communicator's operations wait, and what every wait checks. One per communicator; only the thread running
 * the current operation uses it.
 *
 * <p>Three idle strategies, all from {@code io.jccl.common.idle}: {@link #plain()} (spin, yield, park: window
 * operations, draining sends at close), {@link #message()} (message-path exchanges: an adaptive spin whose clock is
 * read every round, since each round polls the completion queues, then yield and park) and {@link #direct()}
 * (direct-path flag barriers: an adaptive spin that reads the clock every 32 rounds, since a round is one load, then
 * yield and park). When the ranks of a host do not each have a CPU none of them spins ({@link #oversubscribed}).
 *
 * <p>Once a wait's spin is over, every idle round calls {@link #check}: the abort flag, the operation's deadline
 * (an operation gets its deadline at its start when the communicator read the clock, else at its first slow wait,
 * {@link #deadline()}) and, every {@link #HEALTH_INTERVAL_NS}, the health of the peers the wait depends on.
 */
public final class WaitPolicy {
    /** How often a wait checks its peers' health. */
    public static final long HEALTH_INTERVAL_NS = 100_000_000L;
    /**
     * How often once a peer's process on this host exited ({@link #peerExited}): the communicator is failing, and its
     * waits should learn it (the dead peer, or a revocation its neighbours flood) in milliseconds.
     */
    public static final long EXITED_HEALTH_INTERVAL_NS = 1_000_000L;
    private static final java.lang.invoke.VarHandle NEXT_HEALTH;

    static {
        try {
            NEXT_HEALTH = java.lang.invoke.MethodHandles.lookup().findVarHandle(WaitPolicy.class, "nextHealthNs",
                long.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    /** What the waits report to: the communicator's abort state and its flight recorder. */
    public interface Owner {
        /** Throws when the communicator was aborted. */
        void checkNotAborted();

        /**
         * Throws when any peer, not only those the wait depends on, announced a revocation (with each health
         * check): a rank waiting for a healthy peer that has not heard of it yet must not wait for that peer.
         */
        default void checkRevokedByPeers() {
        }

        /** The current operation, begun untimed, is timed from {@code nowNs} (its first slow wait). */
        void deadlineStarted(long nowNs);

        /** The error for the current operation passing its deadline while waiting for {@code what}. */
        CollectiveException.Timeout timeout(String what);
    }

    /** What one wait waits for: it names it when the deadline passes and checks the peers it depends on. */
    public interface Subject {
        /** What this wait still waits for (for the timeout's message). */
        String describeWait();

        /** Throws when a peer this wait depends on is gone. */
        void checkHealth();
    }

    private final Owner owner;
    private BackoffIdleStrategy plain = new BackoffIdleStrategy();
    private AdaptiveSpinIdleStrategy message = new AdaptiveSpinIdleStrategy(BackoffIdleStrategy.SPIN_NS, 1,
        new BackoffIdleStrategy(0, BackoffIdleStrategy.SPIN_NS + BackoffIdleStrategy.YIELD_NS,
            BackoffIdleStrategy.PARK_MAX_NS));
    private AdaptiveSpinIdleStrategy direct = new AdaptiveSpinIdleStrategy(BackoffIdleStrategy.SPIN_NS, 32,
        new BackoffIdleStrategy(0, BackoffIdleStrategy.YIELD_NS, BackoffIdleStrategy.PARK_MAX_NS));
    /** Deadline of the current operation; 0 until it is known (see {@link #deadline()}). */
    private long deadlineNs;
    private long opTimeoutNs;
    /** When the next health check is due; another thread brings it forward ({@link #peerExited}). */
    private long nextHealthNs;
    /** {@link #HEALTH_INTERVAL_NS}, or the short one once a peer exited (written before nextHealthNs, released). */
    private volatile long healthIntervalNs = HEALTH_INTERVAL_NS;
    /** Health checks run (tests read it). */
    long healthChecks;
    private boolean yieldsAtOnce;

    /** A policy reporting to {@code owner}. */
    public WaitPolicy(Owner owner) {
        this.owner = owner;
    }

    /**
     * The ranks of this host do not each have a CPU of their own ({@link CpuPlacement}; Open MPI's "oversubscribed"):
     * never spin, yield at once and for long, so the rank this one waits for gets the core (it is runnable and needs
     * it; spinning only delays it by the rest of the time slice). Open MPI does the same. Unless
     * {@code JCCL_SPIN_US} is set explicitly.
     */
    public void oversubscribed(boolean oversubscribed) {
        if (oversubscribed && Config.value("JCCL_SPIN_US") == null) {
            plain = new BackoffIdleStrategy(0, 5_000_000, BackoffIdleStrategy.PARK_MAX_NS);
            message = new AdaptiveSpinIdleStrategy(0, 1, plain);
            direct = new AdaptiveSpinIdleStrategy(0, 32, plain);
            yieldsAtOnce = true;
        }
    }

    /** Whether waits yield at once instead of spinning (the host is oversubscribed and JCCL_SPIN_US is unset). */
    public boolean yieldsAtOnce() {
        return yieldsAtOnce;
    }

    /** Spin, yield, park: waits that are not an exchange or a flag barrier. */
    public BackoffIdleStrategy plain() {
        return plain;
    }

    /** The message path's exchanges. */
    public AdaptiveSpinIdleStrategy message() {
        return message;
    }

    /** The direct path's flag barriers. */
    public AdaptiveSpinIdleStrategy direct() {
        return direct;
    }

    /**
     * A new operation with timeout {@code timeoutNs}, begun at {@code nowNs} (0 when the communicator did not read
     * the clock for it: its deadline then starts at its first slow wait).
     */
    public void opBegan(long nowNs, long timeoutNs) {
        opTimeoutNs = timeoutNs;
        deadlineNs = nowNs != 0 ? nowNs + timeoutNs : 0;
    }

    /** Sets the current operation's deadline (start-up's first barrier, the closing barrier). */
    public void setDeadline(long deadlineNs) {
        this.deadlineNs = deadlineNs;
    }

    /**
     * The current operation's deadline; an operation begun without a clock reading gets it now, at its first wait
     * that outlasted the spin, and the flight recorder starts timing it from here.
     */
    public long deadline() {
        if (deadlineNs == 0) {
            long now = System.nanoTime();
            deadlineNs = now + opTimeoutNs;
            owner.deadlineStarted(now);
        }
        return deadlineNs;
    }

    /** A wait's slow phase begins: its first health check is due one interval from now. */
    public void beginWait() {
        nextHealthNs = System.nanoTime() + healthIntervalNs;
    }

    /**
     * A peer's process on this host exited ({@link io.jccl.common.ProcessExits}; any thread): the current or next
     * wait checks its peers' health at its next idle round, and from now on every
     * {@link #EXITED_HEALTH_INTERVAL_NS}, so a {@code kill -9} is detected in milliseconds, not at the next 100 ms
     * check (and the revocation that follows spreads as fast).
     */
    public void peerExited() {
        healthIntervalNs = EXITED_HEALTH_INTERVAL_NS;
        NEXT_HEALTH.setRelease(this, System.nanoTime() - 1); // due now (one clock for all threads)
    }

    /** What every idle round after the spin checks: abort, the deadline, and now and then the peers' health. */
    public void check(Subject subject) {
        owner.checkNotAborted();
        long now = System.nanoTime();
        if (now - deadline() > 0) {
            throw owner.timeout("waiting for " + subject.describeWait());
        }
        // acquire: a plain load on x86 and ARM's ldar; another thread may bring the check forward (peerExited)
        if (now - (long) NEXT_HEALTH.getAcquire(this) > 0) {
            nextHealthNs = now + healthIntervalNs;
            healthChecks++;
            owner.checkRevokedByPeers();
            subject.checkHealth();
        }
    }

    /** A plain wait's round: after work a new idle period, otherwise {@link #check} and the plain strategy. */
    public void idle(int work, Subject subject) {
        if (work > 0) {
            plain.reset();
            return;
        }
        check(subject);
        plain.idle();
    }

    /** Starts a plain wait ({@link #idle(int, Subject)} rounds follow). */
    public void beginPlainWait() {
        plain.reset();
        beginWait();
    }
}
