package io.jccl.transport.shm;

import io.jccl.verbs.WorkCompletion;
import io.jccl.verbs.WorkCompletionOpcode;
import io.jccl.verbs.WorkCompletionStatus;
import io.jccl.verbs.spi.IdleStrategy;
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
        super(context, capacity);
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

    @Override
    public int poll(WorkCompletion[] out, int max, long timeoutNs) {
        int n = poll(out, max);
        if (n > 0 || timeoutNs <= 0) {
            return n;
        }
        long start = System.nanoTime();
        long deadline = start + timeoutNs;
        while (true) {
            long now = System.nanoTime();
            if (now - deadline >= 0) {
                return 0;
            }
            long idleNs = now - start;
            if (idleNs < IdleStrategy.SPIN_NS) {
                Thread.onSpinWait(); // a reply usually comes within microseconds: waking a sleeper costs ~100 µs
            } else if (idleNs < IdleStrategy.SPIN_NS + IdleStrategy.YIELD_NS) {
                Thread.yield();
            } else {
                int sequence = doorbell.enter();
                try {
                    n = poll(out, max); // after announcing ourselves: work published before this is seen here
                    if (n > 0) {
                        return n;
                    }
                    long capNs = hasTimedWork() ? IdleStrategy.PARK_MAX_NS : IDLE_SLEEP_NS;
                    doorbell.await(sequence, Math.min(deadline - now, capNs), TIMESPEC.get());
                    for (ShmQueuePair queuePair : queuePairs) {
                        queuePair.lookFullyNextPoll(); // after a sleep, the liveness timers are due at once
                    }
                } finally {
                    doorbell.leave();
                }
            }
            n = poll(out, max);
            if (n > 0) {
                return n;
            }
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
