package io.jccl.transport.tcp;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.util.Arrays;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import java.util.function.Consumer;

/**
 * One progress thread of a tcp context: a selector over its connections, a small task queue for work handed over
 * from other threads (registrations), and timers (RNR retries, connection deadlines).
 *
 * <p>Waking a thread parked in {@code select()} costs 40–150 µs on the target machines, so the loop first
 * busy-polls with {@code selectNow()} for {@code spinNs} after the last piece of work, then blocks. Posting threads
 * call {@link #kick()}, which only pays for {@link Selector#wakeup()} when the thread is really blocked.
 *
 * <p><b>Standby.</b> While application threads drive every connected QP of this thread themselves (they poll
 * the QPs' completion queues, which does the QPs' socket I/O inline, see {@link TcpQueuePair#progress()}), this
 * thread neither spins nor blocks in {@code select()}: either would take a core from the pollers (spinning) or be
 * woken by every arriving segment (blocking), and on a 2-core machine with both ends busy-polling that halves
 * throughput and doubles latency. It parks instead and looks every {@link #STANDBY_TICK_NS}: a non-blocking
 * select (applies interest changes, serves anything not driven), hand-over tasks, kicks, timers. When polls stop
 * for {@link TcpQueuePair#DRIVEN_NS} it takes the I/O back, so a QP whose application stops polling is served
 * again within about 2 ms.
 */
final class TcpEngine implements Runnable {
    /** Something registered with the selector. */
    interface Handler {
        /** Handles readiness; must not throw. */
        void onSelected(SelectionKey key);
    }

    private static final long IDLE_TIMER_NS = 100_000_000L;
    /** How often a thread in standby looks at its connections. */
    static final long STANDBY_TICK_NS = 1_000_000L;
    private static final int AWAKE = 0;
    private static final int SELECTING = 1;
    private static final int PARKED = 2;
    private static final long LOAD_CHECK_NS = 250_000_000L;
    private static final Path LOADAVG = Path.of("/proc/loadavg");

    final Selector selector;
    final Thread thread;
    private final long spinNs;
    private final ConcurrentLinkedQueue<Runnable> tasks = new ConcurrentLinkedQueue<>();
    private final AtomicLong nextTimerNs = new AtomicLong(Long.MAX_VALUE);
    private final Consumer<SelectionKey> dispatch = this::dispatch;
    private volatile TcpQueuePair[] queuePairs = new TcpQueuePair[0];
    private volatile Runnable extraTimer;
    private volatile boolean running = true;
    /** AWAKE, SELECTING (blocked in select: wake with Selector.wakeup) or PARKED (standby: unpark). */
    private volatile int sleeping;
    /** Whether application threads are driving every connected QP of this thread (see the class comment). */
    private volatile boolean standby;
    private volatile boolean kickPending;
    /**
     * A task or a kick that must not wait for the next standby tick ({@link #execute}, {@link #kick}); a lazy kick
     * ({@link #kickLazily}) leaves a thread in standby parked until its tick. Written before {@code sleeping} is
     * read, read after it is written, so a parking thread either sees it or is unparked.
     */
    private volatile boolean urgentKick;
    /** Whether spinning helps now: not while the machine has more runnable threads than cores. */
    private boolean spinAllowed = true;
    /** Loop iterations and standby parks of this thread (written by it only; read by tests). */
    volatile long loops;
    volatile long standbyParks;
    private long loadCheckedNs;

    TcpEngine(String name, long spinNs) throws IOException {
        this.selector = Selector.open();
        this.spinNs = spinNs;
        this.thread = Thread.ofPlatform().name(name).daemon(true).unstarted(this);
    }

    void start() {
        thread.start();
    }

    /** Runs {@code task} on this thread soon. */
    void execute(Runnable task) {
        tasks.add(task);
        urgentKick = true;
        kickPending = true;
        wakeupIfSleeping();
    }

    /** Asks the thread to look at kicked queue pairs. */
    void kick() {
        urgentKick = true;
        kickPending = true;
        wakeupIfSleeping();
    }

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

    /** Whether application threads currently drive this thread's QPs (it only looks every standby tick). */
    boolean inStandby() {
        return standby;
    }

    /** Whether the thread is (about to be) blocked in select, where it would not see a lazy kick. */
    boolean blockedInSelect() {
        return sleeping == SELECTING;
    }

    /** Asks for a look at kicked QPs at the next loop or standby tick, without waking a sleeping thread. */
    void kickLazily() {
        kickPending = true;
    }

    /**
     * Whether every connected QP was driven by an application poll within {@link TcpQueuePair#DRIVEN_NS} (and at
     * least one is connected).
     */
    private boolean allDriven(long now) {
        boolean any = false;
        for (TcpQueuePair qp : queuePairs) {
            if (qp.connected()) {
                if (!qp.drivenAt(now)) {
                    return false;
                }
                any = true;
            }
        }
        return any;
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
        long idleSinceNs = System.nanoTime();
        while (running) {
            loops++;
            try {
                int work = 0;
                if (kickPending) {
                    kickPending = false;
                    urgentKick = false;
                    work += runTasks();
                    work += runKicks();
                    if (!tasks.isEmpty()) {
                        kickPending = true;
                    }
                }
                work += selector.selectNow(dispatch);
                long now = System.nanoTime();
                if (now - nextTimerNs.get() >= 0) {
                    runTimers(now);
                    work++;
                }
                boolean driven = allDriven(now);
                if (work > 0 && !driven) {
                    standby = false;
                    idleSinceNs = now;
                    continue;
                }
                if (driven) {
                    standby = true;
                    sleeping = PARKED;
                    try {
                        // Only lazy kicks pending (a QP holding back an ACK while its application polls): look
                        // again when the hold may have run out, not at once. Looping on them kept this thread
                        // busy for as long as ACKs were held: ~60 000 loops/s and 15-17 % of a core per rank
                        // during 16 MiB all-reduces over tcp on 2 cores, taken from the application threads.
                        if (!urgentKick && running) {
                            standbyParks++;
                            LockSupport.parkNanos(this, kickPending ? TcpQueuePair.ACK_HOLD_NS : STANDBY_TICK_NS);
                        }
                    } finally {
                        sleeping = AWAKE;
                    }
                    idleSinceNs = System.nanoTime();
                    continue;
                }
                if (standby) {
                    standby = false;
                    kickPending = true; // QPs may hold back an ACK while driven: have a look at them now
                    idleSinceNs = now;
                    continue;
                }
                if (now - loadCheckedNs > LOAD_CHECK_NS) {
                    loadCheckedNs = now;
                    spinAllowed = spinHelps();
                }
                if (spinAllowed && now - idleSinceNs < spinNs) {
                    Thread.onSpinWait();
                    continue;
                }
                sleeping = SELECTING;
                try {
                    if (kickPending || !running) {
                        continue;
                    }
                    long waitNs = Math.min(nextTimerNs.get() - now, IDLE_TIMER_NS);
                    if (waitNs > 0) {
                        selector.select(dispatch, Math.max(1, (waitNs + 999_999) / 1_000_000));
                    }
                } finally {
                    sleeping = AWAKE;
                }
                idleSinceNs = System.nanoTime();
            } catch (Throwable t) {
                if (!running) {
                    return;
                }
                // The loop must survive anything a handler does; handlers report their own errors.
                System.err.println("jccl tcp: progress thread " + thread.getName() + ": " + t);
            }
        }
    }

    /**
     * Spinning only pays while a core is free. On an oversubscribed machine a spinning thread is just another
     * runnable thread competing for its fair share, while a thread blocked in select() is woken with priority
     * when data arrives: measured here (2 cores, load average 10), ib_write_lat-style ping-pong was typically
     * 4-6 ms with spinning and 0.26 ms without.
     */
    private static boolean spinHelps() {
        try {
            String text = Files.readString(LOADAVG);
            int end = text.indexOf(' ');
            double load = Double.parseDouble(end > 0 ? text.substring(0, end) : text.trim());
            return load < Runtime.getRuntime().availableProcessors();
        } catch (IOException | RuntimeException e) {
            return true; // no /proc (not Linux): spin as configured
        }
    }

    private int runTasks() {
        int n = 0;
        int budget = tasks.size(); // tasks that re-queue themselves run again after the next select
        Runnable task;
        while (n < budget && (task = tasks.poll()) != null) {
            try {
                task.run();
            } catch (RuntimeException e) {
                System.err.println("jccl tcp: task failed: " + e);
            }
            n++;
        }
        return n;
    }

    private int runKicks() {
        int n = 0;
        for (TcpQueuePair qp : queuePairs) {
            if (qp.kicked) {
                qp.kicked = false;
                qp.onKick();
                n++;
            }
        }
        return n;
    }

    private void runTimers(long now) {
        nextTimerNs.set(Long.MAX_VALUE);
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
                System.err.println("jccl tcp: handler failed: " + t);
            }
        }
    }
}
