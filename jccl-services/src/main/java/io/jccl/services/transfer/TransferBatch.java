package io.jccl.services.transfer;


import io.jccl.common.idle.BackoffIdleStrategy;
import io.jccl.common.idle.IdleStrategy;

import java.util.Objects;
import java.util.concurrent.CompletableFuture;

/**
 * A batch of transfers (Mooncake's batch id with its {@code TransferRequest}s, NIXL's transfer request): add READs
 * and WRITEs between a {@link LocalSegment} and {@link RemoteSegment}s, optionally a notification for the target,
 * {@link #submit()}, then {@link #poll()}, {@link #await()} or {@link #future()}. Each transfer has its own
 * {@linkplain #status(int) status} and {@linkplain #error(int) error}: a bad range, an unregistered segment or a peer
 * that is gone fails that transfer only. Reusable: {@link #clear()} after it completed; its arrays are allocated once,
 * so a reused batch allocates nothing per transfer. Not thread-safe: one thread fills and submits a batch (any
 * thread may poll it).
 */
public final class TransferBatch implements AutoCloseable {
    static final byte EMPTY = 0;
    static final byte PENDING = 1;
    static final byte SUCCEEDED = 2;
    static final byte FAILED = 3;
    static final int NOTIFY_NONE = 0;
    static final int NOTIFY_WANTED = 1;
    static final int NOTIFY_POSTED = 2;
    static final int NOTIFY_SENT = 3;
    static final int NOTIFY_FAILED = 4;

    private final TransferEngine engine;
    final int slot;
    private final int capacity;
    int count;
    final LocalSegment[] local;
    final long[] localOffset;
    final RemoteSegment[] remote;
    final long[] remoteOffset;
    final long[] length;
    final boolean[] write;
    final byte[] status;
    final String[] errors;
    final int[] slicesLeft;
    /** Transfers not yet succeeded or failed. Guarded by the engine's lock once submitted. */
    int unresolved;
    /** Slices posted (or waiting for a retry) whose completion has not come back. */
    int inFlight;
    int cursor;
    /** Whether the batch is in the engine's queue of batches waiting for posting. */
    boolean queued;
    int cursorSlice;
    long deadlineNs;
    final byte[] notifyMessage = new byte[TransferEngine.NOTIFICATION_MAX_BYTES];
    int notifyLength;
    /** Whether the notification goes as a zero-length RDMA_WRITE_WITH_IMM carrying {@link #notifyImmediate}. */
    boolean notifyWithImmediate;
    int notifyImmediate;
    int notifyRank = -1;
    int notifyState = NOTIFY_NONE;
    private String notifyError;
    private boolean submitted;
    private volatile boolean done;
    boolean closed;
    private volatile CompletableFuture<TransferBatch> future;
    /** How a waiter idles when the engine uses several devices (no single blocking poll covers them). */
    final IdleStrategy idle = new BackoffIdleStrategy();

    TransferBatch(TransferEngine engine, int slot, int capacity) {
        this.engine = engine;
        this.slot = slot;
        this.capacity = capacity;
        local = new LocalSegment[capacity];
        localOffset = new long[capacity];
        remote = new RemoteSegment[capacity];
        remoteOffset = new long[capacity];
        length = new long[capacity];
        write = new boolean[capacity];
        status = new byte[capacity];
        errors = new String[capacity];
        slicesLeft = new int[capacity];
    }

    /**
     * Adds a WRITE of {@code length} bytes from {@code local} at {@code localOffset} to {@code remote} at
     * {@code remoteOffset}; returns its index.
     */
    public int write(LocalSegment local, long localOffset, RemoteSegment remote, long remoteOffset, long length) {
        return add(TransferOpcode.WRITE, local, localOffset, remote, remoteOffset, length);
    }

    /**
     * Adds a READ of {@code length} bytes from {@code remote} at {@code remoteOffset} into {@code local} at
     * {@code localOffset}; returns its index.
     */
    public int read(LocalSegment local, long localOffset, RemoteSegment remote, long remoteOffset, long length) {
        return add(TransferOpcode.READ, local, localOffset, remote, remoteOffset, length);
    }

    /**
     * Adds a transfer and returns its index. A bad range (negative, zero length, past either segment's end) or an
     * unregistered local segment does not throw: the transfer is marked {@link TransferStatus#FAILED} with the
     * reason, before anything is posted, and the batch's other transfers go ahead.
     *
     * @throws TransferException when the batch already holds its capacity (an oversized batch)
     * @throws IllegalStateException when the batch was submitted and not cleared
     */
    public int add(TransferOpcode opcode, LocalSegment local, long localOffset, RemoteSegment remote,
                   long remoteOffset, long length) {
        Objects.requireNonNull(opcode, "opcode");
        Objects.requireNonNull(local, "local segment");
        Objects.requireNonNull(remote, "remote segment");
        checkFillable();
        if (count == capacity) {
            throw new TransferException("batch is full: it holds at most " + capacity + " transfers (its capacity; "
                + "JCCL_TRANSFER_BATCH_MAX limits capacities to " + engine.settings().maxBatchTransfers() + ")");
        }
        int t = count++;
        this.local[t] = local;
        this.localOffset[t] = localOffset;
        this.remote[t] = remote;
        this.remoteOffset[t] = remoteOffset;
        this.length[t] = length;
        this.write[t] = opcode == TransferOpcode.WRITE;
        this.errors[t] = null;
        this.status[t] = PENDING;
        String bad = check(local, localOffset, remote, remoteOffset, length);
        if (bad != null) {
            status[t] = FAILED;
            errors[t] = "transfer " + t + " (" + opcode + " " + length + " B): " + bad;
        }
        return t;
    }

    private String check(LocalSegment local, long localOffset, RemoteSegment remote, long remoteOffset,
                         long length) {
        if (local.engine != engine || remote.engine != engine) {
            return (local.engine != engine ? local : remote) + " belongs to another transfer engine (its keys and "
                + "links are that engine's)";
        }
        if (length < 1) {
            return "length " + length + " must be at least 1";
        }
        if (!local.isRegistered()) {
            return "local segment '" + local.name() + "' was unregistered";
        }
        if (localOffset < 0 || localOffset > local.length() - length) {
            return "local range [" + localOffset + ", " + localOffset + "+" + length + ") is outside " + local;
        }
        if (remoteOffset < 0 || remoteOffset > remote.length() - length) {
            return "remote range [" + remoteOffset + ", " + remoteOffset + "+" + length + ") is outside " + remote;
        }
        if (remote.self != null && !remote.self.isRegistered()) {
            return remote + " was unregistered";
        }
        long slice = engine.sliceBytesTo(remote.rank());
        if ((length - 1) / slice + 1 >= (1 << 22)) {
            return "length " + length + " needs more than 2^22 slices of " + slice + " B";
        }
        return null;
    }

    /**
     * Attaches a notification of at most {@link TransferEngine#NOTIFICATION_MAX_BYTES} bytes: delivered to the
     * target (every transfer of the batch must then name segments of one rank) after every transfer of the batch has
     * landed there; not sent when a transfer failed.
     */
    public TransferBatch notify(byte[] message) {
        checkFillable();
        if (message.length > TransferEngine.NOTIFICATION_MAX_BYTES) {
            throw new IllegalArgumentException("notification of " + message.length + " B exceeds "
                + TransferEngine.NOTIFICATION_MAX_BYTES + " B");
        }
        System.arraycopy(message, 0, notifyMessage, 0, message.length);
        notifyLength = message.length;
        notifyWithImmediate = false;
        notifyState = NOTIFY_WANTED;
        return this;
    }

    /**
     * Attaches a notification that travels as immediate data: a zero-length {@code RDMA_WRITE_WITH_IMM} to the
     * first transfer's segment, posted (as {@link #notify(byte[])}'s SEND is) once every transfer of the batch
     * completed, so it arrives after the data. The target's {@link Notification} carries the four bytes big-endian
     * ({@link Notification#immediateData()}). Same rules as {@link #notify(byte[])}: one target rank, not sent when
     * a transfer failed. Why a second kind: a reused batch then allocates and copies nothing for its notification,
     * and the parameter server's pushes are WRITE + WRITE_WITH_IMM as on an RDMA NIC.
     */
    public TransferBatch notifyImmediate(int immediateData) {
        checkFillable();
        notifyImmediate = immediateData;
        notifyWithImmediate = true;
        for (int i = 0; i < Integer.BYTES; i++) {
            notifyMessage[i] = (byte) (immediateData >>> (24 - 8 * i));
        }
        notifyLength = Integer.BYTES;
        notifyState = NOTIFY_WANTED;
        return this;
    }

    private void checkFillable() {
        if (closed) {
            throw new IllegalStateException("batch is closed");
        }
        if (submitted) {
            throw new IllegalStateException("batch was submitted: clear() it once it completed to reuse it");
        }
    }

    /**
     * Posts the batch (what the queue pairs have no room for now is posted as earlier slices complete). Transfers
     * that failed their checks stay failed; the deadline is the job's timeout (JCCL_TIMEOUT) from now.
     *
     * @throws IllegalArgumentException when a notification is attached and the transfers name several ranks
     */
    public TransferBatch submit() {
        checkFillable();
        if (notifyState == NOTIFY_WANTED) {
            if (count == 0) {
                throw new IllegalArgumentException("a notification needs at least one transfer (its target)");
            }
            notifyRank = remote[0].rank();
            for (int t = 1; t < count; t++) {
                if (remote[t].rank() != notifyRank) {
                    throw new IllegalArgumentException("a batch with a notification must target one rank: transfer "
                        + t + " names rank " + remote[t].rank() + ", transfer 0 rank " + notifyRank);
                }
            }
        }
        unresolved = 0;
        for (int t = 0; t < count; t++) {
            if (status[t] == PENDING) {
                unresolved++;
                slicesLeft[t] = sliceCount(t);
            }
        }
        cursor = 0;
        cursorSlice = 0;
        submitted = true;
        done = false;
        engine.submit(this);
        return this;
    }

    /** Slices of transfer {@code t} (one for a copy within this rank). */
    int sliceCount(int t) {
        long slice = engine.sliceBytesTo(remote[t].rank());
        return (int) ((length[t] - 1) / slice + 1);
    }

    /** {@code n} slices of transfer {@code t} landed. Under the engine's lock. */
    void sliceDone(int t, int n) {
        if (status[t] != PENDING) {
            return;
        }
        slicesLeft[t] -= n;
        if (slicesLeft[t] <= 0) {
            status[t] = SUCCEEDED;
            unresolved--;
            if (unresolved == 0) {
                transfersResolved();
            }
        }
    }

    /** Transfer {@code t} failed. Under the engine's lock. */
    void fail(int t, String why) {
        if (status[t] != PENDING) {
            return;
        }
        status[t] = FAILED;
        errors[t] = "transfer " + t + " (" + (write[t] ? "WRITE " : "READ ") + length[t] + " B, " + remote[t] + "): "
            + why;
        unresolved--;
        if (unresolved == 0 && submitted) {
            transfersResolved();
        }
    }

    /** Every transfer succeeded or failed: the notification goes out now, or the batch is done. */
    void transfersResolved() {
        if (notifyState == NOTIFY_WANTED) {
            engine.notifyReady(this);
        } else {
            finish();
        }
    }

    /** The notification was delivered ({@code why} null) or not. Under the engine's lock. */
    void notifyDone(String why) {
        if (notifyState != NOTIFY_WANTED && notifyState != NOTIFY_POSTED) {
            return;
        }
        notifyState = why == null ? NOTIFY_SENT : NOTIFY_FAILED;
        notifyError = why;
        finish();
    }

    private void finish() {
        if (done || unresolved > 0 || notifyState == NOTIFY_WANTED || notifyState == NOTIFY_POSTED) {
            return;
        }
        done = true;
        engine.resolved(this);
        CompletableFuture<TransferBatch> f = future;
        if (f != null) {
            f.complete(this);
        }
    }

    /** Drives progress once and returns whether every transfer (and the notification) completed. */
    public boolean poll() {
        if (!done && submitted) {
            engine.progress();
        }
        return done;
    }

    /** Whether every transfer (and the notification) completed, without driving progress. */
    public boolean isDone() {
        return done;
    }

    /**
     * Waits until the batch completed; returns whether every transfer succeeded. Never waits past the batch's
     * deadline (JCCL_TIMEOUT from {@link #submit()}): transfers still pending then fail with the reason.
     */
    public boolean await() {
        if (!submitted) {
            throw new IllegalStateException("batch was not submitted");
        }
        engine.awaiting.incrementAndGet();
        try {
            while (!done) {
                // 1 ms at most inside the provider's poll: the engine's lock is held meanwhile.
                if (engine.progress() == 0 && !done) {
                    engine.awaitCompletions(this, 1_000_000L);
                }
            }
        } finally {
            engine.awaiting.decrementAndGet();
        }
        return succeeded();
    }

    /**
     * Waits until the batch completed or {@code timeoutNs} passed; returns whether it completed.
     */
    public boolean await(long timeoutNs) {
        if (!submitted) {
            throw new IllegalStateException("batch was not submitted");
        }
        long deadline = System.nanoTime() + timeoutNs;
        engine.awaiting.incrementAndGet();
        try {
            while (!done) {
                int work = engine.progress();
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    return done;
                }
                if (work == 0 && !done) {
                    engine.awaitCompletions(this, Math.min(left, 1_000_000L));
                }
            }
        } finally {
            engine.awaiting.decrementAndGet();
        }
        return true;
    }

    /**
     * A future completed with this batch when it is done (whatever the transfers' statuses: read them from the
     * batch); the engine's agent drives it, nobody has to poll.
     */
    public synchronized CompletableFuture<TransferBatch> future() {
        if (future == null || future.isDone() && !done) {
            future = new CompletableFuture<>();
        }
        if (done) {
            future.complete(this);
        }
        return future;
    }

    /** Number of transfers added. */
    public int size() {
        return count;
    }

    /** How many transfers the batch holds at most. */
    public int capacity() {
        return capacity;
    }

    /** Status of transfer {@code index}. */
    public TransferStatus status(int index) {
        checkIndex(index);
        return switch (status[index]) {
            case PENDING -> TransferStatus.PENDING;
            case SUCCEEDED -> TransferStatus.SUCCEEDED;
            default -> TransferStatus.FAILED;
        };
    }

    /** Why transfer {@code index} failed, or null. */
    public String error(int index) {
        checkIndex(index);
        return errors[index];
    }

    private void checkIndex(int index) {
        if (index < 0 || index >= count) {
            throw new IndexOutOfBoundsException("transfer " + index + " outside 0.." + (count - 1));
        }
    }

    /** Number of transfers that failed so far. */
    public int failedCount() {
        int n = 0;
        for (int t = 0; t < count; t++) {
            n += status[t] == FAILED ? 1 : 0;
        }
        return n;
    }

    /** Whether the batch is done, every transfer succeeded and the notification (if any) was delivered. */
    public boolean succeeded() {
        return done && failedCount() == 0 && notifyState != NOTIFY_FAILED;
    }

    /** Why the notification was not delivered, or null. */
    public String notificationError() {
        return notifyError;
    }

    /**
     * Empties a completed batch for reuse.
     *
     * @throws IllegalStateException while it is in flight, or while slices of a transfer that failed at its deadline
     *     are still out (use a new batch then)
     */
    public void clear() {
        if (submitted && !done) {
            throw new IllegalStateException("batch is still in flight");
        }
        int out = engine.inFlight(this);
        if (out > 0) {
            throw new IllegalStateException(out + " slices of this batch are still in flight (their transfers "
                + "failed at the deadline); use a new batch");
        }
        for (int t = 0; t < count; t++) {
            local[t] = null;
            remote[t] = null;
            errors[t] = null;
            status[t] = EMPTY;
        }
        count = 0;
        notifyState = NOTIFY_NONE;
        notifyLength = 0;
        notifyWithImmediate = false;
        notifyRank = -1;
        notifyError = null;
        submitted = false;
        done = false;
        synchronized (this) {
            future = null;
        }
    }

    /** Frees the batch (Mooncake's {@code freeBatchID}); its slot is reused once nothing of it is in flight. */
    @Override
    public void close() {
        engine.release(this);
    }

    @Override
    public String toString() {
        StringBuilder sb = new StringBuilder("batch of ").append(count).append(" transfers");
        if (done) {
            sb.append(", done, ").append(failedCount()).append(" failed");
        }
        for (int t = 0; t < count; t++) {
            if (errors[t] != null) {
                sb.append("\n  ").append(errors[t]);
            }
        }
        if (notifyError != null) {
            sb.append("\n  notification: ").append(notifyError);
        }
        return sb.toString();
    }
}
