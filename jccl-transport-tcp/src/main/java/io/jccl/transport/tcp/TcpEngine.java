package io.jccl.transport.tcp;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.util.Arrays;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;

/**
 * One progress thread of a tcp context: a selector over its connections, a small task queue for work handed over
 * from other threads (registrations), and timers (RNR retries, connection deadlines).
 *
 * <p>Waking a thread parked in {@code select()} costs 40–150 µs on the target machines, so the loop first
 * busy-polls with {@code selectNow()} for {@code spinNs} after the last piece of work, then blocks. Posting threads
 * call {@link #kick()}, which only pays for {@link Selector#wakeup()} when the thread is really blocked.
 */
final class TcpEngine implements Runnable {
    /** Something registered with the selector. */
    interface Handler {
        /** Handles readiness; must not throw. */
        void onSelected(SelectionKey key);
    }

    private static final long IDLE_TIMER_NS = 100_000_000L;
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
    private volatile boolean sleeping;
    private volatile boolean kickPending;
    /** Whether spinning helps now: not while the machine has more runnable threads than cores. */
    private boolean spinAllowed = true;
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
        kickPending = true;
        wakeupIfSleeping();
    }

    /** Asks the thread to look at kicked queue pairs. */
    void kick() {
        kickPending = true;
        wakeupIfSleeping();
    }

    void wakeupIfSleeping() {
        if (sleeping) {
            selector.wakeup();
        }
    }

    /** Makes sure the timers run no later than {@code deadlineNs}. */
    void schedule(long deadlineNs) {
        while (true) {
            long current = nextTimerNs.get();
            if (deadlineNs >= current) {
                return;
            }
            if (nextTimerNs.compareAndSet(current, deadlineNs)) {
                wakeupIfSleeping();
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
            try {
                int work = 0;
                if (kickPending) {
                    kickPending = false;
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
                if (work > 0) {
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
                sleeping = true;
                try {
                    if (kickPending || !running) {
                        continue;
                    }
                    long waitNs = Math.min(nextTimerNs.get() - now, IDLE_TIMER_NS);
                    if (waitNs > 0) {
                        selector.select(dispatch, Math.max(1, (waitNs + 999_999) / 1_000_000));
                    }
                } finally {
                    sleeping = false;
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
