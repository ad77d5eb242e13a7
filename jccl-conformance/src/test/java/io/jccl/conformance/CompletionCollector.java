package io.jccl.conformance;

import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.WorkCompletion;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * Polls one completion queue from a background thread and sorts the completions by queue-pair number.
 *
 * <p>Polling drives a provider's progress ({@link CompletionQueue} says so), and a real peer is a process that
 * keeps polling. Collecting in the background keeps each end of a connection alive while the test thread waits on
 * the other end, so no test depends on which end happens to be polled. It also exercises
 * {@link CompletionQueue#poll(WorkCompletion[], int, long)} from a thread other than the posting one.
 */
public final class CompletionCollector implements AutoCloseable {
    private static final long POLL_SLICE_NS = TimeUnit.MILLISECONDS.toNanos(50);

    private final CompletionQueue queue;
    private final Map<Integer, LinkedBlockingQueue<Completion>> byQueuePair = new ConcurrentHashMap<>();
    private final Thread thread;
    private volatile boolean running = true;
    private volatile Throwable failure;

    /** Starts collecting from {@code queue} on a daemon thread called {@code name}. */
    public CompletionCollector(CompletionQueue queue, String name) {
        this.queue = queue;
        thread = Thread.ofPlatform().daemon().name(name).start(this::run);
    }

    private void run() {
        WorkCompletion[] batch = WorkCompletion.array(32);
        try {
            while (running) {
                int n = queue.poll(batch, batch.length, POLL_SLICE_NS);
                for (int i = 0; i < n; i++) {
                    Completion c = Completion.of(batch[i]);
                    queueOf(c.queuePairNumber()).add(c);
                }
            }
        } catch (Throwable t) {
            if (running) {
                failure = t;
            }
        }
    }

    private LinkedBlockingQueue<Completion> queueOf(int queuePairNumber) {
        return byQueuePair.computeIfAbsent(queuePairNumber, k -> new LinkedBlockingQueue<>());
    }

    /**
     * Waits up to {@code timeoutNs} for {@code count} completions of queue pair {@code queuePairNumber} and returns
     * those that arrived (fewer when the deadline passed first), oldest first.
     */
    public List<Completion> await(int queuePairNumber, int count, long timeoutNs) {
        List<Completion> out = new ArrayList<>(count);
        LinkedBlockingQueue<Completion> source = queueOf(queuePairNumber);
        long deadline = System.nanoTime() + timeoutNs;
        try {
            while (out.size() < count) {
                checkHealthy();
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    source.drainTo(out, count - out.size());
                    break;
                }
                Completion c = source.poll(Math.min(left, POLL_SLICE_NS), TimeUnit.NANOSECONDS);
                if (c != null) {
                    out.add(c);
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        return out;
    }

    /** Throws when the polling thread failed (for example on a completion-queue overrun). */
    public void checkHealthy() {
        Throwable t = failure;
        if (t != null) {
            throw new IllegalStateException("polling the completion queue failed: " + t, t);
        }
    }

    /** Drops everything collected for {@code queuePairNumber}. */
    public void forget(int queuePairNumber) {
        byQueuePair.remove(queuePairNumber);
    }

    /** Stops the polling thread (waits up to 5 s for it). */
    @Override
    public void close() {
        running = false;
        try {
            thread.join(5_000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
