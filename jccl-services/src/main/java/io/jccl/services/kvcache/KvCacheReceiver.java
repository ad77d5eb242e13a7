package io.jccl.services.kvcache;

import io.jccl.common.Log;
import io.jccl.services.transfer.Notification;
import io.jccl.services.transfer.NotificationListener;
import io.jccl.services.transfer.RemoteSegment;
import io.jccl.services.transfer.TransferBatch;
import io.jccl.services.transfer.TransferEngine;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import java.util.regex.Pattern;

/**
 * The decode side of a KV-cache hand-off: a pool of blocks registered as {@code kv/NAME} that one
 * {@link KvCacheSender} fills, one-sided. A request appears ({@link #poll}, {@link #await}) only when its
 * notification arrived, that is after every one of its blocks landed; {@link #release} frees its blocks here and
 * sends them back to the sender (a RETURNED message), which may then reuse them.
 *
 * <p>Bad input is refused for the one request named: releasing an unknown request or one already released, an
 * arriving request whose table names a block out of range or in use (it is dropped and {@link #await} reports it).
 * {@link #await} stops early, with the reason, when the sender is gone.
 */
public final class KvCacheReceiver implements AutoCloseable {
    private static final Pattern NAME = Pattern.compile("[A-Za-z0-9._:@+=-][A-Za-z0-9._:@+=/-]{0,150}");
    /** Return messages in flight at most; the oldest is awaited beyond. */
    private static final int RETURNS_IN_FLIGHT = 32;
    /** Ids of released (and of rejected) requests remembered, to tell a double release from an unknown id. */
    private static final int REMEMBERED = 4096;
    private static final long SENDER_CHECK_PERIOD_NS = 50_000_000L;

    private final Log log = Log.get();
    private final TransferEngine engine;
    private final String name;
    private final int poolId;
    private final KvBlockPool pool;
    private final ReentrantLock lock = new ReentrantLock();
    private final Condition changed = lock.newCondition();
    /** Requests arrived and not taken yet, in arrival order. Guarded by the lock. */
    private final LinkedHashMap<Long, KvRequest> arrived = new LinkedHashMap<>();
    /** Requests taken and not released. Guarded by the lock. */
    private final Map<Long, KvRequest> held = new HashMap<>();
    /** Recently released request ids. Guarded by the lock. */
    private final LinkedHashMap<Long, Boolean> released = bounded();
    /** Requests refused on arrival → why. Guarded by the lock. */
    private final LinkedHashMap<Long, String> rejected = bounded();
    private final NotificationListener listener = this::onNotification;
    private volatile int senderRank = -1;
    // Returns: one thread at a time (returnLock).
    private final Object returnLock = new Object();
    private RemoteSegment senderControl;
    private final ArrayDeque<TransferBatch> returning = new ArrayDeque<>();
    private final ArrayDeque<TransferBatch> spareReturns = new ArrayDeque<>();
    private String returnFailure;
    private volatile boolean closed;

    private KvCacheReceiver(TransferEngine engine, String name, KvBlockPool pool) {
        this.engine = engine;
        this.name = name;
        this.poolId = KvMessages.poolId(name);
        this.pool = pool;
    }

    private static <V> LinkedHashMap<Long, V> bounded() {
        return new LinkedHashMap<>() {
            @Override
            protected boolean removeEldestEntry(Map.Entry<Long, V> eldest) {
                return size() > REMEMBERED;
            }
        };
    }

    /**
     * Creates the receiver {@code name}: registers a pool of {@code blockCount} blocks of {@code layout} as segment
     * {@code kv/NAME}, which the sender opens.
     *
     * @throws io.jccl.services.transfer.TransferException when a receiver of that name exists in the job
     */
    public static KvCacheReceiver create(TransferEngine engine, String name, KvCacheLayout layout, int blockCount) {
        checkName(name);
        KvBlockPool pool = KvBlockPool.register(engine, poolSegmentName(name), layout, blockCount, true);
        KvCacheReceiver r = new KvCacheReceiver(engine, name, pool);
        engine.addNotificationListener(r.listener);
        return r;
    }

    static void checkName(String name) {
        if (name == null || !NAME.matcher(name).matches()) {
            throw new IllegalArgumentException("KV receiver name '" + name + "': 1 to 151 of A-Z a-z 0-9 . _ : @ + = -"
                + " / (not starting with /)");
        }
    }

    static String poolSegmentName(String name) {
        return "kv/" + name;
    }

    /** The receiver's name. */
    public String name() {
        return name;
    }

    /** The pool the sender writes into (its blocks are read through {@link KvRequest#block}). */
    public KvBlockPool pool() {
        return pool;
    }

    /** ARRIVED from the sender: the request's blocks and table entries landed. On the engine's agent thread. */
    private boolean onNotification(Notification n) {
        if (KvMessages.typeOf(n, poolId) != KvMessages.ARRIVED) {
            return false;
        }
        long id = KvMessages.requestId(n);
        int count = KvMessages.blockCount(n);
        String bad = null;
        int[] table = null;
        if (count < 1 || count > pool.blockCount()) {
            bad = count + " blocks, the pool holds " + pool.blockCount();
        } else {
            table = new int[count];
            MemorySegment m = pool.segment().memory();
            int b = KvMessages.firstBlock(n);
            for (int i = 0; i < count && bad == null; i++) {
                if (b < 0 || b >= pool.blockCount()) {
                    bad = "its block table entry " + i + " = " + b + " is outside 0.." + (pool.blockCount() - 1);
                } else {
                    table[i] = b;
                    b = m.get(ValueLayout.JAVA_INT, KvBlockPool.TABLE_OFFSET + 4L * b);
                }
            }
            if (bad == null && b != -1) {
                bad = "its block table does not end after " + count + " blocks";
            }
        }
        lock.lock();
        try {
            senderRank = n.fromRank();
            if (bad == null && (arrived.containsKey(id) || held.containsKey(id))) {
                bad = "a request with this id is already here";
            }
            if (bad == null) {
                try {
                    pool.claim(table, count);
                } catch (KvCacheException e) {
                    bad = e.getMessage();
                }
            }
            if (bad != null) {
                String why = "request " + id + " from rank " + n.fromRank() + " was refused on arrival: " + bad;
                rejected.put(id, why);
                log.warn(engine.rank(), Log.Subsys.NET, "KV receiver '" + name + "': " + why);
            } else {
                arrived.put(id, new KvRequest(id, n.fromRank(), KvMessages.tokens(n), table, pool));
            }
            changed.signalAll();
        } finally {
            lock.unlock();
        }
        return true;
    }

    /** The next request that arrived (whichever), waiting up to {@code timeout}; null when none came in time. */
    public KvRequest poll(long timeout, TimeUnit unit) throws InterruptedException {
        long deadline = System.nanoTime() + unit.toNanos(timeout);
        lock.lock();
        try {
            while (arrived.isEmpty()) {
                checkOpen();
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    return null;
                }
                changed.awaitNanos(left);
            }
            Iterator<KvRequest> it = arrived.values().iterator();
            KvRequest r = it.next();
            it.remove();
            held.put(r.requestId(), r);
            return r;
        } finally {
            lock.unlock();
        }
    }

    /**
     * Waits up to {@code timeout} for request {@code requestId} to arrive whole and takes it.
     *
     * @throws KvCacheException when it was refused on arrival, was taken already, the sender is gone (closed its
     *     engine, exited, its link failed) or it did not arrive in time
     */
    public KvRequest await(long requestId, Duration timeout) {
        long start = System.nanoTime();
        long deadline = start + timeout.toNanos();
        long nextCheckNs = start;
        long failedSinceNs = 0;
        while (true) {
            lock.lock();
            try {
                checkOpen();
                KvRequest r = arrived.remove(requestId);
                if (r != null) {
                    held.put(requestId, r);
                    return r;
                }
                String why = rejected.remove(requestId);
                if (why != null) {
                    throw new KvCacheException(why);
                }
                if (held.containsKey(requestId)) {
                    throw new KvCacheException("request " + requestId + " was taken already (and not released)");
                }
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    throw new KvCacheException("request " + requestId + " did not arrive in KV receiver '" + name
                        + "' within " + timeout.toMillis() + " ms (sender: " + (senderRank < 0 ? "not known yet"
                        : "rank " + senderRank) + ")");
                }
                if (System.nanoTime() - nextCheckNs < 0) {
                    changed.awaitNanos(Math.min(left, SENDER_CHECK_PERIOD_NS));
                    continue;
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new KvCacheException("interrupted while waiting for request " + requestId, e);
            } finally {
                lock.unlock();
            }
            // Outside the lock (store and links): a sender that is gone will not send it.
            String failure = senderFailure();
            failedSinceNs = failure == null ? 0 : failedSinceNs == 0 ? System.nanoTime() : failedSinceNs;
            // Confirmed for a while: its last notification may still wait in this engine's completion queue.
            if (failure != null && System.nanoTime() - failedSinceNs > KvCacheSender.FAILURE_GRACE_NS) {
                throw new KvCacheException("request " + requestId + " will not arrive in KV receiver '" + name
                    + "': its sender is gone: " + failure);
            }
            nextCheckNs = System.nanoTime() + SENDER_CHECK_PERIOD_NS;
        }
    }

    /** Why the sender cannot send any more, or null (also while no sender has opened this receiver). */
    private String senderFailure() {
        int s = senderRank;
        if (s < 0) {
            // The sender WRITEs its rank into the pool's header when it opens this receiver.
            s = pool.segment().memory().get(ValueLayout.JAVA_INT, KvBlockPool.SENDER_RANK_OFFSET);
            if (s < 0 || s >= engine.size()) {
                return null;
            }
            senderRank = s;
        }
        return engine.peerFailure(s);
    }

    /** Opens the sender's segment (the return path); under the return lock. */
    private RemoteSegment openSender() {
        if (senderControl == null) {
            senderControl = engine.openSegment(KvCacheSender.senderSegmentName(name));
            senderRank = senderControl.rank();
        }
        return senderControl;
    }

    /** {@link #release(long)} of {@code request}. */
    public void release(KvRequest request) {
        release(request.requestId());
    }

    /**
     * Frees request {@code requestId}'s blocks here and returns them to the sender (asynchronously: a return that
     * fails, the sender being gone, is reported by the next {@link #flushReturns()}).
     *
     * @throws KvCacheException for an id that never arrived or was released already (a double release)
     */
    public void release(long requestId) {
        KvRequest r;
        lock.lock();
        try {
            checkOpen();
            r = held.remove(requestId);
            if (r == null) {
                r = arrived.remove(requestId);
            }
            if (r == null) {
                throw new KvCacheException(released.containsKey(requestId)
                    ? "request " + requestId + " was released already (a double release); its blocks may belong to "
                    + "another request by now"
                    : "unknown request " + requestId + ": it has not arrived in KV receiver '" + name + "'");
            }
            pool.release(r.blocks(), r.blockCount());
            released.put(requestId, Boolean.TRUE);
        } finally {
            lock.unlock();
        }
        sendReturn(r);
    }

    private void sendReturn(KvRequest r) {
        synchronized (returnLock) {
            reap(false);
            TransferBatch b = spareReturns.pollFirst();
            try {
                RemoteSegment to = openSender();
                if (b == null) {
                    if (returning.size() >= RETURNS_IN_FLIGHT) {
                        reap(true);
                        b = spareReturns.pollFirst();
                    }
                    if (b == null) {
                        b = engine.newBatch(1);
                    }
                }
                byte[] message = new byte[KvMessages.LENGTH];
                KvMessages.encode(message, KvMessages.RETURNED, poolId, r.blockCount(), r.requestId(),
                    r.blockIndex(0), r.tokens());
                // The notification needs a transfer to its target: 8 unused bytes of the header area on both sides.
                b.write(pool.segment(), 32, to, 32, 8);
                b.notify(message).submit();
                returning.addLast(b);
            } catch (RuntimeException e) {
                if (b != null) {
                    b.close();
                }
                // Released here all the same; the sender (gone, most likely) hears nothing: flushReturns says so.
                if (returnFailure == null) {
                    returnFailure = "request " + r.requestId() + ": " + e.getMessage();
                }
                log.warn(engine.rank(), Log.Subsys.NET, "KV receiver '" + name + "': the blocks of request "
                    + r.requestId() + " could not be returned to the sender: " + e.getMessage());
            }
        }
    }

    /** Recycles completed returns (all of them, waiting, when {@code all}); remembers the first failure. */
    private void reap(boolean all) {
        while (!returning.isEmpty()) {
            TransferBatch b = returning.peekFirst();
            if (!b.poll() && !all) {
                return;
            }
            if (!b.isDone()) {
                b.await();
            }
            returning.pollFirst();
            if (!b.succeeded() && returnFailure == null) {
                returnFailure = b.toString();
            }
            try {
                b.clear();
                spareReturns.addLast(b);
            } catch (IllegalStateException e) {
                b.close();
            }
        }
    }

    /**
     * Waits until every return sent so far completed.
     *
     * @throws KvCacheException when a return failed since the last call (the sender is gone or closed)
     */
    public void flushReturns() {
        synchronized (returnLock) {
            reap(true);
            String f = returnFailure;
            returnFailure = null;
            if (f != null) {
                throw new KvCacheException("returning blocks to the sender of KV receiver '" + name + "' failed: " + f);
            }
        }
    }

    /** Requests arrived or taken and not released. */
    public int heldRequests() {
        lock.lock();
        try {
            return arrived.size() + held.size();
        } finally {
            lock.unlock();
        }
    }

    private void checkOpen() {
        if (closed) {
            throw new IllegalStateException("KV receiver '" + name + "' is closed");
        }
    }

    /**
     * Waits for returns in flight, then unregisters the pool (the sender's transfers to it fail from then on) and
     * wakes waiters.
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        engine.removeNotificationListener(listener);
        synchronized (returnLock) {
            try {
                reap(true);
            } catch (RuntimeException e) {
                log.info(engine.rank(), Log.Subsys.NET, () -> "KV receiver '" + name + "': returns at close: " + e);
            }
            for (TransferBatch b : spareReturns) {
                b.close();
            }
            spareReturns.clear();
        }
        lock.lock();
        try {
            closed = true;
            changed.signalAll();
        } finally {
            lock.unlock();
        }
        pool.close();
    }

    @Override
    public String toString() {
        return "KV receiver '" + name + "' (" + pool.freeCount() + " of " + pool.blockCount() + " blocks free)";
    }
}
