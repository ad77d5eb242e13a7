package io.jccl.services.checkpoint;

import io.jccl.services.transfer.LocalSegment;
import io.jccl.services.transfer.RemoteSegment;
import io.jccl.services.transfer.TransferBatch;
import io.jccl.services.transfer.TransferEngine;
import io.jccl.services.transfer.TransferException;

import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.time.Duration;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.locks.LockSupport;
import java.util.zip.CRC32C;

/**
 * A training rank's side of checkpoint staging (see {@link CheckpointAgent} for the protocol): one shard of a
 * {@link ShardLayout}, staged with {@link #stage}, made durable in the background, restored with {@link #restore}.
 *
 * <pre>{@code
 * ShardLayout layout = new ShardLayout(params * 4L, 4, ranks);          // floats, split evenly
 * try (CheckpointClient ckpt = CheckpointClient.open(engine, "default", layout, rank, Duration.ofSeconds(60))) {
 *     LocalSegment state = engine.registerSegment("state/" + rank, layout.length(rank));
 *     long step = ckpt.restore(state, 0);                               // -1: nothing saved yet
 *     StageHandle staging = null;
 *     for (…) {
 *         forwardBackward(state);                                       // reads the state: staging runs beside it
 *         if (staging != null) { staging.awaitStaged(); staging = null; } // the stall, before the state changes
 *         optimizerStep(state);                                         // modifies the state
 *         if (step % 100 == 0) staging = ckpt.stageAsync(step, state, 0); // returns at once
 *     }
 *     ckpt.awaitDurable(step, Duration.ofMinutes(5));
 * }
 * }</pre>
 *
 * {@link #stageAsync} is CheckFreq's pipelined snapshot (Mohan et al., FAST'21: the snapshot runs during the next
 * iteration's forward and backward passes, only the weight update waits for it) and torch DCP's {@code async_save}
 * (the training loop stalls only for staging): the copy into the agent's staging memory and the rank's CRC32C run on
 * the client's staging thread. {@link #stage} is the blocking form (the copy on the calling thread).
 *
 * <p>Not thread-safe: one thread of the rank uses it (the staging thread is the client's own; every other call first
 * waits for a staging in flight). Every wait is bounded by the timeout given at {@link #open}; an agent that died
 * fails the call with the agent's rank named, never a hang.
 */
public final class CheckpointClient implements AutoCloseable {
    private static final int SCRATCH_BYTES = ControlBlock.HEADER_BYTES + ControlBlock.SLOT_BYTES;
    /** Piece of a shard one staging WRITE moves while the previous piece's CRC32C is computed. */
    private static final long PIECE_BYTES = 4 << 20;

    private final TransferEngine engine;
    private final String name;
    private final ShardLayout layout;
    private final int shard;
    private final long timeoutNs;
    private final RemoteSegment staging;
    private final RemoteSegment control;
    private final LocalSegment scratch;
    private final TransferBatch batch;
    private final ByteBuffer header = ByteBuffer.allocate(ControlBlock.HEADER_BYTES).order(ByteOrder.LITTLE_ENDIAN);
    private final ByteBuffer slot = ByteBuffer.allocate(ControlBlock.SLOT_BYTES).order(ByteOrder.LITTLE_ENDIAN);
    private long nextRequest;
    private long lastStaged = -1;
    /** Request of the staged step whose digest was not READ back yet, or -1. */
    private long pendingRequest = -1;
    private volatile long lastReleaseWaitNs;
    private int pendingCrc;
    private final TransferBatch batch2;
    private final CRC32C digest = new CRC32C();
    /** The staging in flight ({@link #stageAsync}), or null; owned by the caller's thread. */
    private StageHandle inFlight;
    /** The staging thread, started by the first {@link #stageAsync}. */
    private ExecutorService stager;
    /** Tests: runs on the staging thread after a piece was posted, before its checksum (a caller's bug injected). */
    private volatile Runnable pieceCopiedHook;

    private CheckpointClient(TransferEngine engine, String name, ShardLayout layout, int shard, Duration timeout) {
        this.engine = engine;
        this.name = name;
        this.layout = layout;
        this.shard = shard;
        this.timeoutNs = timeout.toNanos();
        this.staging = engine.openSegment(CheckpointSettings.stagingSegment(name), timeout);
        this.control = engine.openSegment(CheckpointSettings.controlSegment(name), timeout);
        if (staging.rank() == engine.rank()) {
            throw new IllegalArgumentException("the checkpoint agent '" + name + "' runs on this rank (" + engine.rank()
                + "): it needs a rank of its own");
        }
        long slots = (control.length() - ControlBlock.HEADER_BYTES) / ControlBlock.SLOT_BYTES;
        if (shard >= slots) {
            throw new IllegalArgumentException("shard " + shard + " but the agent '" + name + "' serves " + slots
                + " shards (JCCL_CHECKPOINT_MAX_SHARDS)");
        }
        this.scratch = engine.registerSegment("ckpt/" + name + "/scratch/" + engine.rank() + "/"
            + Long.toHexString(ThreadLocalRandom.current().nextLong()), SCRATCH_BYTES);
        this.batch = engine.newBatch(1);
        this.batch2 = engine.newBatch(1);
        // Requests of an earlier client of this slot must never match ours.
        this.nextRequest = ThreadLocalRandom.current().nextLong() & Long.MAX_VALUE;
    }

    /**
     * Opens checkpoint set {@code name} (waiting up to {@code timeout} for its agent) as shard {@code shard} of
     * {@code layout}.
     *
     * @throws IllegalArgumentException when the shard is outside the layout, or the agent runs on this rank
     * @throws TransferException when no agent of that name is registered in time or it cannot be reached
     */
    public static CheckpointClient open(TransferEngine engine, String name, ShardLayout layout, int shard,
                                        Duration timeout) {
        if (shard < 0 || shard >= layout.shards()) {
            throw new IllegalArgumentException("shard " + shard + " outside the layout's 0.." + (layout.shards() - 1));
        }
        return new CheckpointClient(engine, name, layout, shard, timeout);
    }

    /** This rank's layout. */
    public ShardLayout layout() {
        return layout;
    }

    /** This rank's shard. */
    public int shard() {
        return shard;
    }

    /**
     * How long the last {@link #stage} (or the last {@link #stageAsync}, once staged) waited for the agent to release
     * the previous step: the back-pressure part of its stall (checkpoints coming faster than the agent persists them),
     * a READ's time when it did not wait.
     */
    public long lastReleaseWaitNs() {
        return lastReleaseWaitNs;
    }

    /** The agent's rank. */
    public int agentRank() {
        return staging.rank();
    }

    /**
     * Stages this rank's shard for {@code step} on the calling thread: WRITEs {@code layout().length(shard())} bytes
     * of {@code source} from {@code sourceOffset} into the agent's staging memory while computing their CRC32C, then
     * tells the agent the step and that CRC32C. Returns as soon as the bytes are in staging: training may modify
     * {@code source} at once (this is the whole stall; {@link #stageAsync} takes it off the training loop's path).
     * The agent computes its own CRC32C of what landed and persists the step only if every shard's matches; the rank
     * READs the agent's digest back and compares it in {@link #verify()}, which the next {@code stage} and
     * {@link #awaitDurable} call first. Waits first until the agent released this rank's previous step (persisted
     * or failed), and for a {@link #stageAsync} in flight.
     *
     * @return the shard's CRC32C
     * @throws CheckpointException when the checkpoint is larger than the agent's staging memory (oversized), the
     *     previous step's verification failed, the agent refused the step, the agent is unreachable, or the timeout
     *     passed
     * @throws IllegalArgumentException when {@code step} is not newer than the last staged step, or the range is
     *     outside {@code source}
     */
    public int stage(long step, LocalSegment source, long sourceOffset) {
        joinInFlight();
        checkStage(step, source, sourceOffset);
        return stageNow(step, source, sourceOffset, null);
    }

    /**
     * Stages this rank's shard for {@code step} on the client's staging thread and returns at once: the training
     * loop goes on reading {@code source} (the next iteration's forward and backward passes) while the staging thread
     * does what {@link #stage} does (verifies the previous step, waits for the agent to release it, WRITEs the shard
     * into staging beside its CRC32C, notifies the agent). The loop must call {@link StageHandle#awaitStaged()} (or
     * {@link #awaitStaged()}) <b>before it modifies {@code source}</b>: that wait is the stall. Modifying it earlier
     * is the caller's bug (the checkpoint may mix old and new bytes; where a change overlaps a piece's copy and
     * checksum, the agent's CRC32C differs and the step is never persisted). Staging holds one checkpoint: a
     * {@code stageAsync} while one is in flight first waits for it. Every other call of this client first waits for
     * the staging in flight too, and throws its failure if nobody did.
     *
     * @return the staging in flight
     * @throws CheckpointException when the checkpoint is larger than the agent's staging memory, or the staging in
     *     flight before failed and nobody was told; later failures come from {@link StageHandle#awaitStaged()}
     * @throws IllegalArgumentException when {@code step} is not newer than the last staged step, or the range is
     *     outside {@code source}
     */
    public StageHandle stageAsync(long step, LocalSegment source, long sourceOffset) {
        joinInFlight();
        checkStage(step, source, sourceOffset);
        if (stager == null) {
            stager = Executors.newSingleThreadExecutor(Thread.ofPlatform().daemon()
                .name("jccl-ckpt-stage-" + name + "-" + shard).factory());
        }
        StageHandle handle = new StageHandle(step);
        stager.execute(() -> {
            try {
                handle.complete(stageNow(step, source, sourceOffset, handle));
            } catch (Throwable t) {
                handle.fail(t);
            }
        });
        inFlight = handle;
        return handle;
    }

    /** {@link #stageAsync(long, LocalSegment, long)} of the whole segment from offset 0. */
    public StageHandle stageAsync(long step, LocalSegment source) {
        return stageAsync(step, source, 0);
    }

    /**
     * Waits for the {@link #stageAsync} in flight, if any (its {@link StageHandle#awaitStaged()}).
     *
     * @return the staged shard's CRC32C, or 0 when nothing was in flight
     * @throws CheckpointException what {@link StageHandle#awaitStaged()} throws
     */
    public int awaitStaged() {
        StageHandle h = inFlight;
        if (h == null) {
            return 0;
        }
        inFlight = null;
        return h.awaitStaged();
    }

    /** Waits for a staging in flight; throws its failure when the caller was not told yet. */
    private void joinInFlight() {
        StageHandle h = inFlight;
        if (h == null) {
            return;
        }
        inFlight = null;
        if (h.awaitQuietly()) {
            h.awaitStaged(); // throws the failure nobody saw
        }
    }

    private void checkStage(long step, LocalSegment source, long sourceOffset) {
        long length = layout.length(shard);
        if (layout.totalBytes() > staging.length()) {
            throw new CheckpointException("step " + step + ", shard " + shard + ": checkpoint of "
                + layout.totalBytes() + " B exceeds the agent's staging memory of " + staging.length()
                + " B (JCCL_CHECKPOINT_STAGING_BYTES of agent '" + name + "', rank " + staging.rank() + ")");
        }
        if (sourceOffset < 0 || sourceOffset + length > source.length()) {
            throw new IllegalArgumentException("shard " + shard + " is " + length + " B: [" + sourceOffset + ", "
                + (sourceOffset + length) + ") is outside segment '" + source.name() + "' of " + source.length()
                + " B");
        }
        if (step < 0 || step <= lastStaged) {
            throw new IllegalArgumentException("step " + step + " is not newer than the last staged step "
                + lastStaged);
        }
    }

    /** What {@link #stage} does after the checks, on the calling or the staging thread. */
    private int stageNow(long step, LocalSegment source, long sourceOffset, StageHandle handle) {
        long length = layout.length(shard);
        verifyNow();
        long deadlineNs = System.nanoTime() + timeoutNs;
        long waitStartNs = System.nanoTime();
        if (lastStaged >= 0) {
            awaitHeader(deadlineNs, h -> h.getLong(ControlBlock.H_RELEASED) >= lastStaged,
                "staging to be released by step " + lastStaged);
        }
        lastReleaseWaitNs = System.nanoTime() - waitStartNs;
        if (handle != null) {
            handle.releaseWaitNs(lastReleaseWaitNs);
        }
        int crc = writeAndDigest(source, sourceOffset, length, "step " + step + ", shard " + shard);
        long request = nextRequest++;
        batch.clear();
        batch.read(scratch, 0, control, 0, 8); // carries the notification: it leaves after the WRITE completed
        batch.notify(ControlBlock.stage(request, step, shard, layout, crc));
        batch.submit();
        awaitBatch("step " + step + ", shard " + shard + ": notifying the agent");
        lastStaged = step;
        pendingRequest = request;
        pendingCrc = crc;
        return crc;
    }

    /**
     * WRITEs the shard into staging in pieces, two in flight, computing the CRC32C of each piece while it is in
     * flight: where the provider moves the bytes in the background (tcp0) the checksum overlaps the wire; where the
     * poster copies them (shm0) the checksum reads a piece the copy just brought into the cache. One pass, no thread
     * hand-over (which costs milliseconds on an oversubscribed host).
     */
    private int writeAndDigest(LocalSegment source, long sourceOffset, long length, String what) {
        digest.reset();
        TransferBatch previous = null;
        try {
            for (long pos = 0; pos < length; pos += PIECE_BYTES) {
                long n = Math.min(PIECE_BYTES, length - pos);
                TransferBatch current = previous == batch ? batch2 : batch;
                current.clear();
                current.write(source, sourceOffset + pos, staging, layout.offset(shard) + pos, n);
                current.submit();
                Runnable hook = pieceCopiedHook;
                if (hook != null) {
                    hook.run();
                }
                digest.update(source.memory().asSlice(sourceOffset + pos, n).asByteBuffer());
                if (previous != null) {
                    awaitBatch(previous, what + ": staging WRITE");
                }
                previous = current;
            }
            if (previous != null) {
                awaitBatch(previous, what + ": staging WRITE");
            }
        } catch (RuntimeException e) {
            // Let the other piece finish or fail (bounded by the engine's deadline) so both batches can be reused.
            for (TransferBatch b : new TransferBatch[] {batch, batch2}) {
                try {
                    if (!b.isDone()) {
                        b.await();
                    }
                } catch (IllegalStateException notSubmitted) {
                    // nothing in flight
                }
            }
            throw e;
        }
        return (int) digest.getValue();
    }

    /**
     * READs back the agent's CRC32C of the last staged shard (waiting until it computed it) and compares it with the
     * rank's; returns at once when there is nothing to verify.
     *
     * @throws CheckpointException when they differ (the agent then does not persist the step), the agent refused the
     *     step, is unreachable, or the timeout passed
     */
    public void verify() {
        joinInFlight();
        verifyNow();
    }

    private void verifyNow() {
        if (pendingRequest < 0) {
            return;
        }
        long request = pendingRequest;
        pendingRequest = -1;
        String what = "step " + lastStaged + ", shard " + shard;
        ByteBuffer reply = awaitReply(request, System.nanoTime() + timeoutNs, what);
        int theirs = (int) reply.getLong(ControlBlock.S_CRC);
        if (theirs != pendingCrc) {
            throw new CheckpointException(String.format("%s: the agent's CRC32C %08x of the staged shard differs from "
                + "the rank's %08x", what, theirs, pendingCrc));
        }
    }

    /** {@link #stage(long, LocalSegment, long)} of the whole segment from offset 0. */
    public int stage(long step, LocalSegment source) {
        return stage(step, source, 0);
    }

    /** The newest durable step the agent published, or -1 (one READ of its header). */
    public long durableStep() {
        joinInFlight();
        return readHeader(System.nanoTime() + timeoutNs).getLong(ControlBlock.H_DURABLE);
    }

    /**
     * Waits until {@code step} is durable on disk (and {@code latest} names it or a newer step).
     *
     * @throws CheckpointException with the agent's error when persisting that step failed (a full disk: the previous
     *     checkpoint stays), when this rank's shard of it failed {@link #verify()}, or when it is not durable within
     *     {@code timeout}
     */
    public void awaitDurable(long step, Duration timeout) {
        joinInFlight();
        if (step >= lastStaged) {
            verifyNow();
        }
        long deadlineNs = System.nanoTime() + Math.min(timeout.toNanos(), Long.MAX_VALUE / 4);
        ByteBuffer h = awaitHeader(deadlineNs, b -> b.getLong(ControlBlock.H_DURABLE) >= step
            || b.getLong(ControlBlock.H_FAILED) >= step, "step " + step + " to be durable");
        if (h.getLong(ControlBlock.H_DURABLE) < step) {
            throw new CheckpointException(ControlBlock.text(h, ControlBlock.H_TEXT));
        }
    }

    /**
     * Restores this rank's shard of the newest durable checkpoint into {@code dst} at {@code dstOffset}: READs
     * {@code layout().length(shard())} bytes from the agent (which loads the checkpoint from disk first when its
     * staging does not hold it) and checks them against the agent's CRC32C. The checkpoint may have been written by
     * another number of ranks: only the total size and element size must match.
     *
     * @return the restored step, or -1 when no checkpoint is durable (dst untouched)
     * @throws CheckpointException when a shard file is corrupt (naming it), the sizes disagree, the agent is
     *     unreachable, or the timeout passed
     */
    public long restore(LocalSegment dst, long dstOffset) {
        joinInFlight();
        long length = layout.length(shard);
        if (dstOffset < 0 || dstOffset + length > dst.length()) {
            throw new IllegalArgumentException("shard " + shard + " is " + length + " B: [" + dstOffset + ", "
                + (dstOffset + length) + ") is outside segment '" + dst.name() + "' of " + dst.length() + " B");
        }
        long deadlineNs = System.nanoTime() + timeoutNs;
        long request = nextRequest++;
        batch.clear();
        batch.read(scratch, 0, control, 0, 8);
        batch.notify(ControlBlock.restore(request, shard, layout));
        batch.submit();
        awaitBatch("restore of shard " + shard);
        ByteBuffer reply = awaitReply(request, deadlineNs, "restore of shard " + shard);
        if (reply.getInt(ControlBlock.S_STATUS) == ControlBlock.NONE) {
            return -1; // nothing durable yet
        }
        long step = reply.getLong(ControlBlock.S_STEP);
        int theirs = (int) reply.getLong(ControlBlock.S_CRC);
        if (length > 0) {
            batch.clear();
            batch.read(dst, dstOffset, staging, layout.offset(shard), length);
            batch.submit();
            awaitBatch("restore of shard " + shard + ": READ");
        }
        int mine = length > 0 ? CheckpointAgent.crc32c(dst.memory(), dstOffset, length) : 0;
        if (mine != theirs) {
            throw new CheckpointException(String.format("restore of step %d, shard %d: CRC32C %08x of what was READ "
                + "differs from the agent's %08x (was a checkpoint staged meanwhile?)", step, shard, mine, theirs));
        }
        return step;
    }

    // ------------------------------------------------------------------------------------------ waiting

    private void awaitBatch(String what) {
        awaitBatch(batch, what);
    }

    private void awaitBatch(TransferBatch b, String what) {
        b.await();
        if (!b.succeeded()) {
            String why = b.error(0) != null ? b.error(0) : b.notificationError();
            throw new CheckpointException(what + " to checkpoint agent '" + name + "' (rank " + staging.rank()
                + ") failed: " + why);
        }
    }

    private ByteBuffer awaitReply(long request, long deadlineNs, String what) {
        int round = 0;
        while (true) {
            read(control, ControlBlock.slotOffset(shard), ControlBlock.HEADER_BYTES, slot, deadlineNs);
            if (ControlBlock.intact(slot) && slot.getLong(ControlBlock.S_REQUEST) == request) {
                if (slot.getInt(ControlBlock.S_STATUS) != ControlBlock.ERROR) {
                    return slot;
                }
                throw new CheckpointException(ControlBlock.text(slot, ControlBlock.S_TEXT));
            }
            checkDeadline(deadlineNs, what + ": no answer from the agent");
            pause(round++);
        }
    }

    private interface Condition {
        boolean test(ByteBuffer header);
    }

    private ByteBuffer awaitHeader(long deadlineNs, Condition condition, String what) {
        int round = 0;
        while (true) {
            ByteBuffer h = readHeader(deadlineNs);
            if (condition.test(h)) {
                return h;
            }
            checkDeadline(deadlineNs, "waiting for " + what);
            pause(round++);
        }
    }

    private ByteBuffer readHeader(long deadlineNs) {
        while (true) {
            read(control, 0, 0, header, deadlineNs);
            if (ControlBlock.intact(header)) {
                return header;
            }
            checkDeadline(deadlineNs, "reading the agent's header");
        }
    }

    /** READs {@code into.capacity()} bytes at {@code offset} of the control segment through the scratch segment. */
    private void read(RemoteSegment from, long offset, long scratchOffset, ByteBuffer into, long deadlineNs) {
        checkDeadline(deadlineNs, "reading the agent's control block");
        batch.clear();
        batch.read(scratch, scratchOffset, from, offset, into.capacity());
        batch.submit();
        awaitBatch("READ of the control block");
        MemorySegment.copy(scratch.memory(), scratchOffset, MemorySegment.ofBuffer(into), 0, into.capacity());
    }

    private void checkDeadline(long deadlineNs, String what) {
        if (System.nanoTime() - deadlineNs > 0) {
            throw new CheckpointException("checkpoint agent '" + name + "' (rank " + staging.rank() + "): " + what
                + ": timed out");
        }
    }

    /** Short spins first (shm answers in microseconds), then sleeps growing to 1 ms. */
    private static void pause(int round) {
        if (round < 50) {
            Thread.onSpinWait();
        } else {
            LockSupport.parkNanos(Math.min(1_000_000L, 10_000L << Math.min(7, (round - 50) / 8)));
        }
    }

    /** Tests: {@code hook} runs on the staging thread after each piece was posted (shm0: copied), before its checksum. */
    void onPieceCopied(Runnable hook) {
        pieceCopiedHook = hook;
    }

    /**
     * Waits for a staging in flight (without throwing its failure), stops the staging thread, frees the batches and
     * the scratch segment; the agent and its checkpoints are unaffected.
     */
    @Override
    public void close() {
        StageHandle h = inFlight;
        inFlight = null;
        if (h != null) {
            h.awaitQuietly();
        }
        if (stager != null) {
            stager.shutdown();
        }
        batch.close();
        batch2.close();
        scratch.close();
    }
}
