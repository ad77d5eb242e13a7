package io.jccl.transport.roce;

import io.jccl.transport.roce.wire.Psn;

/**
 * A delay-based rate controller in the style of Swift (Kumar et al., SIGCOMM 2020) and TIMELY (Mittal et al.,
 * SIGCOMM 2015), for paths without ECN: the round-trip time of a request with AckReq, measured to the
 * acknowledgement that covers its PSN, is compared with a target delay.
 *
 * <pre>
 * rtt &lt; target:  R = min(link, R + AI)                                     AI = 1% of the link per sample
 * rtt ≥ target:  R = max(Rmin, R · max(1 − β·(rtt − target)/rtt, 1 − maxMdf)) at most once per rtt;
 *                β = 0.8, maxMdf = 0.5 (Swift's defaults)
 * </pre>
 *
 * <p>One sample is in flight at a time (the next AckReq after the previous one was answered); a go-back-N drops it,
 * since the acknowledgement may answer the resent packet (Karn's rule). CNPs are ignored (rp_cnp_ignored).
 */
final class DelayRateController implements RateController {
    /** Additive increase per sample below the target, as a fraction of the link rate. */
    static final double AI_FRACTION = 0.01;
    /** Swift's β: how hard a delay above the target cuts. */
    static final double BETA = 0.8;
    /** Swift's max_mdf: the largest cut at once. */
    static final double MAX_DECREASE = 0.5;
    /** Lowest rate as a fraction of the link. */
    static final double MIN_FRACTION = 0.001;

    private final double linkBps;
    private final double minBps;
    private final double additiveBps;
    private final long targetDelayNs;
    private double currentBps;
    private boolean sampling;
    private int samplePsn;
    private long sampleSentNs;
    private long lastDecreaseNs;
    private boolean decreased;
    /** Volatile: tools and tests read it from other threads. */
    private volatile long lastRttNs;

    /** A controller for a link of {@code linkMbps} aiming at round trips of {@code targetDelayNs}. */
    DelayRateController(double linkMbps, long targetDelayNs) {
        this.linkBps = linkMbps * 1e6;
        this.minBps = linkBps * MIN_FRACTION;
        this.additiveBps = linkBps * AI_FRACTION;
        this.targetDelayNs = targetDelayNs;
        this.currentBps = linkBps;
    }

    @Override
    public void advance(long nowNs) {
        // no timers: the rate moves on RTT samples only
    }

    @Override
    public boolean atLineRate() {
        return currentBps >= linkBps;
    }

    @Override
    public double rateBitsPerSecond() {
        return currentBps;
    }

    @Override
    public void onSent(int bytes, long nowNs) {
        // the rate moves on RTT samples only
    }

    @Override
    public boolean onCnp(long nowNs) {
        return false;
    }

    @Override
    public void onAckRequested(int psn, long nowNs) {
        if (!sampling) {
            sampling = true;
            samplePsn = psn;
            sampleSentNs = nowNs;
        }
    }

    @Override
    public void onAcknowledged(int psn, long nowNs) {
        if (sampling && Psn.compare(psn, samplePsn) >= 0) {
            sampling = false;
            onRtt(nowNs - sampleSentNs, nowNs);
        }
    }

    @Override
    public void onRetransmit() {
        sampling = false;
    }

    /** One round-trip sample of {@code rttNs} taken at {@code nowNs}. */
    void onRtt(long rttNs, long nowNs) {
        lastRttNs = rttNs;
        if (rttNs < targetDelayNs) {
            currentBps = Math.min(linkBps, currentBps + additiveBps);
            return;
        }
        if (decreased && nowNs - lastDecreaseNs < rttNs) {
            return; // at most one decrease per round trip
        }
        double factor = Math.max(1 - BETA * (rttNs - targetDelayNs) / rttNs, 1 - MAX_DECREASE);
        currentBps = Math.max(minBps, currentBps * factor);
        lastDecreaseNs = nowNs;
        decreased = true;
    }

    /** The last round-trip sample in ns, 0 before the first. */
    long lastRttNs() {
        return lastRttNs;
    }
}
