package io.jccl.collectives;

/**
 * A collective or communicator operation failed. The communicator is unusable afterwards (as with NCCL, abort it
 * and create a new one); later calls fail at once with the same cause. Subclasses say why; the rendezvous store's
 * failures ({@link io.jccl.collectives.store.StoreException}, and {@link io.jccl.collectives.store.StoreTimeoutException}
 * when ranks do not meet in time, the usual start-up failure) are among them, so one
 * {@code catch (CollectiveException e)} covers creating a communicator too.
 */
public class CollectiveException extends RuntimeException {
    /** With a message. */
    public CollectiveException(String message) {
        super(message);
    }

    /** With a message and cause. */
    public CollectiveException(String message, Throwable cause) {
        super(message, cause);
    }

    /** A blocking wait passed its deadline ({@code JCCL_TIMEOUT}). */
    public static class Timeout extends CollectiveException {
        /** With a message. */
        public Timeout(String message) {
            super(message);
        }
    }

    /** The communicator was aborted (locally with {@link Communicator#abort}, or by a peer). */
    public static class Aborted extends CollectiveException {
        /** With a message and cause. */
        public Aborted(String message, Throwable cause) {
            super(message, cause);
        }
    }

    /** A peer died or its connection broke; {@link #rank()} names it. */
    public static class PeerFailure extends CollectiveException {
        private final int rank;

        /** With the dead rank and a message. */
        public PeerFailure(int rank, String message) {
            super(message);
            this.rank = rank;
        }

        /** The rank that failed. */
        public int rank() {
            return rank;
        }
    }

    /** Ranks called different collectives (or different counts, types, operators or roots) at one sequence number. */
    public static class Mismatch extends CollectiveException {
        private final String local;
        private final int otherRank;
        private final String other;

        /** With a message naming both signatures. */
        public Mismatch(String message) {
            this(message, null, -1, null);
        }

        /**
         * With a message naming both signatures, and the signatures themselves: what this rank ran ({@code local}),
         * and what {@code otherRank} ran ({@code other}).
         */
        public Mismatch(String message, String local, int otherRank, String other) {
            super(message);
            this.local = local;
            this.otherRank = otherRank;
            this.other = other;
        }

        /** What this rank ran (its signature), or null when not known. */
        public String local() {
            return local;
        }

        /** The rank that ran something else, or -1 when not known. */
        public int otherRank() {
            return otherRank;
        }

        /** What {@link #otherRank()} ran (its signature), or null when not known. */
        public String other() {
            return other;
        }
    }

    /**
     * The communicator was revoked ({@link Communicator#revoke}, ULFM's {@code MPIX_ERR_REVOKED}): by this rank or by
     * a peer whose notice reached it. Pending and later operations fail with it; unlike an abort the communicator
     * stays open for {@link Communicator#shrink}. {@link #revoker()} names the rank that revoked.
     */
    public static class Revoked extends CollectiveException {
        private final int revoker;
        private final String reason;

        /** With the rank that revoked, its reason, and a message. */
        public Revoked(int revoker, String reason, String message) {
            super(message);
            this.revoker = revoker;
            this.reason = reason;
        }

        /** The rank that called {@link Communicator#revoke} first, as far as this rank learned. */
        public int revoker() {
            return revoker;
        }

        /** The reason it gave. */
        public String reason() {
            return reason;
        }
    }

    /** Joining failed: another job, a wrong secret, a duplicate rank, or inconsistent settings. */
    public static class Refused extends CollectiveException {
        /** With a message. */
        public Refused(String message) {
            super(message);
        }
    }
}
