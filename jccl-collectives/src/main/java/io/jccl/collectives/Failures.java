package io.jccl.collectives;

import io.jccl.collectives.direct.DirectPath;
import io.jccl.collectives.events.MismatchEvent;
import io.jccl.collectives.events.PeerFailureEvent;
import io.jccl.collectives.message.MessagePath;
import io.jccl.collectives.store.Store;
import io.jccl.common.Log;

import java.util.concurrent.TimeUnit;

/**
 * What a communicator does when something fails or it is aborted: records the first failure (later calls fail at
 * once with it), publishes the reason in the store before breaking the links (so peers that notice the broken links
 * can report it: {@code error/RANK}), marks the direct path aborted and moves every queue pair to ERROR, and dumps
 * the flight recorder. Any thread may abort; the operation thread fails.
 */
final class Failures {
    private final int rank;
    private final int size;
    private final String name;
    private final Store store;
    private final FlightRecorder recorder;
    private volatile MessagePath messagePath;
    private volatile DirectPath directPath;
    private volatile boolean aborted;
    private volatile String abortReason;
    private volatile CollectiveException failure;
    /** What a revoking rank publishes as its error (see {@link #revokeFrom}), read back by peers. */
    private static final java.util.regex.Pattern REVOKED_REPORT =
        java.util.regex.Pattern.compile("revoked by rank (\\d+): (.*)", java.util.regex.Pattern.DOTALL);
    /** Starts a published report ({@code error/RANK}): the origin rank and a newline follow, then the reason. */
    static final String ORIGIN_HEADER = "origin ";
    /** Ranks the failure detector has named dead (every peer failure recorded, not only the first). */
    private final java.util.BitSet failedRanks = new java.util.BitSet();
    /** Set once the communicator is revoked (here or by a peer's notice); checked off the hot path only. */
    private volatile CollectiveException.Revoked revoked;
    /**
     * Aborted or revoked, set after either: the one field a wait's idle round reads (it ran one volatile read before
     * revoke existed, and still does).
     */
    private volatile boolean halted;
    /**
     * The store did not answer a failure's report (its host may be the rank that died): later reports skip it, so
     * that a failure, the revocation that follows and the reports of peers' failures do not each wait out a store
     * call's timeout (a TcpStore retries refused connections until then) on the way to recovery.
     */
    private volatile boolean storeDown;

    Failures(int rank, int size, String name, Store store, FlightRecorder recorder) {
        this.rank = rank;
        this.size = size;
        this.name = name;
        this.store = store;
        this.recorder = recorder;
    }

    /** The links to break on failure (once joined). */
    void attach(MessagePath messagePath, DirectPath directPath) {
        this.directPath = directPath;
        this.messagePath = messagePath;
    }

    /** Throws when the communicator was aborted. */
    void checkNotAborted() {
        if (!halted) {
            return;
        }
        CollectiveException.Revoked r = revoked;
        if (r != null) {
            throw revokedError(r);
        }
        if (aborted) {
            throw new CollectiveException.Aborted("communicator '" + name + "' rank " + rank + " was aborted"
                + (abortReason != null ? ": " + abortReason : ""), failure);
        }
    }

    /** Throws when this rank aborted its communicator (an aborted rank is out; a failed or revoked one may shrink). */
    void checkNotAbortedForShrink() {
        if (aborted) {
            throw new CollectiveException.Aborted("communicator '" + name + "' rank " + rank + " was aborted and "
                + "cannot shrink" + (abortReason != null ? " (" + abortReason + ")" : ""), null);
        }
    }

    /** Throws when the communicator failed earlier or was aborted. */
    void checkUsable() {
        CollectiveException f = failure;
        if (f != null) {
            CollectiveException.Revoked r = revoked;
            if (r != null) {
                throw revokedError(r);
            }
            throw new CollectiveException.Aborted("communicator '" + name + "' rank " + rank + " failed "
                + "earlier and cannot be used (abort it and create a new one): " + f.getMessage(), f);
        }
        checkNotAborted();
    }

    /** Whether the communicator was aborted or failed. */
    boolean isFailed() {
        return aborted || failure != null;
    }

    /** Adds the ranks this rank's failure detector named dead (its peer failures, peers' notices) to {@code into}. */
    void addKnownFailed(java.util.BitSet into) {
        synchronized (failedRanks) {
            into.or(failedRanks);
        }
        MessagePath m = messagePath;
        if (m != null) {
            m.addKnownFailed(into);
        }
    }

    /** Whether it was revoked (here or by a peer). */
    boolean isRevoked() {
        return revoked != null;
    }

    /** A fresh error for a call on the revoked communicator (each throw its own stack), naming the revoker. */
    private CollectiveException.Revoked revokedError(CollectiveException.Revoked r) {
        return new CollectiveException.Revoked(r.revoker(), r.reason(), "communicator '" + name + "' rank " + rank
            + " is revoked (by rank " + r.revoker() + ": " + r.reason() + "); shrink it or close it");
    }

    /**
     * Revokes: this rank's pending and later operations fail with {@link CollectiveException.Revoked}, and every
     * peer learns it through the links (a revoke notice, the direct path's status word) and revokes in turn.
     * Idempotent, from any thread; two ranks revoking at once is harmless (each keeps the first revocation it knew).
     */
    void revoke(String reason) {
        revokeFrom(new CollectiveException.Revoked(rank, reason, "communicator '" + name + "' was revoked by rank "
            + rank + ": " + reason));
    }

    /** Records the revocation {@code r} (this rank's or a peer's) unless one is recorded, and passes it on. */
    private boolean revokeFrom(CollectiveException.Revoked r) {
        synchronized (this) {
            if (revoked != null) {
                return false;
            }
            revoked = r;
            if (failure == null) {
                failure = r;
            }
        }
        halted = true;
        publish(rank, "revoked by rank " + r.revoker() + ": " + r.reason());
        // ULFM's flood: every rank that learns of a revocation tells all its peers (fail-fast for those whose link
        // to the revoker is slow or gone), naming the revoker, so the notice reaches every live rank
        breakLinks(r.revoker(), r.reason(), true);
        Log.get().warn(rank, Log.Subsys.COLL, "communicator '" + name + "' revoked by rank " + r.revoker() + ": "
            + r.reason());
        return true;
    }

    /** Whether it was aborted. */
    boolean aborted() {
        return aborted;
    }

    /** Whether a failure or an abort was recorded. */
    boolean anyFailure() {
        return failure != null;
    }

    /** The failure of the operation with recorder handle {@code handle}: recorded, published, dumped; to throw. */
    CollectiveException failed(RuntimeException e, long handle) {
        RuntimeException cause = e;
        CollectiveException.Revoked r = revoked;
        if (r != null && !(e instanceof CollectiveException.Revoked)) {
            // a revocation broke the links; report it, not the broken links (or abort) it caused
            cause = revokedError(r);
        } else if (aborted && !(e instanceof CollectiveException.Aborted)) {
            // a local abort() broke the links; report the abort, not the broken links it caused
            cause = new CollectiveException.Aborted("rank " + rank + " was aborted: " + abortReason, e);
        }
        CollectiveException ce = fail(cause);
        record(ce);
        if (handle >= 0) {
            recorder.end(handle, false, ce.getClass().getSimpleName());
        }
        dump(ce);
        return ce;
    }

    /** The JFR event of a peer failure or a mismatch (when a recording asks for it). */
    private void record(CollectiveException ce) {
        if (ce instanceof CollectiveException.PeerFailure pf) {
            PeerFailureEvent.emit(name, pf.rank(), rank, pf.getMessage());
        } else if (ce instanceof CollectiveException.Mismatch m) {
            MismatchEvent.emit(name, rank, m.local(), m.otherRank(), m.other(), m.getMessage());
        }
    }

    /** Records the first failure, tells peers (status word, QPs to ERROR, store key) and returns it. */
    private CollectiveException fail(RuntimeException e) {
        CollectiveException ce;
        if (e instanceof CollectiveException x) {
            ce = x;
        } else {
            ce = new CollectiveException("rank " + rank + ": " + e, e);
        }
        if (!(ce instanceof CollectiveException.Revoked) && revoked == null && !aborted) {
            // a peer that broke its links (or left the operation: a mismatch, a timeout) because it revoked: this
            // rank is revoked too, not failed
            CollectiveException.Revoked r = revokedByPeer();
            if (r != null) {
                ce = r;
            }
        }
        if (ce instanceof CollectiveException.Revoked r) {
            revokeFrom(r);
            return ce;
        }
        if (ce instanceof CollectiveException.PeerFailure pf && failure == null) {
            Report report = Report.parse(remoteError(pf.rank()), pf.rank());
            int origin = report == null ? pf.rank() : report.origin();
            String remote = report == null ? null : report.text();
            java.util.regex.Matcher rm = remote == null ? null : REVOKED_REPORT.matcher(remote);
            if (rm != null && rm.matches() && !aborted) {
                // the peer broke its links because it revoked, and its notice is not read yet (the failed send
                // completed first): the reason it published says so
                CollectiveException.Revoked r = new CollectiveException.Revoked(Integer.parseInt(rm.group(1)),
                    rm.group(2), "rank " + rank + ": the communicator was revoked by rank " + rm.group(1) + " (as rank "
                    + pf.rank() + " reported): " + rm.group(2));
                revokeFrom(r);
                return r;
            }
            if (remote != null && origin != pf.rank() && origin != rank && origin >= 0 && origin < size) {
                // the peer is alive: it gave up because of another rank and broke its links, and its abort notice
                // (which says so on the links) lost the race with the failed request that brought this rank here.
                // Name the origin, as MessagePath.peerFailed does with the notice: survivors blame the dead rank,
                // not each other, and shrink keeps the messenger.
                ce = new CollectiveException.PeerFailure(origin, "rank " + origin + " failed first (rank "
                    + pf.rank() + " gave up because of it: " + remote + "); " + pf.getMessage());
            } else if (remote != null) {
                ce = new CollectiveException.PeerFailure(pf.rank(), pf.getMessage() + "; rank " + pf.rank()
                    + " reported: " + remote);
            }
        }
        if (ce instanceof CollectiveException.PeerFailure pf) {
            synchronized (failedRanks) {
                failedRanks.set(pf.rank());
            }
        }
        boolean first;
        synchronized (this) {
            first = failure == null && !(ce instanceof CollectiveException.Aborted && aborted);
            if (first) {
                failure = ce;
            }
        }
        if (first) {
            // Publish the reason before breaking the links, so peers that notice the broken links can report it; the
            // links themselves carry it too (the store may have died with rank 0).
            publish(ce instanceof CollectiveException.PeerFailure pf ? pf.rank() : rank, ce.getMessage());
            breakLinks(ce instanceof CollectiveException.PeerFailure pf ? pf.rank() : rank, ce.getMessage());
        }
        return ce;
    }

    /**
     * Aborts: pending and later operations fail with {@link CollectiveException.Aborted}, peers see this rank's
     * links fail. Idempotent.
     */
    void abort(String reason) {
        if (aborted) {
            return;
        }
        abortReason = reason;
        CollectiveException e = new CollectiveException.Aborted("rank " + rank + " aborted: " + reason, null);
        boolean first;
        synchronized (this) {
            first = failure == null;
            if (first) {
                failure = e;
            }
        }
        aborted = true;
        halted = true;
        if (first) {
            // An abort after a failure keeps the failure as the reason peers see.
            publish(rank, "aborted: " + reason);
        }
        CollectiveException.Revoked r = revoked;
        if (r != null) {
            breakLinks(r.revoker(), r.reason(), true); // peers keep reading a revocation, not this abort
        } else {
            breakLinks(rank, "aborted: " + reason);
        }
        if (first) {
            dump(e);
        }
    }

    /**
     * Throws the revocation any peer announced (its notice, read by the message path's polls, or its status word),
     * once a wait is slow: the peers a wait depends on may be healthy and not yet told, and the revoker is not one
     * of them.
     */
    void checkRevokedByPeers() {
        CollectiveException.Revoked r = revokedByPeer();
        if (r != null) {
            throw r;
        }
    }

    private CollectiveException.Revoked revokedByPeer() {
        MessagePath m = messagePath;
        CollectiveException.Revoked r = m == null ? null : m.revokedBy();
        DirectPath d = directPath;
        if (r == null && d != null) {
            r = d.revokedBy();
        }
        return r;
    }

    /**
     * Publishes why this rank gives up ({@code error/RANK}): {@link #ORIGIN_HEADER}, the rank the failure started
     * with ({@code originRank}: a dead peer, or this rank), a newline, then {@code message}.
     */
    private void publish(int originRank, String message) {
        if (storeDown) {
            return; // the links carry the reason too (abort notices, status words)
        }
        try {
            store.setString("error/" + rank, ORIGIN_HEADER + originRank + "\n" + message,
                TimeUnit.MILLISECONDS.toNanos(500));
        } catch (RuntimeException e) {
            storeDown = true; // the store may be gone with rank 0
        }
    }

    /** Tells the peers (status word, abort notices) that this rank gives up because of {@code originRank}. */
    private void breakLinks(int originRank, String reason) {
        breakLinks(originRank, reason, false);
    }

    private void breakLinks(int originRank, String reason, boolean revoke) {
        DirectPath d = directPath;
        if (d != null) {
            d.markAborted(originRank, reason, revoke);
        }
        MessagePath m = messagePath;
        if (m != null) {
            m.abortLinks(originRank, reason, revoke);
        }
    }

    /**
     * What {@code peer} published as its error ({@code error/PEER}), or null: one look, no waiting. A peer that gives
     * up publishes before it breaks its links ({@link #fail}, {@link #revokeFrom}), so by the time its broken link
     * is seen here its reason is in the store; a peer that was killed never publishes, and waiting for it (this
     * polled for 500 ms) only delayed the detection of every kill by that much.
     */
    private String remoteError(int peer) {
        MessagePath m = messagePath;
        if (m != null && m.processGone(peer)) {
            return null; // its process is gone: it published nothing after it died, and dying is the reason
        }
        if (storeDown) {
            return null;
        }
        try {
            long timeoutNs = TimeUnit.MILLISECONDS.toNanos(200);
            return store.check("error/" + peer, timeoutNs) ? store.getString("error/" + peer, timeoutNs) : null;
        } catch (RuntimeException e) {
            storeDown = true; // the store may be gone with rank 0
            return null;
        }
    }

    /**
     * What a peer published ({@code error/PEER}): the rank its failure started with and the reason. A text without
     * the {@link #ORIGIN_HEADER} is all reason; it, and a header whose rank does not parse, name the publisher.
     */
    record Report(int origin, String text) {
        /** {@code published} read, {@code publisher} its default origin; null for null. */
        static Report parse(String published, int publisher) {
            if (published == null) {
                return null;
            }
            int end = published.indexOf('\n');
            if (published.startsWith(ORIGIN_HEADER) && end > 0) {
                try {
                    return new Report(Integer.parseInt(published, ORIGIN_HEADER.length(), end, 10),
                        published.substring(end + 1));
                } catch (NumberFormatException e) {
                    return new Report(publisher, published.substring(end + 1));
                }
            }
            return new Report(publisher, published);
        }
    }

    private void dump(CollectiveException e) {
        StringBuilder sb = new StringBuilder();
        sb.append(e.getClass().getSimpleName()).append(": ").append(e.getMessage()).append('\n');
        sb.append("flight recorder of rank ").append(rank).append(" (last ").append(recorder.capacity())
            .append(" ops):");
        for (String line : recorder.dump()) {
            sb.append("\n  ").append(line);
        }
        MessagePath m = messagePath;
        if (m != null) {
            sb.append("\npeers:");
            for (String line : m.describePeers()) {
                sb.append("\n  ").append(line);
            }
        }
        Log.get().warn(rank, Log.Subsys.COLL, sb.toString());
    }
}
