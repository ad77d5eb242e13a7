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
        /** With a message naming both signatures. */
        public Mismatch(String message) {
            super(message);
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
