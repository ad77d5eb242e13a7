package io.jccl.transport.roce;

/**
 * Paces one queue pair's packets at its {@link RateController}'s rate: a token bucket of bytes, filled at the rate
 * and holding at most {@link #BURST_NS} of it (at least two full packets). A packet may leave when the bucket is
 * not empty, and may take it below zero (so a packet larger than the bucket still leaves); otherwise the caller
 * learns how long to wait. The send path asks before every request packet; the queue pair's lock guards it.
 */
final class TokenBucketPacer {
    /** The bucket holds this much time at the current rate: the timer thread wakes about this late. */
    static final long BURST_NS = 200_000;
    /** Smallest bucket: two packets of the largest MTU with headers. */
    static final double MIN_BURST_BYTES = 2 * (4096 + 64);

    private final RateController controller;
    private double tokens;
    private long lastNs;

    /** A pacer with a full bucket at {@code nowNs}. */
    TokenBucketPacer(RateController controller, long nowNs) {
        this.controller = controller;
        this.lastNs = nowNs;
        this.tokens = burstBytes(controller.rateBitsPerSecond());
    }

    private static double burstBytes(double rateBps) {
        return Math.max(MIN_BURST_BYTES, rateBps / 8 * BURST_NS / 1e9);
    }

    /**
     * Asks to send a packet of {@code bytes} at {@code nowNs}.
     *
     * @return 0 when it may leave now (its bytes are taken from the bucket and counted by the controller), else
     *     how many ns to wait before asking again
     */
    long delayNs(long nowNs, int bytes) {
        controller.advance(nowNs);
        double bytesPerNs = controller.rateBitsPerSecond() / 8e9;
        long elapsed = nowNs - lastNs;
        if (elapsed > 0) {
            tokens = Math.min(burstBytes(controller.rateBitsPerSecond()), tokens + elapsed * bytesPerNs);
            lastNs = nowNs;
        }
        if (tokens >= 0) {
            tokens -= bytes;
            controller.onSent(bytes, nowNs);
            return 0;
        }
        return Math.max(1, (long) Math.ceil(-tokens / bytesPerNs));
    }

    /** A CNP arrived: the controller reacts (true) or ignores it. */
    boolean onCnp(long nowNs) {
        return controller.onCnp(nowNs);
    }

    /** The controller that sets the rate. */
    RateController controller() {
        return controller;
    }
}
