package io.jccl.transport.roce;

/**
 * The sending rate of one queue pair, moved by congestion signals. Every method takes the time from the caller
 * ({@code System.nanoTime()} in the queue pair, a made-up clock in tests), so that the state machines are pure
 * functions of their inputs. Called under the queue pair's lock; never allocates.
 */
interface RateController {
    /** Runs the controller's timers up to {@code nowNs} (they are evaluated when asked, not by a thread). */
    void advance(long nowNs);

    /**
     * Whether the rate is the link's and nothing but a congestion signal changes that: the send path then skips
     * the pacer (and its clock read) altogether.
     */
    boolean atLineRate();

    /** The current sending rate in bits per second, as of the last {@link #advance}. */
    double rateBitsPerSecond();

    /** {@code bytes} of one packet left at {@code nowNs}. */
    void onSent(int bytes, long nowNs);

    /**
     * A congestion notification packet arrived.
     *
     * @return whether this controller reacted to it (rp_cnp_handled), else it is counted in rp_cnp_ignored
     */
    boolean onCnp(long nowNs);

    /** A request with AckReq set and PSN {@code psn} left at {@code nowNs}. */
    void onAckRequested(int psn, long nowNs);

    /** The peer acknowledged every PSN up to {@code psn}, seen at {@code nowNs}. */
    void onAcknowledged(int psn, long nowNs);

    /** The send queue went back N: an RTT measured over a resent packet would be wrong (Karn). */
    void onRetransmit();
}
