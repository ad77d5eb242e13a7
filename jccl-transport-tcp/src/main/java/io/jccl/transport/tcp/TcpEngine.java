package io.jccl.transport.tcp;

import io.jccl.common.Log;
import io.jccl.common.idle.BackoffIdleStrategy;
import io.jccl.common.idle.IdleStrategy;
import io.jccl.common.idle.Sleeper;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.util.Arrays;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import java.util.function.Consumer;

/**
 * One progress thread of a tcp context (an Agrona-style duty cycle): a selector over its connections, a small task
 * queue for work handed over from other threads (registrations), and timers (RNR retries, connection deadlines).
 *
 * <p>Each round: hand-over tasks and kicked QPs, a non-blocking {@code selectNow()}, due timers. When a round found
 * nothing the thread waits through an {@link IdleStrategy}: it keeps doing rounds ({@code selectNow()} busy-polling)
 * for {@code spinNs} after the last work, then blocks in {@code select()} until a timer is due (at most 100 ms) or
 * it is woken; a blocking select that dispatched readiness starts a new idle period (one that timed out does not, nor
 * do timers: they found nothing to spin for). Waking a blocked thread costs 40–150 µs, so
 * posting threads kick it only when it must look at once, and {@link #wakeupIfSleeping()} pays for
 * {@link Selector#wakeup()} only when the thread is really blocked. Spinning helps only while a core is free: while
 * the 1-minute load average, less this thread's own share of it, is at or above the number of cores the thread
 * blocks at once ({@link SpinGate}).
 *
 * <p>Who drives each QP's socket, and when this thread goes into <em>standby</em> (parks and looks every tick while
 * application threads drive every connected QP), is decided by its {@link IoDriverPolicy}.
 */
final class TcpEngine implements Runnable {
    /** Something registered with the selector. */
    interface Handler {
        /** Handles readiness; must not throw. */
        void onSelected(SelectionKey key);
    }

    private static final long IDLE_TIMER_NS = 100_000_000L;
    private static final int AWAKE = 0;
    private static final int SELECTING = 1;
    private static final int PARKED = 2;
    private static final long LOAD_CHECK_NS = 250_000_000L;

    final Selector selector;
    final Thread thread;
    /** Who drives this thread's QPs: application threads or this thread; standby and kicks. */
    final IoDriverPolicy policy = new IoDriverPolicy(this);
    private final ConcurrentLinkedQueue<Runnable> tasks = new ConcurrentLinkedQueue<>();
    private final AtomicLong nextTimerNs = new AtomicLong(Long.MAX_VALUE);
    private final Consumer<SelectionKey> dispatch = this::dispatch;
    /** Active and idle: spin for spinNs after the last work, then block in select (until a timer, at most 100 ms). */
    private final IdleStrategy spinThenSelect;
    private final long spinNs;
    /** The same without the spin, while the machine is oversubscribed. */
    private final IdleStrategy selectOnly;
    /** Standby: park for one standby look at a time. */
    private final IdleStrategy standbyPark;
    private volatile TcpQueuePair[] queuePairs = new TcpQueuePair[0];
    private volatile Runnable extraTimer;
    private volatile boolean running = true;
    /** AWAKE, SELECTING (blocked in select: wake with Selector.wakeup) or PARKED (standby: unpark). */
    private volatile int sleeping;
    /** A blocking select dispatched readiness: the next idle period spins again (not after a timeout). */
    private boolean selectReturned;
    /** Whether spinning helps now: not while the machine has more runnable threads than cores. */
    private boolean spinAllowed = true;
    /** Decides {@link #spinAllowed} and whether each idle period spins; this thread's only. */
    private final SpinGate spinGate = SpinGate.forThisMachine();
    /** When the idle period open now began (0: none is), and whether it spins. */
    private long idleSinceNs;
    private boolean idleSpins;
    /** Spins as on an idle host whatever the load (tests: the idle-host behaviour on a loaded CI machine). */
    volatile boolean spinDespiteLoad;
    /** A blocking select (without a spin after it) dispatched readiness: the next round skips its selectNow(). */
    private boolean selectDispatched;
    /** Loop iterations, standby parks and selectNow() calls of this thread (written by it only; read by tests). */
    volatile long loops;
    volatile long selectNowCalls;
    volatile long standbyParks;
    private long loadCheckedNs;
    /** Kicks that found their QP's lock taken wait for the timers (this thread only). */
    private boolean kickRetry;
    /** Dispatches that found nothing to do: the QP's I/O was its application's (this thread only). */
    private int fruitlessDispatches;
    /** QPs whose input this thread does not watch while their pollers read it (IoDriverPolicy, rule 7). */
    private TcpQueuePair[] muted = new TcpQueuePair[4];
    private int mutedCount;

    TcpEngine(String name, long spinNs) throws IOException {
        this.selector = Selector.open();
        this.thread = Thread.ofPlatform().name(name).daemon(true).unstarted(this);
        this.spinNs = spinNs;
        Sleeper select = this::selectAtMost;
        // Spin, reading the clock every round (each round is a selectNow()), then select.
        this.spinThenSelect = new BackoffIdleStrategy(spinNs, 0, IDLE_TIMER_NS, IDLE_TIMER_NS, select, 1);
        this.selectOnly = new BackoffIdleStrategy(0, 0, IDLE_TIMER_NS, IDLE_TIMER_NS, select);
        this.standbyPark = new BackoffIdleStrategy(0, 0, IoDriverPolicy.STANDBY_TICK_NS,
            IoDriverPolicy.STANDBY_TICK_NS, this::parkInStandby);
    }

    void start() {
        thread.start();
    }

    /** Runs {@code task} on this thread soon. */
    void execute(Runnable task) {
        tasks.add(task);
        policy.kickUrgently();
    }

    /** Wakes the thread if it is blocked in select or parked in standby. */
    void wakeupIfSleeping() {
        int s = sleeping;
        if (s == SELECTING) {
            selector.wakeup();
        } else if (s == PARKED) {
            LockSupport.unpark(thread);
        }
    }

    /** Wakes the thread only if it is blocked in select (a thread in standby applies changes at its next tick). */
    void wakeupIfSelecting() {
        if (sleeping == SELECTING) {
            selector.wakeup();
        }
    }

    /** Whether the thread is (about to be) blocked in select, where it would not see a lazy kick. */
    boolean blockedInSelect() {
        return sleeping == SELECTING;
    }

    /** Makes sure the timers run no later than {@code deadlineNs}. */
    void schedule(long deadlineNs) {
        while (true) {
            long current = nextTimerNs.get();
            if (deadlineNs >= current) {
                return;
            }
            if (nextTimerNs.compareAndSet(current, deadlineNs)) {
                if (sleeping == SELECTING) {
                    // A thread in standby looks at its timers every tick anyway: no wake-up for it.
                    selector.wakeup();
                }
                return;
            }
        }
    }

    synchronized void add(TcpQueuePair queuePair) {
        TcpQueuePair[] next = Arrays.copyOf(queuePairs, queuePairs.length + 1);
        next[next.length - 1] = queuePair;
        queuePairs = next;
    }

    synchronized void remove(TcpQueuePair queuePair) {
        TcpQueuePair[] current = queuePairs;
        for (int i = 0; i < current.length; i++) {
            if (current[i] == queuePair) {
                TcpQueuePair[] next = new TcpQueuePair[current.length - 1];
                System.arraycopy(current, 0, next, 0, i);
                System.arraycopy(current, i + 1, next, i, current.length - i - 1);
                queuePairs = next;
                return;
            }
        }
    }

    /** A timer hook run with the queue pairs' timers (the context's handshake deadlines). */
    void setExtraTimer(Runnable timer) {
        this.extraTimer = timer;
    }

    void stop() {
        running = false;
        selector.wakeup();
        LockSupport.unpark(thread);
        if (Thread.currentThread() != thread) {
            try {
                thread.join(2000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        try {
            selector.close();
        } catch (IOException ignored) {
            // nothing left to do
        }
    }

    @Override
    public void run() {
        while (running) {
            loops++;
            try {
                int work = 0;
                if (policy.takeKicks()) {
                    work += runTasks();
                    work += runKicks();
                    if (!tasks.isEmpty()) {
                        policy.kickLazily();
                    }
                }
                if (selectDispatched) {
                    // The blocking select just dispatched what was ready and this thread does not spin: the select
                    // it goes back into returns at once for anything ready since, so a selectNow() first was one
                    // more system call per request served (epoll_wait: 1.9 per request at batch 1, now ~1).
                    selectDispatched = false;
                } else {
                    int fruitless = fruitlessDispatches;
                    selectNowCalls++;
                    work += selector.selectNow(dispatch) - (fruitlessDispatches - fruitless);
                }
                long now = System.nanoTime();
                if (mutedCount > 0) {
                    work += watchAgain(now);
                }
                if (now - nextTimerNs.get() >= 0) {
                    // Not work that restarts the spin: timers say nothing about input arriving soon, and a QP whose
                    // lock its poller holds retries its timer every 0.2 ms (5-16 spins of 50 us per 100 ms, rule 7).
                    runTimers(now);
                }
                boolean driven = policy.standbyWanted(queuePairs, now);
                if (work > 0 && !driven) {
                    policy.active();
                    endIdlePeriodWithWork(now);
                    newIdlePeriod();
                    continue;
                }
                if (driven) {
                    policy.enterStandby();
                    standbyPark.idle();
                    newIdlePeriod();
                    continue;
                }
                if (policy.leaveStandby()) {
                    newIdlePeriod();
                    continue;
                }
                if (now - loadCheckedNs > LOAD_CHECK_NS) {
                    loadCheckedNs = now;
                    spinAllowed = spinGate.look(now);
                }
                if (idleSinceNs == 0) {
                    idleSinceNs = now == 0 ? 1 : now;
                    idleSpins = spinNs > 0 && spinGate.spinsThisPeriod(spinAllowed || spinDespiteLoad);
                }
                IdleStrategy idle = idleSpins ? spinThenSelect : selectOnly;
                // While input is muted, look every standby tick: its poller may stop without parking.
                long maxWaitNs = mutedCount > 0 ? IoDriverPolicy.STANDBY_TICK_NS : IDLE_TIMER_NS;
                idle.idleAtMost(Math.min(nextTimerNs.get() - now, maxWaitNs));
                if (selectReturned) {
                    selectReturned = false;
                    selectDispatched = idle == selectOnly;
                    endIdlePeriodWithWork(System.nanoTime());
                    newIdlePeriod();
                }
            } catch (Throwable t) {
                if (!running) {
                    return;
                }
                // The loop must survive anything a handler does; handlers report their own errors.
                Log.get().warn(-1, Log.Subsys.NET, "tcp: progress thread " + thread.getName() + ": " + t);
            }
        }
    }

    /** Work was done (or a wait ended): the next wait spins again first (where its idle period spins). */
    private void newIdlePeriod() {
        spinThenSelect.reset();
        selectOnly.reset();
        idleSinceNs = 0;
    }

    /** Work ended the idle period open now, if one is: the gate learns whether its spin (if it spun) caught it. */
    private void endIdlePeriodWithWork(long nowNs) {
        if (idleSinceNs != 0) {
            spinGate.periodEnded(nowNs - idleSinceNs <= spinNs);
        }
    }

    /**
     * The idle strategies' sleep while active: blocks in select, dispatching what becomes ready, until a timer is
     * due, at most {@code maxNs} (rounded up to milliseconds, select's unit), unless a kick is pending.
     */
    private void selectAtMost(long maxNs) {
        sleeping = SELECTING;
        try {
            if (policy.kickPending() || !running) {
                return; // look at the kicks first; the idle period goes on
            }
            long waitNs = Math.min(maxNs, nextTimerNs.get() - System.nanoTime());
            // Only a select that dispatched readiness to a handler that did something starts a new idle period (and
            // its spin). One that timed out, was only woken, or found a QP its application drives found nothing to
            // spin for: the kick or interest change it was woken for counts as the next round's work. Spinning after
            // every timeout cost 50 us of selectNow() per 1 ms look while a poller held a QP's input (rule 7): ~120
            // loops per look, 5 % of a core, on an idle host.
            int fruitless = fruitlessDispatches;
            if (waitNs > 0 && selector.select(dispatch, Math.max(1, (waitNs + 999_999) / 1_000_000))
                > fruitlessDispatches - fruitless) {
                selectReturned = true;
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        } finally {
            sleeping = AWAKE;
        }
    }

    /**
     * The standby strategy's sleep: parks for one look ({@code tickNs}, or the ACK hold time while lazy kicks are
     * pending), unless an urgent kick is pending. The state is published before the kick is read, so a kicker
     * either is seen or unparks this thread.
     */
    private void parkInStandby(long tickNs) {
        sleeping = PARKED;
        try {
            if (policy.mayParkInStandby() && running) {
                standbyParks++;
                LockSupport.parkNanos(this, policy.standbyParkNs(tickNs));
            }
        } finally {
            sleeping = AWAKE;
        }
    }

    /**
     * A handler dispatched by this thread left the readiness to an application thread (it holds the QP's lock, or
     * drives it): not work, so it does not restart the spin. This thread only.
     */
    void dispatchFoundNothing() {
        fruitlessDispatches++;
    }

    /** This thread stopped watching {@code queuePair}'s input (IoDriverPolicy, rule 7). This thread only. */
    void muted(TcpQueuePair queuePair) {
        if (mutedCount == muted.length) {
            muted = Arrays.copyOf(muted, muted.length * 2);
        }
        muted[mutedCount++] = queuePair;
    }

    /**
     * Watches the input of muted QPs again once no poll read them for {@link IoDriverPolicy#DRIVEN_NS} (a poller
     * that stopped without parking), and forgets those unmuted meanwhile or gone; returns how many it unmuted.
     */
    private int watchAgain(long nowNs) {
        int kept = 0;
        int work = 0;
        for (int i = 0; i < mutedCount; i++) {
            TcpQueuePair qp = muted[i];
            boolean keep = qp.io.readMuted();
            if (keep && (!qp.connected() || !qp.io.applicationPolls(nowNs)) && qp.watchInputAgain()) {
                keep = false;
                work++;
            }
            if (keep) {
                muted[kept++] = qp;
            }
        }
        Arrays.fill(muted, kept, mutedCount, null);
        mutedCount = kept;
        return work;
    }

    private int runTasks() {
        int n = 0;
        int budget = tasks.size(); // tasks that re-queue themselves run again after the next select
        Runnable task;
        while (n < budget && (task = tasks.poll()) != null) {
            try {
                task.run();
            } catch (RuntimeException e) {
                Log.get().warn(-1, Log.Subsys.NET, "tcp: task failed: " + e);
            }
            n++;
        }
        return n;
    }

    private int runKicks() {
        int n = 0;
        for (TcpQueuePair qp : queuePairs) {
            if (qp.io.takeKick() && qp.onKick()) {
                n++;
            }
        }
        return n;
    }

    /** Looks at the QPs kicked with {@code kickLater} no later than {@code deadlineNs}. This thread only. */
    void retryKicksAt(long deadlineNs) {
        kickRetry = true;
        schedule(deadlineNs);
    }

    private void runTimers(long now) {
        nextTimerNs.set(Long.MAX_VALUE);
        if (kickRetry) {
            kickRetry = false;
            policy.kickLazily();
        }
        long next = now + IDLE_TIMER_NS;
        for (TcpQueuePair qp : queuePairs) {
            next = Math.min(next, qp.onTimer(now));
        }
        Runnable extra = extraTimer;
        if (extra != null) {
            extra.run();
        }
        schedule(next);
    }

    private void dispatch(SelectionKey key) {
        Object attachment = key.attachment();
        if (attachment instanceof Handler handler) {
            try {
                handler.onSelected(key);
            } catch (Throwable t) {
                key.cancel();
                Log.get().warn(-1, Log.Subsys.NET, "tcp: handler failed: " + t);
            }
        }
    }
}
