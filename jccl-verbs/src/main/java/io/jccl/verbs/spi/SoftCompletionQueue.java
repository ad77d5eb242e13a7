package io.jccl.verbs.spi;

import io.jccl.common.idle.BackoffIdleStrategy;
import io.jccl.common.idle.IdleStrategy;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.Context;
import io.jccl.verbs.VerbsException;
import io.jccl.verbs.WorkCompletion;
import io.jccl.verbs.WorkCompletionOpcode;
import io.jccl.verbs.WorkCompletionStatus;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.Arrays;
import java.util.concurrent.locks.LockSupport;

/**
 * A completion queue in software, shared by the providers: a ring of completions stored as primitive arrays (no
 * objects per completion), filled by queue pairs and progress threads, drained by {@link #poll}. Polling first
 * drives the {@link Progressable}s attached to the queue, so single-threaded applications make progress simply by
 * polling.
 */
public class SoftCompletionQueue implements CompletionQueue {
    private final Context context;
    private final int capacity;
    private final long[] wrIds;
    private final byte[] statuses;
    private final byte[] opcodes;
    private final int[] byteLengths;
    private final int[] immediates;
    private final boolean[] withImmediate;
    private final int[] queuePairNumbers;
    private final int[] sourceQueuePairNumbers;
    private final int[] vendorErrors;
    private long head;
    private long tail;
    private volatile boolean overflowed;
    private volatile boolean closed;
    private volatile Thread waiter;
    private volatile Progressable[] progressables = new Progressable[0];
    private int users;
    // One waiter at a time is the common case; sharing the idler between concurrent waiters only blurs timing.
    private final IdleStrategy idler;
    /** How long a blocking poll spins and yields before it parks (the default backoff's phases). */
    static final long PARK_AFTER_NS = BackoffIdleStrategy.SPIN_NS + BackoffIdleStrategy.YIELD_NS;


    private static final VarHandle HEAD;
    private static final VarHandle TAIL;

    static {
        try {
            MethodHandles.Lookup lookup = MethodHandles.lookup();
            HEAD = lookup.findVarHandle(SoftCompletionQueue.class, "head", long.class);
            TAIL = lookup.findVarHandle(SoftCompletionQueue.class, "tail", long.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    /** A queue holding {@code capacity} completions whose blocking poll spins, yields, then parks. */
    public SoftCompletionQueue(Context context, int capacity) {
        this(context, capacity, new BackoffIdleStrategy());
    }

    /**
     * A queue holding {@code capacity} completions whose blocking poll waits with {@code idler} (a provider passes
     * one that sleeps on its own wake-up source).
     */
    protected SoftCompletionQueue(Context context, int capacity, IdleStrategy idler) {
        this.idler = idler;
        if (capacity < 1) {
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT, "completion queue capacity must be >= 1");
        }
        this.context = context;
        this.capacity = capacity;
        wrIds = new long[capacity];
        statuses = new byte[capacity];
        opcodes = new byte[capacity];
        byteLengths = new int[capacity];
        immediates = new int[capacity];
        withImmediate = new boolean[capacity];
        queuePairNumbers = new int[capacity];
        sourceQueuePairNumbers = new int[capacity];
        vendorErrors = new int[capacity];
    }

    /**
     * Adds a completion. Never blocks: when the queue is full it is marked overflowed (as an ibv CQ overrun, an
     * error the application sees at its next poll) and the completion is dropped.
     */
    public void push(long wrId, WorkCompletionStatus status, WorkCompletionOpcode opcode, int byteLength,
                     int immediateData, boolean withImm, int queuePairNumber, int sourceQueuePairNumber,
                     int vendorError) {
        synchronized (this) {
            if (tail - head >= capacity) {
                overflowed = true;
            } else {
                int i = (int) (tail % capacity);
                wrIds[i] = wrId;
                statuses[i] = (byte) status.ordinal();
                opcodes[i] = (byte) opcode.ordinal();
                byteLengths[i] = byteLength;
                immediates[i] = immediateData;
                withImmediate[i] = withImm;
                queuePairNumbers[i] = queuePairNumber;
                sourceQueuePairNumbers[i] = sourceQueuePairNumber;
                vendorErrors[i] = vendorError;
                tail++;
            }
        }
        Thread sleeping = waiter;
        if (sleeping != null) {
            LockSupport.unpark(sleeping);
        }
    }

    /** Attaches something that {@link #poll} should drive (a provider's queue pair). */
    public synchronized void attach(Progressable progressable) {
        Progressable[] current = progressables;
        Progressable[] next = Arrays.copyOf(current, current.length + 1);
        next[current.length] = progressable;
        progressables = next;
    }

    /** Detaches a progressable. */
    public synchronized void detach(Progressable progressable) {
        Progressable[] current = progressables;
        for (int i = 0; i < current.length; i++) {
            if (current[i] == progressable) {
                Progressable[] next = new Progressable[current.length - 1];
                System.arraycopy(current, 0, next, 0, i);
                System.arraycopy(current, i + 1, next, i, current.length - i - 1);
                progressables = next;
                return;
            }
        }
    }

    /** Counts a queue pair that uses this queue (close fails while any does). */
    public synchronized void addUser() {
        if (closed) {
            throw new VerbsException(VerbsException.Reason.CLOSED, "completion queue is closed");
        }
        users++;
    }

    /** Releases a use taken with {@link #addUser()}. */
    public synchronized void removeUser() {
        users--;
    }

    /** Tells the attached progressables that a blocking poll is about to park ({@link Progressable#pollerParks}). */
    public void pollerParks() {
        for (Progressable progressable : progressables) {
            progressable.pollerParks();
        }
    }

    /** Drives the attached progressables once; returns the work done. */
    public int progress() {
        int work = 0;
        for (Progressable progressable : progressables) {
            work += progressable.progress();
        }
        return work;
    }

    @Override
    public int poll(WorkCompletion[] out, int max) {
        if (closed) {
            throw new VerbsException(VerbsException.Reason.CLOSED, "completion queue is closed");
        }
        progress();
        return drain(out, max);
    }

    private int drain(WorkCompletion[] out, int max) {
        // Empty-queue fast path without the monitor: head and tail only grow under it, so an acquire read of
        // both that finds them equal means nothing had been pushed as of that read (a push racing with it is
        // found by the next poll), and an overflow is still reported since its flag is checked first.
        if (!overflowed && (long) TAIL.getAcquire(this) == (long) HEAD.getAcquire(this)) {
            return 0;
        }
        int n;
        synchronized (this) {
            if (overflowed) {
                throw new VerbsException(VerbsException.Reason.NO_RESOURCES, "completion queue overrun: more than "
                    + capacity + " completions were outstanding; create the CQ with a larger capacity");
            }
            n = (int) Math.min(Math.min(max, out.length), tail - head);
            for (int k = 0; k < n; k++) {
                int i = (int) (head % capacity);
                out[k].set(wrIds[i], WorkCompletionStatus.fromOrdinal(statuses[i]),
                    WorkCompletionOpcode.fromOrdinal(opcodes[i]), byteLengths[i], immediates[i], withImmediate[i],
                    queuePairNumbers[i], sourceQueuePairNumbers[i], vendorErrors[i]);
                head++;
            }
        }
        return n;
    }

    @Override
    public int poll(WorkCompletion[] out, int max, long timeoutNs) {
        int n = poll(out, max);
        if (n > 0 || timeoutNs <= 0) {
            return n;
        }
        long startNs = System.nanoTime();
        long deadline = startNs + timeoutNs;
        IdleStrategy idle = idler;
        idle.reset();
        Thread self = Thread.currentThread();
        try {
            while (true) {
                waiter = self;
                n = poll(out, max);
                if (n > 0) {
                    return n;
                }
                long nowNs = System.nanoTime();
                long leftNs = deadline - nowNs;
                if (leftNs <= 0) {
                    return 0;
                }
                // Past spinning and yielding the poller parks for up to a millisecond: whoever stood by because
                // this poll drove the queue pairs (tcp's progress thread) must serve their sockets meanwhile. Before
                // every park, not only the first: the poll after each wake-up drives them again, and a progress
                // thread that went back to standby then left a peer's READs waiting for the next wake-up (up to
                // 1 ms: the p99 of every tcp0 embedding lookup).
                if (nowNs - startNs >= PARK_AFTER_NS) {
                    pollerParks();
                }
                idle.idleAtMost(leftNs);
            }
        } finally {
            waiter = null;
        }
    }

    /**
     * Whether a completion is waiting to be polled (an acquire read, no lock: a provider's sleep phase checks it
     * after announcing that it sleeps, so that nothing pushed before is slept through).
     */
    protected boolean hasCompletions() {
        return overflowed || (long) TAIL.getAcquire(this) != (long) HEAD.getAcquire(this);
    }

    /** Completions waiting to be polled. */
    public synchronized int size() {
        return (int) (tail - head);
    }

    @Override
    public int capacity() {
        return capacity;
    }

    @Override
    public Context context() {
        return context;
    }

    @Override
    public synchronized void close() {
        if (closed) {
            return;
        }
        if (users > 0) {
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT,
                "completion queue still used by " + users + " queue pair(s) (EBUSY): destroy them first");
        }
        closed = true;
    }
}
