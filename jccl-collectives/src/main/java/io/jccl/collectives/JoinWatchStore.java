package io.jccl.collectives;

import io.jccl.collectives.store.Store;
import io.jccl.collectives.store.StoreTimeoutException;

import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.function.IntPredicate;

/**
 * The store a shrink's new communicator joins through, watching the members while it waits: a blocking
 * {@link #get} or {@link #waitFor} waits in short slices and, between them, fails with
 * {@link CollectiveException.PeerFailure} when a member's process is known gone ({@code gone}, by new rank). Why: a
 * member killed after the agreement decided never writes its join records, and every other member's join waited
 * for them until the join's bound, {@code max(2 x JCCL_PEER_TIMEOUT, 10 s)}, 60 s with the default settings
 * (a second kill during the recovery, fault injection over shm0). Now {@link Communicator#shrink} agrees again at
 * once, without it. Disarmed once the communicator is created ({@link #disarm}): then a plain pass-through.
 */
final class JoinWatchStore implements Store {
    /** One slice of a blocking wait; between two, the members are looked at. */
    static final long SLICE_NS = TimeUnit.MILLISECONDS.toNanos(20);

    private final Store inner;
    private final int members;
    private final int self;
    private volatile IntPredicate gone;

    /** Watches {@code members} ranks (new numbering, {@code self} excepted) with {@code gone} while armed. */
    JoinWatchStore(Store inner, int members, int self, IntPredicate gone) {
        this.inner = inner instanceof JoinWatchStore w ? w.inner : inner; // one level, however many shrinks
        this.members = members;
        this.self = self;
        this.gone = gone;
    }

    /** Stops watching (the join is over): every call passes through. */
    void disarm() {
        gone = null;
    }

    /** The store under this one. */
    Store inner() {
        return inner;
    }

    /**
     * Fails with {@link CollectiveException.PeerFailure} when member {@code j} (new rank) is known gone while the
     * join is armed: the new communicator's first barrier asks this with its health checks, since a member killed
     * after it wrote its join records but before its links connected (tcp0 connects lazily) breaks no link, and the
     * barrier would wait for it until the join's bound (JCCL_PEER_TIMEOUT and more; seed 66006 of the fault
     * injection over tcp0 between namespaces: 30 s, and the others had agreed without this rank meanwhile).
     */
    void checkMember(int j) {
        IntPredicate g = gone;
        if (g != null && j != self && j >= 0 && j < members && g.test(j)) {
            throw new CollectiveException.PeerFailure(j, "rank " + j + " of the shrunk communicator died after the "
                + "agreement (its process is gone, or its liveness port refused), before the first barrier");
        }
    }

    private void checkMembers() {
        IntPredicate g = gone;
        if (g == null) {
            return;
        }
        for (int j = 0; j < members; j++) {
            if (j != self && g.test(j)) {
                throw new CollectiveException.PeerFailure(j, "rank " + j + " of the shrunk communicator died after the"
                    + " agreement (its process is gone), before it joined");
            }
        }
    }

    @Override
    public byte[] get(String key, long timeoutNs) {
        long deadlineNs = System.nanoTime() + timeoutNs;
        while (true) {
            if (gone == null) {
                return inner.get(key, Math.max(1, deadlineNs - System.nanoTime()));
            }
            long left = deadlineNs - System.nanoTime();
            try {
                return inner.get(key, Math.max(1, Math.min(left, SLICE_NS)));
            } catch (StoreTimeoutException e) {
                if (left <= SLICE_NS) {
                    throw e;
                }
                checkMembers();
            }
        }
    }

    @Override
    public void waitFor(List<String> keys, long timeoutNs) {
        long deadlineNs = System.nanoTime() + timeoutNs;
        while (true) {
            if (gone == null) {
                inner.waitFor(keys, Math.max(1, deadlineNs - System.nanoTime()));
                return;
            }
            long left = deadlineNs - System.nanoTime();
            try {
                inner.waitFor(keys, Math.max(1, Math.min(left, SLICE_NS)));
                return;
            } catch (StoreTimeoutException e) {
                if (left <= SLICE_NS) {
                    throw e;
                }
                checkMembers();
            }
        }
    }

    @Override
    public void set(String key, byte[] value, long timeoutNs) {
        inner.set(key, value, timeoutNs);
    }

    @Override
    public long add(String key, long delta, long timeoutNs) {
        return inner.add(key, delta, timeoutNs);
    }

    @Override
    public boolean compareAndSet(String key, byte[] expected, byte[] desired, long timeoutNs) {
        return inner.compareAndSet(key, expected, desired, timeoutNs);
    }

    @Override
    public boolean delete(String key, long timeoutNs) {
        return inner.delete(key, timeoutNs);
    }

    @Override
    public boolean check(String key, long timeoutNs) {
        return inner.check(key, timeoutNs);
    }

    @Override
    public String describe() {
        return inner.describe();
    }

    /** Closes nothing: the store under it belongs to the communicator or the succession. */
    @Override
    public void close() {
    }
}
