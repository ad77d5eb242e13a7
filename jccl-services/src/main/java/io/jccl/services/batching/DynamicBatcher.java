package io.jccl.services.batching;

/**
 * The batch-formation rules of Triton's dynamic batcher ({@code DynamicBatchScheduler::GetDynamicBatch} in
 * triton-inference-server/core, for requests of batch size 1), as a pure function of the queue and the clock so that
 * tests can drive it with a fake clock. Requests are slot numbers; nothing is allocated after construction.
 *
 * <p>Per decision, walking the queue from its oldest request: the pending batch grows one request at a time; reaching
 * a preferred size remembers it as the best; the first request that would exceed the largest preferred size (the
 * maximum batch size when none is preferred) fixes the best at what is pending; one that would exceed the maximum
 * batch size stops the walk. Then: a best size found and the oldest request's delay not exceeded → send the best
 * (the rest waits); the walk stopped at the maximum, or the pending batch reached the largest preferred size → send
 * what is pending; the delay exceeded, or no delay configured → send what is pending; else wait until the oldest
 * request's delay expires. Requests whose timeout passes while queued are rejected (Triton's REJECT policy).
 */
final class DynamicBatcher {
    private final int maxBatchSize;
    private final int maxPreferred;
    private final boolean[] preferred;
    private final boolean hasPreferred;
    private final long maxQueueDelayNs;
    private final int[] queue;
    private int head;
    private int count;
    /** Arrival time per slot. */
    final long[] enqueuedNs;
    /** Queue deadline per slot ({@link Long#MAX_VALUE}: none). */
    final long[] deadlineNs;
    private long nextDeadlineNs = Long.MAX_VALUE;
    /** Set by {@link #decide}: why the batch it returned closes. */
    private CloseReason reason = CloseReason.NONE;
    /** Set by {@link #decide} when it returned 0: nanoseconds until the oldest request's delay expires. */
    private long waitNs;

    DynamicBatcher(BatchingConfig config, int slots) {
        this.maxBatchSize = config.maxBatchSize();
        int[] sizes = config.preferredBatchSizes();
        this.preferred = new boolean[maxBatchSize + 2];
        for (int s : sizes) {
            preferred[s] = true;
        }
        this.hasPreferred = sizes.length > 0;
        this.maxPreferred = hasPreferred ? sizes[sizes.length - 1] : maxBatchSize;
        this.maxQueueDelayNs = config.maxQueueDelayNs();
        this.queue = new int[slots];
        this.enqueuedNs = new long[slots];
        this.deadlineNs = new long[slots];
    }

    int size() {
        return count;
    }

    CloseReason reason() {
        return reason;
    }

    long waitNs() {
        return waitNs;
    }

    /** The earliest queue deadline of a queued request ({@link Long#MAX_VALUE}: none). */
    long nextDeadlineNs() {
        return nextDeadlineNs;
    }

    /** Queues {@code slot}, arrived at {@code nowNs}, rejected if still queued after {@code timeoutNs} (0: never). */
    void add(int slot, long nowNs, long timeoutNs) {
        if (count == queue.length) {
            throw new IllegalStateException("queue holds every slot already");
        }
        queue[(head + count) % queue.length] = slot;
        count++;
        enqueuedNs[slot] = nowNs;
        long deadline = timeoutNs > 0 ? nowNs + timeoutNs : Long.MAX_VALUE;
        deadlineNs[slot] = deadline;
        if (deadline < nextDeadlineNs) {
            nextDeadlineNs = deadline;
        }
    }

    /**
     * Removes every queued request whose deadline has passed at {@code nowNs}, in queue order, into {@code out}
     * (room for {@link #size()}); returns how many. The others keep their order.
     */
    int expire(long nowNs, int[] out) {
        int n = 0;
        int kept = 0;
        long next = Long.MAX_VALUE;
        for (int i = 0; i < count; i++) {
            int slot = queue[(head + i) % queue.length];
            if (deadlineNs[slot] <= nowNs) {
                out[n++] = slot;
            } else {
                queue[(head + kept) % queue.length] = slot;
                kept++;
                next = Math.min(next, deadlineNs[slot]);
            }
        }
        count = kept;
        nextDeadlineNs = next;
        return n;
    }

    /**
     * The size of the batch to run now (then {@link #take} it; {@link #reason()} says why), or 0 to wait
     * ({@link #waitNs()}: until the oldest request's queue delay expires; {@link Long#MAX_VALUE} when empty).
     */
    int decide(long nowNs) {
        reason = CloseReason.NONE;
        if (count == 0) {
            waitNs = Long.MAX_VALUE;
            return 0;
        }
        int best = 0;
        boolean sendNow = false;
        int pending = 0;
        for (int i = 0; i < count; i++) {
            if (pending > 0) {
                if (pending + 1 > maxPreferred && best == 0) {
                    best = pending;
                }
                if (pending + 1 > maxBatchSize) {
                    sendNow = true;
                    break;
                }
            }
            pending++;
            if (preferred[pending]) {
                best = pending;
            }
        }
        long ageNs = nowNs - enqueuedNs[queue[head]];
        boolean delayExceeded = maxQueueDelayNs != 0 && ageNs >= maxQueueDelayNs;
        if (best != 0 && !delayExceeded) {
            reason = preferred[best] ? CloseReason.PREFERRED_SIZE : CloseReason.MAX_SIZE;
            return best;
        }
        if (sendNow || pending >= maxPreferred) {
            // Past the largest preferred size only once the delay is exceeded (else a best size went above).
            reason = sendNow ? CloseReason.MAX_SIZE : delayExceeded ? CloseReason.DELAY
                : hasPreferred && preferred[pending] ? CloseReason.PREFERRED_SIZE : CloseReason.MAX_SIZE;
            return pending;
        }
        if (delayExceeded) {
            reason = CloseReason.DELAY;
            return pending;
        }
        if (maxQueueDelayNs == 0) {
            reason = CloseReason.NO_DELAY;
            return pending;
        }
        waitNs = maxQueueDelayNs - ageNs;
        return 0;
    }

    /** Removes the {@code n} oldest requests into {@code out}. */
    void take(int n, int[] out) {
        for (int i = 0; i < n; i++) {
            out[i] = queue[head];
            head = (head + 1) % queue.length;
        }
        count -= n;
        if (count == 0) {
            head = 0;
            nextDeadlineNs = Long.MAX_VALUE;
        }
    }

    /** Removes every queued request into {@code out}; returns how many. */
    int drain(int[] out) {
        int n = count;
        take(n, out);
        return n;
    }
}
