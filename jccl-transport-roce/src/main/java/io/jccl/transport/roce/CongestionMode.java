package io.jccl.transport.roce;

import java.util.Locale;

/** Which rate controller paces a queue pair's requests ({@code JCCL_ROCE_CC}). */
enum CongestionMode {
    /** DCQCN's reaction point ({@link DcqcnRateController}), cut by CNPs: what RoCE NICs run. */
    DCQCN,
    /** A delay-based controller ({@link DelayRateController}, Swift/TIMELY style): RTT of AckReq packets. */
    DELAY,
    /** No pacing: requests leave as fast as the window allows; CNPs are counted in rp_cnp_ignored. */
    NONE;

    /** Parses a setting value (case-insensitive). */
    static CongestionMode parse(String text) {
        try {
            return valueOf(text.trim().toUpperCase(Locale.ROOT));
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException(RoceCongestionSettings.CC_ENV + "=" + text
                + ": use dcqcn, delay or none", e);
        }
    }
}
