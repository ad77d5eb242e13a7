package io.jccl.transport.roce;

/**
 * DCQCN's reaction point for one queue pair (Zhu et al., "Congestion Control for Large-Scale RDMA Deployments",
 * SIGCOMM 2015, section 3.1; parameter names of NVIDIA's mlx5 firmware in brackets).
 *
 * <pre>
 * on a CNP:        Rt = Rc;  Rc = max(Rmin, Rc · (1 − α/2));  α = g·α + (1 − g);  T = BC = 0, timers restart
 * every K w/o CNP: α = g·α                                          (the alpha timer)
 * every Ti         T  = T + 1, then an increase event               (the rate increase timer [rpg_time_reset])
 * every B bytes    BC = BC + 1, then an increase event              (the byte counter [rpg_byte_reset])
 * increase event:  max(T, BC) &lt; F   fast recovery     Rc = (Rt + Rc) / 2
 *                  min(T, BC) &gt; F   hyper increase    Rt = Rt + i·R_HAI, i = min(T, BC) − F;  Rc = (Rt + Rc) / 2
 *                  otherwise         additive increase Rt = Rt + R_AI;                     Rc = (Rt + Rc) / 2
 * </pre>
 *
 * <p>Rt is capped at the link rate; once Rc reaches it the controller rests until the next CNP, which starts again
 * from α = 1 (a NIC releases the flow's rate limiter at line rate; mlx5's initial_alpha_value is 1023/1024). {@code g} is
 * NVIDIA's {@code dce_tcp_g} = 1019/1024, the weight that the old α keeps (the paper's 1 − g, 1 − 1/256 there).
 * The increase timer Ti = 300 µs, R_AI = 5 Mb/s and R_HAI = 50 Mb/s are NVIDIA's defaults for a 100 Gb/s port;
 * R_AI, R_HAI and B (the paper's 10 MB at 40 Gb/s, that is 2 ms at line rate) are scaled to the configured link
 * rate, the timers are not. K = 55 µs and F = 5 are the paper's. The timers run when {@link #advance} is called
 * (the pacer calls it before every packet), by as many whole periods as have passed.
 */
final class DcqcnRateController implements RateController {
    /** The weight the old α keeps at each update (NVIDIA's dce_tcp_g 1019 of 1024). */
    static final double G = 1019.0 / 1024;
    /** The alpha timer K (the paper's 55 µs). */
    static final long ALPHA_PERIOD_NS = 55_000;
    /** The rate increase timer (rpg_time_reset, 300 µs). */
    static final long INCREASE_PERIOD_NS = 300_000;
    /** Fast recovery steps before additive increase (the paper's F). */
    static final int FAST_RECOVERY_STEPS = 5;
    /** The link rate NVIDIA's increase steps are set for. */
    static final double REFERENCE_LINK_MBPS = 100_000;
    /** Additive increase step at the reference link (rpg_ai_rate, 5 Mb/s). */
    static final double AI_MBPS = 5;
    /** Hyper increase step at the reference link (rpg_hai_rate, 50 Mb/s). */
    static final double HAI_MBPS = 50;
    /** Lowest rate (rpg_min_rate, 1 Mb/s). */
    static final double MIN_MBPS = 1;
    /** The byte counter B as time at line rate (the paper's 10 MB at 40 Gb/s). */
    static final long BYTE_COUNTER_PERIOD_NS = 2_000_000;
    /** Most increase events one {@link #advance} runs (after a long idle the rate is long back at the link). */
    private static final int MAX_EVENTS_PER_ADVANCE = 1 << 16;

    private final double linkBps;
    private final double additiveBps;
    private final double hyperBps;
    private final double minBps;
    private final long byteCounterBytes;

    private double currentBps;
    private double targetBps;
    private double alpha = 1; // initial_alpha_value 1023/1024: the first CNP halves the rate
    private long alphaSinceNs;
    private long increaseSinceNs;
    private int timerStage;
    private int byteStage;
    private long bytesSinceStage;
    /** Whether the rate is below the link's: increase events run only then. */
    private boolean recovering;

    /** A controller for a link of {@code linkMbps}, at line rate from {@code nowNs}. */
    DcqcnRateController(double linkMbps, long nowNs) {
        this.linkBps = linkMbps * 1e6;
        double scale = linkMbps / REFERENCE_LINK_MBPS;
        this.additiveBps = AI_MBPS * 1e6 * scale;
        this.hyperBps = HAI_MBPS * 1e6 * scale;
        this.minBps = Math.min(MIN_MBPS * 1e6, linkBps);
        this.byteCounterBytes = Math.max(1, (long) (linkBps / 8 * BYTE_COUNTER_PERIOD_NS / 1e9));
        this.currentBps = linkBps;
        this.targetBps = linkBps;
        this.alphaSinceNs = nowNs;
        this.increaseSinceNs = nowNs;
    }

    @Override
    public void advance(long nowNs) {
        if (!recovering) {
            alphaSinceNs = nowNs;
            increaseSinceNs = nowNs;
            return;
        }
        long alphaPeriods = (nowNs - alphaSinceNs) / ALPHA_PERIOD_NS;
        if (alphaPeriods > 0) {
            alpha *= Math.pow(G, alphaPeriods);
            alphaSinceNs += alphaPeriods * ALPHA_PERIOD_NS;
        }
        long periods = Math.min((nowNs - increaseSinceNs) / INCREASE_PERIOD_NS, MAX_EVENTS_PER_ADVANCE);
        for (long i = 0; i < periods && recovering; i++) {
            increaseSinceNs += INCREASE_PERIOD_NS;
            timerStage++;
            increase();
        }
        if (!recovering || nowNs - increaseSinceNs >= INCREASE_PERIOD_NS) {
            increaseSinceNs = nowNs;
        }
    }

    @Override
    public boolean atLineRate() {
        return !recovering;
    }

    @Override
    public double rateBitsPerSecond() {
        return currentBps;
    }

    @Override
    public void onSent(int bytes, long nowNs) {
        if (!recovering) {
            return;
        }
        bytesSinceStage += bytes;
        while (bytesSinceStage >= byteCounterBytes && recovering) {
            bytesSinceStage -= byteCounterBytes;
            byteStage++;
            increase();
        }
    }

    @Override
    public boolean onCnp(long nowNs) {
        advance(nowNs);
        targetBps = currentBps;
        currentBps = Math.max(minBps, currentBps * (1 - alpha / 2));
        alpha = G * alpha + (1 - G);
        alphaSinceNs = nowNs;
        increaseSinceNs = nowNs;
        timerStage = 0;
        byteStage = 0;
        bytesSinceStage = 0;
        recovering = true;
        return true;
    }

    private void increase() {
        int most = Math.max(timerStage, byteStage);
        int least = Math.min(timerStage, byteStage);
        if (least > FAST_RECOVERY_STEPS) {
            targetBps += (least - FAST_RECOVERY_STEPS) * hyperBps;
        } else if (most >= FAST_RECOVERY_STEPS) {
            targetBps += additiveBps;
        } // else fast recovery: the target stays
        targetBps = Math.min(targetBps, linkBps);
        currentBps = (targetBps + currentBps) / 2;
        if (targetBps == linkBps && linkBps - currentBps < 1) {
            currentBps = linkBps; // within a bit per second: back at line rate, rest until the next CNP
            recovering = false;
            alpha = 1; // the NIC releases the flow's rate limiter: the next CNP starts from initial_alpha_value
        }
    }

    @Override
    public void onAckRequested(int psn, long nowNs) {
        // DCQCN does not measure delay
    }

    @Override
    public void onAcknowledged(int psn, long nowNs) {
        // DCQCN does not measure delay
    }

    @Override
    public void onRetransmit() {
        // DCQCN reacts to CNPs only
    }

    /** The target rate Rt in bits per second. */
    double targetBitsPerSecond() {
        return targetBps;
    }

    /** The congestion estimate α. */
    double alpha() {
        return alpha;
    }

    /** Rate increase timer events since the last CNP (T). */
    int timerStage() {
        return timerStage;
    }

    /** Byte counter events since the last CNP (BC). */
    int byteStage() {
        return byteStage;
    }

    /** The byte counter B in bytes. */
    long byteCounterBytes() {
        return byteCounterBytes;
    }

    /** Whether the rate is below the link's and increase events run. */
    boolean recovering() {
        return recovering;
    }
}
