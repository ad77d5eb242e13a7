package io.jccl.conformance;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.Endpoint;
import io.jccl.verbs.QueuePairState;
import io.jccl.verbs.SendOpcode;

import java.util.List;

/**
 * Everything a conformance test needs from "the other end" of a connection, expressed without verbs objects so
 * that the other end can live in this JVM ({@link InProcessPeer}) or in a child process ({@link RemotePeer}).
 *
 * <p>A peer owns one context on the device under test, one protection domain and one completion queue that a
 * background thread keeps polling (so the peer always makes progress, as a live process would). Queue pairs are
 * named by their QP numbers and regions by small integer handles. Every call is synchronous; calls on a remote
 * peer time out rather than hang.
 */
public interface PeerSide extends AutoCloseable {

    /** Which kind of peer this is, for test names and messages. */
    String description();

    /** The operating-system process the peer's verbs objects live in. */
    long processId();

    /** A snapshot of the peer context's counters ({@link io.jccl.verbs.Context#counters()}). */
    java.util.Map<io.jccl.verbs.Counter, Long> counters();

    /** Creates a reliable-connected queue pair in RESET with the given creation attributes. */
    PeerQueuePair createQueuePair(QueuePairSpec spec);

    /**
     * Drives queue pair {@code queuePairNumber} through INIT, RTR and RTS towards {@code remote}, with the access
     * flags and timer/retry settings of {@code spec}. May block until the other end connects too (as tcp's RTR
     * may), so callers connect both ends concurrently.
     */
    void connect(int queuePairNumber, Endpoint remote, ConnectionSpec spec);

    /** The state of a queue pair (ibv_query_qp). */
    QueuePairState state(int queuePairNumber);

    /** Moves a queue pair to ERR (ibv_modify_qp with only IBV_QP_STATE). */
    void modifyToError(int queuePairNumber);

    /** Destroys a queue pair. */
    void destroyQueuePair(int queuePairNumber);

    /** Allocates and registers {@code length} zeroed bytes with the {@link AccessFlag} mask {@code access}. */
    PeerRegion allocate(long length, int access);

    /**
     * Like {@link #allocate} but registers the memory in a second protection domain of the peer, which none of its
     * queue pairs belongs to: its keys must be refused on every one of them.
     */
    PeerRegion allocateInOtherDomain(long length, int access);

    /**
     * Registers {@code length} bytes of memory the peer allocated itself (an off-heap {@link java.lang.foreign.Arena}
     * segment) with {@link io.jccl.verbs.ProtectionDomain#registerMemory}, rather than memory the provider
     * allocated. Providers may take another path for such memory (shm copies with cross-memory attach).
     */
    PeerRegion registerCallerOwned(long length, int access);

    /** Deregisters a region; its keys are refused from then on. */
    void deregister(int region);

    /** Writes bytes into a region (a CPU store, not a verb). */
    void write(int region, long offset, byte[] data);

    /** Reads bytes of a region (a CPU load, not a verb). */
    byte[] read(int region, long offset, int length);

    /** Fills {@code length} bytes at {@code offset} with {@link Patterns pattern} {@code seed}. */
    void fillPattern(int region, long offset, long length, long seed);

    /** The first byte that differs from {@link Patterns pattern} {@code seed}, or -1 when all match. */
    long firstPatternMismatch(int region, long offset, long length, long seed);

    /** Posts a receive request. */
    void postReceive(int queuePairNumber, long wrId, List<PeerSge> sges);

    /** Posts a send-queue request. */
    void postSend(int queuePairNumber, PeerSend send);

    /**
     * Waits up to {@code timeoutNs} for {@code count} completions of the queue pair and returns those that arrived,
     * oldest first (fewer when the deadline passed first).
     */
    List<Completion> poll(int queuePairNumber, int count, long timeoutNs);

    /**
     * Runs {@code count} signaled ATOMIC_FETCH_AND_ADD requests adding {@code addend} to the 8 bytes at
     * {@code remoteAddress}, keeping up to 8 outstanding, and returns the original value each one fetched, in
     * posting order.
     *
     * @throws IllegalStateException when one of them does not complete successfully
     */
    long[] fetchAndAdd(int queuePairNumber, long remoteAddress, int rkey, long addend, int count);

    /** Destroys every queue pair and region this peer created, so the next test starts clean. */
    void reset();

    /** Releases the peer (a remote peer's process exits or is killed). */
    @Override
    void close();

    /**
     * A queue pair on the peer.
     *
     * @param queuePairNumber its QP number, which also names it in peer calls
     * @param endpoint what the local end needs to connect to it
     */
    record PeerQueuePair(int queuePairNumber, Endpoint endpoint) {
    }

    /**
     * A registered region on the peer.
     *
     * @param id handle for peer calls
     * @param address native address peers name in one-sided requests
     * @param length bytes
     * @param rkey remote key
     * @param lkey local key (for the peer's own scatter/gather entries)
     */
    record PeerRegion(int id, long address, long length, int rkey, int lkey) {
    }

    /**
     * A scatter/gather entry on the peer: {@code length} bytes at {@code offset} inside region {@code region}.
     *
     * @param region region handle
     * @param offset byte offset within the region
     * @param length bytes
     */
    record PeerSge(int region, long offset, int length) {
        /** One protocol token. */
        String encode() {
            return region + ":" + offset + ":" + length;
        }

        static PeerSge decode(String token) {
            String[] f = token.split(":");
            return new PeerSge(Integer.parseInt(f[0]), Long.parseLong(f[1]), Integer.parseInt(f[2]));
        }
    }

    /**
     * A send-queue request for the peer to post.
     *
     * @param wrId identifier
     * @param opcode operation
     * @param flags {@link io.jccl.verbs.SendFlag} bits
     * @param remoteAddress remote address of one-sided operations
     * @param rkey remote key of one-sided operations
     * @param immediateData immediate data
     * @param compareAdd compare value or addend of atomics
     * @param swap swap value of compare-and-swap
     * @param sges the local scatter/gather list (may be empty)
     */
    record PeerSend(long wrId, SendOpcode opcode, int flags, long remoteAddress, int rkey, int immediateData,
                    long compareAdd, long swap, List<PeerSge> sges) {
        /** Copies the list. */
        public PeerSend {
            sges = List.copyOf(sges);
        }

        /** A two-sided or one-sided request without atomic operands. */
        public static PeerSend of(long wrId, SendOpcode opcode, int flags, long remoteAddress, int rkey,
                                  List<PeerSge> sges) {
            return new PeerSend(wrId, opcode, flags, remoteAddress, rkey, 0, 0, 0, sges);
        }
    }

    /**
     * Queue-pair creation attributes (the fields of {@link io.jccl.verbs.QueuePairInitAttributes} other than the
     * completion queues, which the peer supplies).
     *
     * @param maxSend send-queue depth
     * @param maxReceive receive-queue depth
     * @param maxSendSge scatter/gather entries per send
     * @param maxReceiveSge scatter/gather entries per receive
     * @param maxInline inline limit
     * @param signalAll sq_sig_all
     */
    record QueuePairSpec(int maxSend, int maxReceive, int maxSendSge, int maxReceiveSge, int maxInline,
                         boolean signalAll) {
        /** 64 sends, 64 receives, 4 sges each, {@code maxInline} inline bytes, sq_sig_all off. */
        public static QueuePairSpec defaults(int maxInline) {
            return new QueuePairSpec(64, 64, 4, 4, maxInline, false);
        }

        /** A copy with other depths. */
        public QueuePairSpec withDepths(int send, int receive) {
            return new QueuePairSpec(send, receive, maxSendSge, maxReceiveSge, maxInline, signalAll);
        }

        /** A copy with sq_sig_all set. */
        public QueuePairSpec withSignalAll(boolean all) {
            return new QueuePairSpec(maxSend, maxReceive, maxSendSge, maxReceiveSge, maxInline, all);
        }

        String encode() {
            return maxSend + ":" + maxReceive + ":" + maxSendSge + ":" + maxReceiveSge + ":" + maxInline + ":"
                + signalAll;
        }

        static QueuePairSpec decode(String token) {
            String[] f = token.split(":");
            return new QueuePairSpec(Integer.parseInt(f[0]), Integer.parseInt(f[1]), Integer.parseInt(f[2]),
                Integer.parseInt(f[3]), Integer.parseInt(f[4]), Boolean.parseBoolean(f[5]));
        }
    }

    /**
     * How a queue pair is connected: the attributes of INIT/RTR/RTS that tests vary.
     *
     * @param accessFlags qp_access_flags: which incoming one-sided operations the QP accepts
     * @param minRnrTimer min_rnr_timer code this QP (as responder) asks requesters to wait
     * @param rnrRetry rnr_retry of this QP as requester (7 = infinite)
     * @param retryCount retry_cnt
     * @param timeout local ACK timeout code
     */
    record ConnectionSpec(int accessFlags, int minRnrTimer, int rnrRetry, int retryCount, int timeout) {
        /** All remote rights, RNR timer code 1 (10 µs), infinite RNR retry, 7 retries, timeout 14. */
        public static ConnectionSpec defaults() {
            return new ConnectionSpec(
                AccessFlag.toMask(AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ, AccessFlag.REMOTE_ATOMIC),
                1, 7, 7, 14);
        }

        /** A copy with other qp_access_flags. */
        public ConnectionSpec withAccessFlags(int mask) {
            return new ConnectionSpec(mask, minRnrTimer, rnrRetry, retryCount, timeout);
        }

        /** A copy with other RNR settings. */
        public ConnectionSpec withRnr(int timerCode, int retries) {
            return new ConnectionSpec(accessFlags, timerCode, retries, retryCount, timeout);
        }

        /** A copy with other transport-retry settings. */
        public ConnectionSpec withRetry(int retries, int timeoutCode) {
            return new ConnectionSpec(accessFlags, minRnrTimer, rnrRetry, retries, timeoutCode);
        }

        String encode() {
            return accessFlags + ":" + minRnrTimer + ":" + rnrRetry + ":" + retryCount + ":" + timeout;
        }

        static ConnectionSpec decode(String token) {
            String[] f = token.split(":");
            return new ConnectionSpec(Integer.parseInt(f[0]), Integer.parseInt(f[1]), Integer.parseInt(f[2]),
                Integer.parseInt(f[3]), Integer.parseInt(f[4]));
        }
    }
}
