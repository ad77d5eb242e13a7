package io.jccl.services.kvcache;

import io.jccl.common.Log;
import io.jccl.services.transfer.LocalSegment;
import io.jccl.services.transfer.Notification;
import io.jccl.services.transfer.NotificationListener;
import io.jccl.services.transfer.RemoteSegment;
import io.jccl.services.transfer.TransferBatch;
import io.jccl.services.transfer.TransferEngine;
import io.jccl.services.transfer.TransferException;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.BitSet;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * The prefill side of a KV-cache hand-off: sends requests' blocks from a local {@link KvBlockPool} into a
 * {@link KvCacheReceiver}'s pool, one transfer-engine batch per request, and gets the blocks back when the receiver
 * releases the request.
 *
 * <p>The sender allocates the receiver's blocks itself, one-sided, from a mirror of the receiver's free blocks: a
 * receiver pool has one sender (its name is claimed in the job's store; a second sender fails to open). A request's
 * batch holds a WRITE per run of blocks consecutive on both sides (runs coalesced: a fresh pool gives one WRITE per
 * request), the WRITEs of the receiver-side block table (a linked list in the receiver's table area: entry of block b
 * = the request's next block, -1 at the end) and one notification, which the engine sends only after every WRITE
 * completed: the receiver sees a request whole or not at all. Blocks come back when the receiver's RETURNED message
 * arrives; with too few free blocks {@link #submit} waits up to the time given, then fails with the counts: it never
 * writes into a block the receiver holds.
 */
public final class KvCacheSender implements AutoCloseable {
    /**
     * How long a peer's failure is confirmed before a wait gives up: a message the peer sent before closing may be
     * in this engine's completion queue, not yet taken by the agent (measured: a closed mark seen before the last
     * RETURNED was handled).
     */
    static final long FAILURE_GRACE_NS = 1_000_000_000L;
    private final Log log = Log.get();
    private final TransferEngine engine;
    private final String name;
    private final int poolId;
    private final KvBlockPool source;
    private final RemoteSegment target;
    /** kv/NAME/sender: the receiver's header as READ at open ([0, 64)), then the staging of block-table entries. */
    private final LocalSegment control;
    private final int peer;
    private final int remoteBlocks;
    private final long remoteBlocksOffset;
    private final int blockBytes;
    private final int batchCapacity;
    private final ReentrantLock lock = new ReentrantLock();
    private final Condition returned = lock.newCondition();
    /** Mirror of the receiver's pool: blocks in flight to it or held by it. Guarded by the lock. */
    private final BitSet inUse;
    private int inUseCount;
    /** Requests in flight or held by the receiver → their blocks there. Guarded by the lock. */
    private final Map<Long, int[]> outstanding = new HashMap<>();
    private final ArrayDeque<TransferBatch> spare = new ArrayDeque<>();
    private final NotificationListener listener = this::onNotification;
    private volatile boolean closed;

    private KvCacheSender(TransferEngine engine, String name, KvBlockPool source, RemoteSegment target,
                          LocalSegment control, int remoteBlocks) {
        this.engine = engine;
        this.name = name;
        this.poolId = KvMessages.poolId(name);
        this.source = source;
        this.target = target;
        this.control = control;
        this.peer = target.rank();
        this.remoteBlocks = remoteBlocks;
        this.remoteBlocksOffset = KvBlockPool.blocksOffset(remoteBlocks);
        this.blockBytes = source.layout().blockBytes();
        this.batchCapacity = Math.min(2 * remoteBlocks, engine.settings().maxBatchTransfers());
        this.inUse = new BitSet(remoteBlocks);
    }

    /**
     * Opens the receiver named {@code name} (waiting up to {@code wait} for it to be created), claims it as its one
     * sender and checks that its layout is {@code source}'s.
     *
     * @throws KvCacheException when no receiver of that name appears in time, it already has a sender, or its layout
     *     differs
     */
    public static KvCacheSender open(TransferEngine engine, String name, KvBlockPool source, Duration wait) {
        KvCacheReceiver.checkName(name);
        RemoteSegment target;
        try {
            target = engine.openSegment(KvCacheReceiver.poolSegmentName(name), wait);
        } catch (TransferException e) {
            throw new KvCacheException("KV receiver '" + name + "' cannot be opened: " + e.getMessage(), e);
        }
        long bound = target.length() / source.layout().blockBytes() + 1;
        LocalSegment control;
        try {
            control = engine.registerSegment(senderSegmentName(name), KvBlockPool.HEADER_BYTES + 4 * bound);
        } catch (TransferException e) {
            throw new KvCacheException("KV receiver '" + name + "' already has a sender (" + e.getMessage() + "): one "
                + "sender per receiver pool; give each prefill instance a receiver of its own", e);
        }
        try (TransferBatch b = engine.newBatch(1)) {
            b.read(control, 0, target, 0, KvBlockPool.HEADER_BYTES);
            if (!b.submit().await()) {
                throw new KvCacheException("reading KV receiver '" + name + "''s header failed: " + b);
            }
            MemorySegment h = control.memory();
            if (h.get(ValueLayout.JAVA_INT, 0) != KvBlockPool.MAGIC) {
                throw new KvCacheException("segment '" + target.name() + "' of rank " + target.rank() + " is not a KV "
                    + "receiver's pool (no pool header)");
            }
            KvCacheLayout theirs = new KvCacheLayout(h.get(ValueLayout.JAVA_INT, 4), h.get(ValueLayout.JAVA_INT, 8),
                h.get(ValueLayout.JAVA_INT, 12), h.get(ValueLayout.JAVA_INT, 16), h.get(ValueLayout.JAVA_INT, 20));
            int blocks = h.get(ValueLayout.JAVA_INT, 24);
            if (!theirs.equals(source.layout())) {
                throw new KvCacheException("KV receiver '" + name + "' (rank " + target.rank() + ") has layout "
                    + theirs + ", this sender's pool " + source.layout() + ": both sides must use one layout");
            }
            if (blocks < 1 || blocks >= bound) {
                throw new KvCacheException("KV receiver '" + name + "' announces " + blocks + " blocks, its segment "
                    + "holds at most " + (bound - 1));
            }
            // Tell the receiver who its sender is (one-sided): it then knows whose failure to watch for.
            h.set(ValueLayout.JAVA_INT, KvBlockPool.SENDER_RANK_OFFSET, engine.rank());
            b.clear();
            b.write(control, KvBlockPool.SENDER_RANK_OFFSET, target, KvBlockPool.SENDER_RANK_OFFSET, 4);
            if (!b.submit().await()) {
                throw new KvCacheException("announcing this sender to KV receiver '" + name + "' failed: " + b);
            }
            KvCacheSender sender = new KvCacheSender(engine, name, source, target, control, blocks);
            engine.addNotificationListener(sender.listener);
            return sender;
        } catch (RuntimeException e) {
            control.close();
            throw e;
        }
    }

    static String senderSegmentName(String name) {
        return KvCacheReceiver.poolSegmentName(name) + "/sender";
    }

    /** The receiver's rank. */
    public int receiverRank() {
        return peer;
    }

    /** Blocks of the receiver's pool. */
    public int receiverBlockCount() {
        return remoteBlocks;
    }

    /** The receiver's blocks free as this sender knows it (neither in flight nor held by the receiver). */
    public int receiverFreeBlocks() {
        lock.lock();
        try {
            return remoteBlocks - inUseCount;
        } finally {
            lock.unlock();
        }
    }

    /** The local pool requests are sent from. */
    public KvBlockPool source() {
        return source;
    }

    /** {@link #submit} and {@link Send#await()}: returns once the receiver has the whole request. */
    public void send(long requestId, int[] blockTable, int blockCount, int tokens, Duration waitForBlocks) {
        submit(requestId, blockTable, blockCount, tokens, waitForBlocks).await();
    }

    /**
     * Starts sending request {@code requestId}: its {@code tokens} tokens in the source pool's blocks
     * {@code blockTable[0..blockCount)} go to as many blocks of the receiver, which gets one notification once all
     * landed. Waits up to {@code waitForBlocks} for enough receiver blocks to be free.
     *
     * @throws KvCacheException (nothing sent, no block taken) for a bad table (an index outside the source pool, more
     *     blocks than the receiver holds), a token count that does not fit, a request id in flight or held by the
     *     receiver, too few free receiver blocks within {@code waitForBlocks}, or a receiver that is gone
     */
    public Send submit(long requestId, int[] blockTable, int blockCount, int tokens, Duration waitForBlocks) {
        checkOpen();
        String what = "request " + requestId + " to KV receiver '" + name + "' (rank " + peer + ")";
        if (blockCount < 1 || blockCount > blockTable.length) {
            throw new KvCacheException(what + ": block count " + blockCount + " outside 1.." + blockTable.length
                + " (the table's length)");
        }
        if (blockCount > remoteBlocks) {
            throw new KvCacheException(what + ": " + blockCount + " blocks, the receiver's pool holds " + remoteBlocks);
        }
        int perBlock = source.layout().tokensPerBlock();
        if (tokens < 1 || tokens > (long) blockCount * perBlock) {
            throw new KvCacheException(what + ": " + tokens + " tokens do not fit " + blockCount + " blocks of "
                + perBlock + " tokens");
        }
        for (int i = 0; i < blockCount; i++) {
            if (blockTable[i] < 0 || blockTable[i] >= source.blockCount()) {
                throw new KvCacheException(what + ": block table entry " + i + " = " + blockTable[i] + " is outside 0.."
                    + (source.blockCount() - 1) + " of the source pool '" + source.segment().name() + "'");
            }
        }
        int[] dst = new int[blockCount];
        TransferBatch batch = reserve(requestId, dst, what, waitForBlocks.toNanos());
        int writes;
        try {
            writes = fill(batch, blockTable, dst, blockCount);
            byte[] message = new byte[KvMessages.LENGTH];
            KvMessages.encode(message, KvMessages.ARRIVED, poolId, blockCount, requestId, dst[0], tokens);
            batch.notify(message).submit();
        } catch (RuntimeException e) {
            giveBack(requestId, dst, null);
            throw new KvCacheException(what + " could not be submitted: " + e.getMessage(), e);
        }
        return new Send(requestId, what, dst, batch, writes);
    }

    /** Takes {@code dst.length} receiver blocks (waiting for returns) and a batch; registers the request. */
    private TransferBatch reserve(long requestId, int[] dst, String what, long waitNs) {
        long deadline = System.nanoTime() + Math.max(0, waitNs);
        long nextCheckNs = System.nanoTime();
        long failedSinceNs = 0;
        while (true) {
            lock.lock();
            try {
                if (outstanding.containsKey(requestId)) {
                    throw new KvCacheException(what + ": a request with this id is in flight or held by the receiver"
                        + " (ids must be unique until the receiver releases them)");
                }
                if (remoteBlocks - inUseCount >= dst.length) {
                    int b = -1;
                    for (int i = 0; i < dst.length; i++) {
                        b = inUse.nextClearBit(b + 1);
                        inUse.set(b);
                        dst[i] = b;
                    }
                    inUseCount += dst.length;
                    outstanding.put(requestId, dst);
                    TransferBatch batch = spare.pollFirst();
                    if (batch != null) {
                        return batch;
                    }
                    break;
                }
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    throw new KvCacheException(what + ": the receiver has " + (remoteBlocks - inUseCount)
                        + " free blocks of " + remoteBlocks + ", the request needs " + dst.length + "; none came back "
                        + "within " + TimeUnit.NANOSECONDS.toMillis(Math.max(0, waitNs)) + " ms (back-pressure: "
                        + "the receiver releases blocks when it is done with a request)");
                }
                if (System.nanoTime() - nextCheckNs < 0) {
                    returned.awaitNanos(Math.min(left, 20_000_000L));
                    continue;
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new KvCacheException(what + ": interrupted while waiting for free blocks", e);
            } finally {
                lock.unlock();
            }
            // Outside the lock: the engine's store and link state (a dead receiver never returns blocks).
            String failure = engine.peerFailure(peer);
            failedSinceNs = failure == null ? 0 : failedSinceNs == 0 ? System.nanoTime() : failedSinceNs;
            if (failure != null && System.nanoTime() - failedSinceNs > FAILURE_GRACE_NS) {
                throw new KvCacheException(what + ": the receiver is gone: " + failure);
            }
            nextCheckNs = System.nanoTime() + 20_000_000L;
        }
        try {
            return engine.newBatch(batchCapacity);
        } catch (RuntimeException e) {
            giveBack(requestId, dst, null);
            throw e;
        }
    }

    /**
     * One WRITE per run of blocks consecutive on both sides; the table entries per run consecutive at the target.
     * Returns the number of block WRITEs.
     */
    private int fill(TransferBatch batch, int[] src, int[] dst, int n) {
        int writes = 0;
        for (int i = 0; i < n; ) {
            int j = i;
            while (j + 1 < n && src[j + 1] == src[j] + 1 && dst[j + 1] == dst[j] + 1) {
                j++;
            }
            batch.write(source.segment(), source.blockOffset(src[i]), target,
                remoteBlocksOffset + (long) dst[i] * blockBytes, (long) (j - i + 1) * blockBytes);
            writes++;
            i = j + 1;
        }
        MemorySegment staging = control.memory();
        for (int i = 0; i < n; i++) {
            staging.set(ValueLayout.JAVA_INT, KvBlockPool.TABLE_OFFSET + 4L * dst[i], i + 1 < n ? dst[i + 1] : -1);
        }
        for (int i = 0; i < n; ) {
            int j = i;
            while (j + 1 < n && dst[j + 1] == dst[j] + 1) {
                j++;
            }
            long offset = KvBlockPool.TABLE_OFFSET + 4L * dst[i];
            batch.write(control, offset, target, offset, 4L * (j - i + 1));
            i = j + 1;
        }
        return writes;
    }

    /**
     * Returns {@code dst} to the mirror when the receiver cannot have them (nothing of the request was announced),
     * and {@code batch} (when given) to the spares.
     */
    private void giveBack(long requestId, int[] dst, TransferBatch batch) {
        lock.lock();
        try {
            if (outstanding.get(requestId) == dst) {
                outstanding.remove(requestId);
                for (int b : dst) {
                    inUse.clear(b);
                }
                inUseCount -= dst.length;
                returned.signalAll();
            }
        } finally {
            lock.unlock();
        }
        if (batch != null) {
            recycle(batch);
        }
    }

    private void recycle(TransferBatch batch) {
        try {
            batch.clear();
        } catch (IllegalStateException e) {
            batch.close(); // slices still out after a deadline: not reusable
            return;
        }
        lock.lock();
        try {
            if (closed) {
                batch.close();
            } else {
                spare.addLast(batch);
            }
        } finally {
            lock.unlock();
        }
    }

    /**
     * Waits until the receiver has returned every request sent (a clean shutdown: closing the sender before that
     * makes the receiver's last returns fail).
     *
     * @throws KvCacheException when {@code timeout} passes first, naming what is still out, or the receiver is gone
     */
    public void awaitReturned(Duration timeout) {
        long deadline = System.nanoTime() + timeout.toNanos();
        long failedSinceNs = 0;
        while (true) {
            lock.lock();
            try {
                if (outstanding.isEmpty()) {
                    return;
                }
                if (System.nanoTime() - deadline >= 0) {
                    throw new KvCacheException(outstanding.size() + " requests (" + inUseCount + " blocks) sent to KV "
                        + "receiver '" + name + "' (rank " + peer + ") were not returned within " + timeout.toMillis()
                        + " ms, among them request " + outstanding.keySet().iterator().next());
                }
                returned.awaitNanos(20_000_000L);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new KvCacheException("interrupted while waiting for returns from KV receiver '" + name + "'", e);
            } finally {
                lock.unlock();
            }
            String failure = engine.peerFailure(peer);
            failedSinceNs = failure == null ? 0 : failedSinceNs == 0 ? System.nanoTime() : failedSinceNs;
            if (failure != null && System.nanoTime() - failedSinceNs > FAILURE_GRACE_NS) {
                throw new KvCacheException("KV receiver '" + name + "' will not return its blocks: " + failure);
            }
        }
    }

    /** RETURNED from the receiver: the request's blocks are free again. On the engine's agent thread. */
    private boolean onNotification(Notification n) {
        if (KvMessages.typeOf(n, poolId) != KvMessages.RETURNED || n.fromRank() != peer) {
            return false;
        }
        long id = KvMessages.requestId(n);
        lock.lock();
        try {
            int[] dst = outstanding.remove(id);
            if (dst == null) {
                log.warn(engine.rank(), Log.Subsys.NET, "KV receiver '" + name + "' returned request " + id
                    + ", which this sender does not know");
                return true;
            }
            for (int b : dst) {
                inUse.clear(b);
            }
            inUseCount -= dst.length;
            returned.signalAll();
        } finally {
            lock.unlock();
        }
        return true;
    }

    private void checkOpen() {
        if (closed) {
            throw new IllegalStateException("KV sender of '" + name + "' is closed");
        }
    }

    /**
     * Stops taking returns and releases the sender's segment (the receiver's returns then fail, which it reports)
     * and batches. Requests in flight are not waited for.
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        engine.removeNotificationListener(listener);
        lock.lock();
        try {
            closed = true;
            for (TransferBatch b : spare) {
                b.close();
            }
            spare.clear();
        } finally {
            lock.unlock();
        }
        control.close();
    }

    @Override
    public String toString() {
        return "KV sender to '" + name + "' (rank " + peer + ", " + receiverFreeBlocks() + " of " + remoteBlocks
            + " blocks free)";
    }

    /**
     * One request on its way: {@link #await()} until the receiver has it whole (or why not). A failed request's
     * receiver blocks are reused (nothing of it was announced to the receiver).
     */
    public final class Send {
        private final long requestId;
        private final String what;
        private final int[] dst;
        private final TransferBatch batch;
        private final int blockWrites;
        private boolean finished;
        private String error;

        Send(long requestId, String what, int[] dst, TransferBatch batch, int blockWrites) {
            this.requestId = requestId;
            this.blockWrites = blockWrites;
            this.what = what;
            this.dst = dst;
            this.batch = batch;
        }

        /** The request's id. */
        public long requestId() {
            return requestId;
        }

        /** WRITEs that carry the request's blocks: one per run of blocks consecutive on both sides. */
        public int blockWrites() {
            return blockWrites;
        }

        /** The request's blocks in the receiver's pool (a copy). */
        public int[] receiverBlocks() {
            return dst.clone();
        }

        /** Drives progress once; whether the request completed (landed and announced, or failed). */
        public synchronized boolean poll() {
            if (!finished && batch.poll()) {
                finish();
            }
            return finished;
        }

        /**
         * Waits until the receiver has the whole request (the batch's deadline is JCCL_TIMEOUT).
         *
         * @throws KvCacheException naming the first failed transfer or the notification's failure
         */
        public synchronized void await() {
            if (!finished) {
                batch.await();
                finish();
            }
            if (error != null) {
                throw new KvCacheException(error);
            }
        }

        /** Why the request failed, or null (while pending too). */
        public synchronized String error() {
            return error;
        }

        private void finish() {
            finished = true;
            if (batch.succeeded()) {
                recycle(batch);
                return;
            }
            String first = batch.notificationError();
            for (int t = 0; t < batch.size(); t++) {
                if (batch.error(t) != null) {
                    first = batch.error(t);
                    break;
                }
            }
            error = what + " failed: " + first;
            if (batch.failedCount() > 0) {
                // The notification is never sent when a transfer failed: the receiver did not get these blocks.
                giveBack(requestId, dst, batch);
            } else {
                // Every WRITE landed, the notification's fate is unknown: the receiver may hold the request, so its
                // blocks stay taken until it returns them (never overwritten); the batch's notification state is
                // spent.
                batch.close();
            }
        }
    }
}
