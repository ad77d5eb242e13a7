package io.jccl.transport.shm;

import io.jccl.common.idle.BackoffIdleStrategy;
import io.jccl.common.idle.Sleeper;
import io.jccl.verbs.WorkCompletionOpcode;
import io.jccl.verbs.WorkCompletionStatus;
import io.jccl.verbs.spi.SoftCompletionQueue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.Arrays;

/**
 * The shm provider's completion queue: a {@link SoftCompletionQueue} whose blocking poll, after the usual spin and
 * yield phases, sleeps on the context's {@link Doorbell} (a shared futex) instead of waking every millisecond to
 * look. Peers ring the doorbell when they publish a receive result into one of our queue pairs, and local threads
 * ring it when they push a completion. Sleeps are still bounded: by {@code JCCL_PARK_MAX_US} while a queue pair
 * has a request waiting on a timer (RNR, peer not ready), otherwise by {@link #IDLE_SLEEP_NS} so that a peer
 * that died (and so never rings) is noticed by the periodic liveness check.
 */
public final class ShmCompletionQueue extends SoftCompletionQueue {
    /** Longest sleep when nothing waits on a timer (the liveness-check period). */
    public static final long IDLE_SLEEP_NS = 100_000_000L;

    private static final ThreadLocal<MemorySegment> TIMESPEC =
        ThreadLocal.withInitial(() -> Arena.ofAuto().allocate(16, 8));

    private final Doorbell doorbell;
    private volatile ShmQueuePair[] queuePairs = new ShmQueuePair[0];

    ShmCompletionQueue(ShmContext context, int capacity, Doorbell doorbell) {
        // A reply usually comes within microseconds (waking a sleeper costs ~100 µs): spin, yield, then sleep on
        // the doorbell for as long as the poll may wait, capped as sleepOnDoorbell says.
        DoorbellSleeper sleeper = new DoorbellSleeper();
        super(context, capacity, new BackoffIdleStrategy(BackoffIdleStrategy.SPIN_NS, BackoffIdleStrategy.YIELD_NS,
            IDLE_SLEEP_NS, IDLE_SLEEP_NS, sleeper));
        sleeper.queue = this;
        this.doorbell = doorbell;
    }

    synchronized void register(ShmQueuePair queuePair) {
        ShmQueuePair[] current = queuePairs;
        ShmQueuePair[] next = Arrays.copyOf(current, current.length + 1);
        next[current.length] = queuePair;
        queuePairs = next;
    }

    synchronized void unregister(ShmQueuePair queuePair) {
        queuePairs = Arrays.stream(queuePairs).filter(q -> q != queuePair).toArray(ShmQueuePair[]::new);
    }

    @Override
    public void push(long wrId, WorkCompletionStatus status, WorkCompletionOpcode opcode, int byteLength,
                     int immediateData, boolean withImm, int queuePairNumber, int sourceQueuePairNumber,
                     int vendorError) {
        super.push(wrId, status, opcode, byteLength, immediateData, withImm, queuePairNumber, sourceQueuePairNumber,
            vendorError);
        doorbell.ring(); // a thread of this process may sleep on the doorbell rather than on park/unpark
    }

    /**
     * The last phase of a blocking poll: sleep on the doorbell. Announced first ({@link Doorbell#enter}), then a
     * last look (work published before the announcement is seen here, and a ring after it wakes the sleep), then
     * at most {@code maxNs} (the poll's deadline, or {@link #IDLE_SLEEP_NS}), or {@code JCCL_PARK_MAX_US} while a
     * queue pair waits on a timer.
     */
    private void sleepOnDoorbell(long maxNs) {
        int sequence = doorbell.enter();
        try {
            if (progress() > 0 || hasCompletions()) {
                return;
            }
            long capNs = hasTimedWork() ? BackoffIdleStrategy.PARK_MAX_NS : IDLE_SLEEP_NS;
            doorbell.await(sequence, Math.min(maxNs, capNs), TIMESPEC.get());
            for (ShmQueuePair queuePair : queuePairs) {
                queuePair.lookFullyNextPoll(); // after a sleep, the liveness timers are due at once
            }
        } finally {
            doorbell.leave();
        }
    }

    /** The doorbell sleep as the idle strategy's last phase (bound once the queue exists). */
    private static final class DoorbellSleeper implements Sleeper {
        private ShmCompletionQueue queue;

        @Override
        public void sleep(long maxNs) {
            queue.sleepOnDoorbell(maxNs);
        }
    }

    private boolean hasTimedWork() {
        for (ShmQueuePair queuePair : queuePairs) {
            if (queuePair.hasTimedWork()) {
                return true;
            }
        }
        return false;
    }
}
