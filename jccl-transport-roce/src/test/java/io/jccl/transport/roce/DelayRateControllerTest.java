package io.jccl.transport.roce;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

/** The delay-based controller against hand-computed Swift steps (β = 0.8, max_mdf = 0.5, AI 1% of the link). */
class DelayRateControllerTest {
    private static final long US = 1000;

    @Test
    void shouldIncreaseBelowTargetAndCutByTheExcessDelayAtMostOncePerRtt() {
        DelayRateController rc = new DelayRateController(1000, 100 * US); // 1 Gb/s, target 100 µs
        assertEquals(1e9, rc.rateBitsPerSecond());
        // RTT 300 µs: factor max(1 − 0.8 · 200/300, 0.5) = 0.5
        rc.onAckRequested(10, 0);
        rc.onAcknowledged(9, 250 * US); // not yet its PSN: no sample
        assertEquals(0, rc.lastRttNs());
        rc.onAckRequested(11, 260 * US); // a sample is in flight already: ignored
        rc.onAcknowledged(11, 300 * US);
        assertEquals(300 * US, rc.lastRttNs());
        assertEquals(0.5e9, rc.rateBitsPerSecond(), 1e-3);
        // RTT 200 µs only 100 µs later: within one RTT of the last cut, no second cut
        rc.onRtt(200 * US, 400 * US);
        assertEquals(0.5e9, rc.rateBitsPerSecond(), 1e-3);
        // RTT 150 µs at 700 µs (400 µs after the cut): factor 1 − 0.8 · 50/150
        rc.onRtt(150 * US, 700 * US);
        double rate = 0.5e9 * (1 - 0.8 * 50.0 / 150);
        assertEquals(rate, rc.rateBitsPerSecond(), 1e-3);
        // below target: + 10 Mb/s per sample, capped at the link
        rc.onRtt(50 * US, 800 * US);
        assertEquals(rate + 10e6, rc.rateBitsPerSecond(), 1e-3);
        for (int i = 0; i < 200; i++) {
            rc.onRtt(50 * US, (900 + i) * US);
        }
        assertEquals(1e9, rc.rateBitsPerSecond(), 1e-3);
        assertFalse(rc.onCnp(0), "CNPs are not its signal");
    }

    @Test
    void shouldDropTheSampleOnRetransmit() {
        DelayRateController rc = new DelayRateController(1000, 100 * US);
        rc.onAckRequested(5, 0);
        rc.onRetransmit();
        rc.onAcknowledged(5, 900 * US); // the ACK may answer the resent packet: no sample
        assertEquals(0, rc.lastRttNs());
        assertEquals(1e9, rc.rateBitsPerSecond());
    }
}
