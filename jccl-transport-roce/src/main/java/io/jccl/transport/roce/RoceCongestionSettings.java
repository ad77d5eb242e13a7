package io.jccl.transport.roce;

import io.jccl.common.Config;

/**
 * Congestion control settings of a roce context, read from the environment by {@link #fromConfig()}.
 *
 * @param mode which controller paces requests ({@code JCCL_ROCE_CC}: dcqcn, delay or none; default dcqcn)
 * @param linkMbps the link rate in Mb/s that a first cut starts from and recovery returns to (at it nothing is
 *     paced: the link itself is the limit), and that DCQCN's increase steps are scaled to
 *     ({@code JCCL_ROCE_LINK_MBPS}, default 100000)
 * @param cnpIntervalNs the notification point sends at most one CNP per queue pair per this interval
 *     ({@code JCCL_ROCE_CNP_INTERVAL_US}, default 50 µs, DCQCN's N)
 * @param targetDelayNs the delay controller's target round-trip time ({@code JCCL_ROCE_CC_TARGET_DELAY_US}, default
 *     1000 µs: a JVM peer on a shared host answers in hundreds of µs)
 */
record RoceCongestionSettings(CongestionMode mode, long linkMbps, long cnpIntervalNs, long targetDelayNs) {
    /** Variable that sets {@link #mode()}. */
    static final String CC_ENV = "JCCL_ROCE_CC";
    /** Variable that sets {@link #linkMbps()}. */
    static final String LINK_MBPS_ENV = "JCCL_ROCE_LINK_MBPS";
    /** Variable that sets {@link #cnpIntervalNs()}, in µs. */
    static final String CNP_INTERVAL_ENV = "JCCL_ROCE_CNP_INTERVAL_US";
    /** Variable that sets {@link #targetDelayNs()}, in µs. */
    static final String TARGET_DELAY_ENV = "JCCL_ROCE_CC_TARGET_DELAY_US";
    /** Default {@link #linkMbps()}: a 100 Gb/s port, the rate NVIDIA's DCQCN defaults are set for. */
    static final long DEFAULT_LINK_MBPS = 100_000;
    /** Default CNP interval in µs (the DCQCN paper's N). */
    static final long DEFAULT_CNP_INTERVAL_US = 50;
    /** Default target delay in µs. */
    static final long DEFAULT_TARGET_DELAY_US = 1000;
    /** Longest interval or delay setting, in µs (an hour: "once"). */
    static final long MAX_MICROS = 3_600_000_000L;
    /** The defaults: DCQCN at 100 Gb/s. */
    static final RoceCongestionSettings DEFAULT = new RoceCongestionSettings(CongestionMode.DCQCN, DEFAULT_LINK_MBPS,
        DEFAULT_CNP_INTERVAL_US * 1000, DEFAULT_TARGET_DELAY_US * 1000);

    /** Validates the values. */
    RoceCongestionSettings {
        if (mode == null) {
            throw new IllegalArgumentException(CC_ENV + ": no mode");
        }
        if (linkMbps < 1 || linkMbps > 10_000_000) {
            throw new IllegalArgumentException(LINK_MBPS_ENV + "=" + linkMbps + " outside 1..10000000");
        }
        if (cnpIntervalNs < 0 || cnpIntervalNs > MAX_MICROS * 1000) {
            throw new IllegalArgumentException(CNP_INTERVAL_ENV + "=" + cnpIntervalNs / 1000 + " outside 0.."
                + MAX_MICROS);
        }
        if (targetDelayNs < 1000 || targetDelayNs > MAX_MICROS * 1000) {
            throw new IllegalArgumentException(TARGET_DELAY_ENV + "=" + targetDelayNs / 1000 + " outside 1.."
                + MAX_MICROS);
        }
    }

    /** The settings from the environment (system properties first). */
    static RoceCongestionSettings fromConfig() {
        return new RoceCongestionSettings(CongestionMode.parse(Config.value(CC_ENV, "dcqcn")),
            Config.longValue(LINK_MBPS_ENV, DEFAULT_LINK_MBPS),
            microsToNanos(CNP_INTERVAL_ENV, Config.longValue(CNP_INTERVAL_ENV, DEFAULT_CNP_INTERVAL_US)),
            microsToNanos(TARGET_DELAY_ENV, Config.longValue(TARGET_DELAY_ENV, DEFAULT_TARGET_DELAY_US)));
    }

    private static long microsToNanos(String env, long micros) {
        if (micros < 0 || micros > MAX_MICROS) {
            throw new IllegalArgumentException(env + "=" + micros + " outside 0.." + MAX_MICROS);
        }
        return micros * 1000;
    }

    /** These settings with another mode. */
    RoceCongestionSettings withMode(CongestionMode newMode) {
        return new RoceCongestionSettings(newMode, linkMbps, cnpIntervalNs, targetDelayNs);
    }

    /** These settings with another link rate. */
    RoceCongestionSettings withLinkMbps(long newLinkMbps) {
        return new RoceCongestionSettings(mode, newLinkMbps, cnpIntervalNs, targetDelayNs);
    }

    /** A pacer for one queue pair, or null when {@link #mode()} is {@link CongestionMode#NONE}. */
    TokenBucketPacer newPacer(long nowNs) {
        return switch (mode) {
            case DCQCN -> new TokenBucketPacer(new DcqcnRateController(linkMbps, nowNs), nowNs);
            case DELAY -> new TokenBucketPacer(new DelayRateController(linkMbps, targetDelayNs), nowNs);
            case NONE -> null;
        };
    }
}
