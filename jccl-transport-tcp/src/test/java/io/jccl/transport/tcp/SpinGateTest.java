package io.jccl.transport.tcp;

import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

import java.nio.file.Files;
import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

class SpinGateTest {
    private static final long LOOK_NS = 250_000_000L;

    /** Looks every 250 ms for {@code seconds}, the thread runnable {@code share} of the time; the last verdict. */
    private static boolean lookFor(SpinGate gate, double seconds, double share, double loadAverage) {
        boolean verdict = true;
        long now = 1_000_000_000L;
        long runnable = 0;
        for (int look = 0; look < seconds * 4; look++) {
            verdict = gate.look(now, loadAverage, runnable);
            now += LOOK_NS;
            runnable += (long) (share * LOOK_NS);
        }
        return verdict;
    }

    @Test
    void shouldKeepSpinningWhenTheLoadAboveTheCoresIsItsOwnSpin() {
        // Two cores: a polling client (1) and this spinning thread (1) make a load of 2.3 after a minute or two. The
        // plain test (2.3 >= 2) stopped the spin here; less its own share the machine has a core for it.
        SpinGate gate = new SpinGate(2);
        assertTrue(lookFor(gate, 120, 1.0, 2.3), "own share " + gate.ownLoad());
        assertTrue(gate.ownLoad() > 0.8 && gate.ownLoad() <= 1.0, "own share " + gate.ownLoad());
    }

    @Test
    void shouldStopSpinningOnAnOversubscribedMachineEvenWhileItSpins() {
        SpinGate gate = new SpinGate(2);
        assertFalse(lookFor(gate, 120, 1.0, 4.0), "four runnable on two cores, one of them this thread");
        assertFalse(lookFor(new SpinGate(2), 120, 0.1, 2.3), "this thread mostly blocked: the 2.3 is others'");
    }

    @Test
    void shouldJudgeAsThePlainTestBeforeItHasSpunAndWhereTheKernelDoesNotSay() {
        assertFalse(new SpinGate(2).look(1_000_000_000L, 2.3, 0), "no history: load 2.3 on two cores");
        assertTrue(new SpinGate(2).look(1_000_000_000L, 1.7, 0));
        SpinGate blind = new SpinGate(2);
        long now = 1_000_000_000L;
        for (int look = 0; look < 480; look++, now += LOOK_NS) {
            assertFalse(blind.look(now, 2.3, -1), "no schedstat: the plain test, look " + look);
        }
    }

    @Test
    void shouldFollowTheOwnShareWithTheKernelsOneMinuteDecay() {
        SpinGate gate = new SpinGate(2);
        lookFor(gate, 60, 1.0, 0.0);
        // 1 - e^-1 of the way after one time constant (within the first look's missing interval)
        assertTrue(Math.abs(gate.ownLoad() - (1 - Math.exp(-1))) < 0.02, "own share " + gate.ownLoad());
    }

    @Test
    void shouldSpinOnlyWhileSpinsCatchWorkAndProbeNowAndThen() {
        SpinGate gate = new SpinGate(2);
        for (int period = 0; period < 100; period++) {
            assertTrue(gate.spinsThisPeriod(true), "requests within the spin: period " + period);
            gate.periodEnded(true);
        }
        int spinning = 0;
        for (int period = 0; period < 12; period++) {
            if (gate.spinsThisPeriod(true)) {
                spinning++;
            }
            gate.periodEnded(false); // the next request came after the spin had ended
        }
        assertTrue(spinning >= 8 && spinning <= 12, spinning + " of 12 periods spun while the hit rate fell");
        int probes = 0;
        for (int period = 0; period < 800; period++) {
            if (gate.spinsThisPeriod(true)) {
                probes++;
            }
            gate.periodEnded(false);
        }
        assertTrue(probes == 800 / SpinGate.PROBE_EVERY, probes + " of 800 periods spun with every spin missing");
        // Requests come quickly again: the probes catch them, and within three probes every period spins.
        int periods = 0;
        int inARow = 0;
        while (inARow < 8) {
            assertTrue(++periods <= 3 * SpinGate.PROBE_EVERY + 8, "still not spinning after " + periods + " periods");
            inARow = gate.spinsThisPeriod(true) ? inARow + 1 : 0;
            gate.periodEnded(true);
        }
        assertFalse(gate.spinsThisPeriod(false), "the load forbids it");
    }

    @Test
    void shouldReadThisThreadsSchedulerStatistics() throws Exception {
        Assumptions.assumeTrue(Files.isReadable(Path.of("/proc/thread-self/schedstat")), "no schedstat here");
        long before = SpinGate.runnableNs();
        long until = System.nanoTime() + 20_000_000L;
        while (System.nanoTime() < until) {
            Thread.onSpinWait(); // 20 ms on a core or waiting for one
        }
        long after = SpinGate.runnableNs();
        assertTrue(before >= 0 && after - before >= 15_000_000L, before + " -> " + after);
    }
}
