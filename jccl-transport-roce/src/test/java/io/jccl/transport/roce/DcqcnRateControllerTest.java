package io.jccl.transport.roce;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * DCQCN's reaction point against sequences computed by hand from the paper's equations (Zhu et al., SIGCOMM 2015,
 * section 3.1) with NVIDIA's defaults: g = 1019/1024, increase timer 300 µs, R_AI 5 Mb/s, R_HAI 50 Mb/s at
 * 100 Gb/s, K = 55 µs, F = 5, B = 2 ms at line rate. Times are made up: the controller takes them as arguments.
 */
class DcqcnRateControllerTest {
    private static final double LINK = 100e9; // 100 Gb/s in bit/s
    private static final double G = 1019.0 / 1024;
    private static final long US = 1000;

    private static void assertRate(double expected, double actual) {
        assertEquals(expected, actual, Math.abs(expected) * 1e-12 + 1e-6);
    }

    @Test
    void shouldStartAtLineRateAndStayThereWithoutCnps() {
        DcqcnRateController rc = new DcqcnRateController(100_000, 0);
        rc.advance(10_000 * US);
        rc.onSent(100_000_000, 10_000 * US);
        assertRate(LINK, rc.rateBitsPerSecond());
        assertFalse(rc.recovering());
        assertTrue(rc.atLineRate(), "the send path skips the pacer");
        assertEquals(1.0, rc.alpha()); // no timers run at line rate: the first CNP sees the initial alpha
    }

    @Test
    void shouldCutOnCnpThenRecoverFastThenAddAdditively() {
        DcqcnRateController rc = new DcqcnRateController(100_000, 0);
        // CNP at t = 0: Rt = Rc = 100 G; Rc = 100 G · (1 − 1/2) = 50 G; α = g·1 + (1 − g) = 1
        assertTrue(rc.onCnp(0));
        assertFalse(rc.atLineRate());
        assertRate(50e9, rc.rateBitsPerSecond());
        assertRate(100e9, rc.targetBitsPerSecond());
        assertEquals(1.0, rc.alpha(), 1e-15);
        // four increase timer events (300, 600, 900, 1200 µs): fast recovery Rc = (Rt + Rc) / 2
        double[] fastRecovery = {75e9, 87.5e9, 93.75e9, 96.875e9};
        for (int i = 0; i < 4; i++) {
            rc.advance((i + 1) * 300 * US);
            assertRate(fastRecovery[i], rc.rateBitsPerSecond());
            assertEquals(i + 1, rc.timerStage());
        }
        // α decayed on the alpha timer alone: 1200 µs = 21 whole periods of 55 µs
        assertEquals(Math.pow(G, 21), rc.alpha(), 1e-12);
        // a time between events changes nothing
        rc.advance(1499 * US);
        assertRate(96.875e9, rc.rateBitsPerSecond());
        // fifth event: T = F, additive increase; Rt = min(link, 100 G + 5 M) = link; Rc = (100 + 96.875) / 2 G
        rc.advance(1500 * US);
        assertRate(100e9, rc.targetBitsPerSecond());
        assertRate(98.4375e9, rc.rateBitsPerSecond());
    }

    @Test
    void shouldCutBySmallerAlphaAfterQuietPeriodsAndRaiseTheTargetAdditivelyAndHyper() {
        DcqcnRateController rc = new DcqcnRateController(100_000, 0);
        rc.onCnp(0); // Rc 50 G, Rt 100 G, α 1
        // second CNP at 100 µs: one alpha period passed, α = g; Rt = 50 G; Rc = 50 G · (1 − g/2)
        rc.onCnp(100 * US);
        double alpha = G;
        double rc0 = 50e9 * (1 - alpha / 2);
        assertRate(50e9, rc.targetBitsPerSecond());
        assertRate(rc0, rc.rateBitsPerSecond());
        alpha = G * alpha + (1 - G);
        assertEquals(alpha, rc.alpha(), 1e-15);
        // timer events at 400..1300 µs: T = 1..4, fast recovery toward Rt = 50 G
        double target = 50e9;
        double current = rc0;
        for (int t = 1; t <= 4; t++) {
            rc.advance((100 + 300L * t) * US);
            current = (target + current) / 2;
            assertRate(current, rc.rateBitsPerSecond());
        }
        // T = 5 and T = 6 with BC = 0: additive increase, Rt + 5 Mb/s each
        for (int t = 5; t <= 6; t++) {
            rc.advance((100 + 300L * t) * US);
            target += 5e6;
            current = (target + current) / 2;
            assertRate(target, rc.targetBitsPerSecond());
            assertRate(current, rc.rateBitsPerSecond());
        }
        // the byte counter: B = 100 Gb/s · 2 ms / 8 = 25 MB. BC = 1..5 while T = 6: max ≥ F, min ≤ F: additive
        assertEquals(25_000_000L, rc.byteCounterBytes());
        long now = (100 + 300L * 6) * US;
        for (int bc = 1; bc <= 5; bc++) {
            rc.onSent(12_500_000, now);
            assertEquals(bc - 1, rc.byteStage(), "half a B is no event");
            rc.onSent(12_500_000, now);
            assertEquals(bc, rc.byteStage());
            target += 5e6;
            current = (target + current) / 2;
            assertRate(target, rc.targetBitsPerSecond());
            assertRate(current, rc.rateBitsPerSecond());
        }
        // BC = 6, T = 6: min(T, BC) = 6 > F, hyper increase by i = 6 − 5 = 1 times 50 Mb/s
        rc.onSent(25_000_000, now);
        target += 50e6;
        current = (target + current) / 2;
        assertRate(target, rc.targetBitsPerSecond());
        assertRate(current, rc.rateBitsPerSecond());
        // T = 7 (timer at 2200 µs), BC = 6: i = 1 again; then BC = 7: i = 2
        rc.advance(2200 * US);
        target += 50e6;
        current = (target + current) / 2;
        assertRate(current, rc.rateBitsPerSecond());
        rc.onSent(25_000_000, 2200 * US);
        target += 2 * 50e6;
        current = (target + current) / 2;
        assertRate(target, rc.targetBitsPerSecond());
        assertRate(current, rc.rateBitsPerSecond());
        // a CNP resets the stages and cuts from the current rate
        double before = rc.rateBitsPerSecond();
        rc.advance(2210 * US);
        double a = rc.alpha();
        rc.onCnp(2210 * US);
        assertEquals(0, rc.timerStage());
        assertEquals(0, rc.byteStage());
        assertRate(before, rc.targetBitsPerSecond());
        assertRate(before * (1 - a / 2), rc.rateBitsPerSecond());
    }

    @Test
    void shouldScaleTheIncreaseStepsToTheLink() {
        // a 1 Gb/s link: R_AI = 5 Mb/s · 1/100 = 50 kb/s, B = 1 Gb/s · 2 ms / 8 = 250 kB
        DcqcnRateController rc = new DcqcnRateController(1000, 0);
        assertEquals(250_000L, rc.byteCounterBytes());
        rc.onCnp(0);
        rc.onCnp(0); // α still 1 (no period passed): 500 M → Rt 500 M, Rc 250 M
        assertRate(250e6, rc.rateBitsPerSecond());
        double target = 500e6;
        double current = 250e6;
        for (int t = 1; t <= 5; t++) {
            rc.advance(300L * t * US);
            if (t == 5) {
                target += 50e3;
            }
            current = (target + current) / 2;
        }
        assertRate(target, rc.targetBitsPerSecond());
        assertRate(current, rc.rateBitsPerSecond());
    }

    @Test
    void shouldNeverGoBelowTheMinimumRateAndReturnToTheLinkWhenQuiet() {
        DcqcnRateController rc = new DcqcnRateController(100, 0); // 100 Mb/s
        for (int i = 0; i < 40; i++) {
            rc.onCnp(i * US);
        }
        assertRate(1e6, rc.rateBitsPerSecond()); // rpg_min_rate 1 Mb/s
        // quiet: timer events only (additive steps of 5 kb/s at this link) bring it back, and then it rests
        rc.advance(60_000_000 * US);
        assertRate(100e6, rc.rateBitsPerSecond());
        assertFalse(rc.recovering());
        assertEquals(1.0, rc.alpha(), "a fresh start for the next congestion");
    }
}
