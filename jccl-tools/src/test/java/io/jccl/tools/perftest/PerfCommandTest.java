package io.jccl.tools.perftest;

import io.jccl.tools.Main;
import org.junit.jupiter.api.Test;
import picocli.CommandLine;

import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class PerfCommandTest {
    private static PerfCommand parse(String... args) {
        CommandLine cl = Main.commandLine();
        CommandLine.ParseResult result = cl.parseArgs(args);
        return result.subcommand().commandSpec().commandLine().getCommand();
    }

    @Test
    void shouldApplyPerftestDefaultsPerTest() {
        PerfPlan writeBw = parse("perf", "write_bw").plan(PerfTest.WRITE_BW);
        assertEquals(List.of(65536L), writeBw.sizes());
        assertEquals(5000, writeBw.iterations());
        assertEquals(128, writeBw.txDepth());
        assertEquals(100, writeBw.cqModeration());
        assertEquals(220, writeBw.inlineSize());

        PerfPlan sendLat = parse("perf", "send_lat").plan(PerfTest.SEND_LAT);
        assertEquals(List.of(2L), sendLat.sizes());
        assertEquals(1000, sendLat.iterations());
        assertEquals(1, sendLat.txDepth());
        assertEquals(1, sendLat.cqModeration(), "cq moderation is capped by the tx depth, as perftest does");
        assertEquals(236, sendLat.inlineSize());

        PerfPlan atomic = parse("perf", "atomic_lat").plan(PerfTest.ATOMIC_LAT);
        assertEquals(List.of(8L), atomic.sizes());
        assertEquals("FETCH_AND_ADD", atomic.atomicType());
        assertEquals(0, atomic.inlineSize());
    }

    @Test
    void shouldParsePerftestFlagsAndClientHost() {
        PerfCommand c = parse("perf", "write_bw", "server.example", "-d", "shm0", "-s", "4096", "-n", "300", "-q", "2",
            "-p", "19000", "--report_gbits", "-F", "-t", "64", "-I", "0", "-c", "RC", "-x", "3", "-D", "2");
        assertEquals("server.example", c.host);
        assertEquals("shm0", c.device);
        assertEquals(19000, c.port);
        assertTrue(c.reportGbits);
        assertTrue(c.cpuFreq);
        PerfPlan plan = c.plan(PerfTest.WRITE_BW);
        assertEquals(List.of(4096L), plan.sizes());
        assertEquals(300, plan.iterations());
        assertEquals(2, plan.queuePairs());
        assertEquals(64, plan.txDepth());
        assertEquals(0, plan.inlineSize());
        assertEquals(2, plan.durationSeconds());
        assertTrue(plan.durationMode());
    }

    @Test
    void shouldParseCpuPinning() {
        PerfCommand c = parse("perf", "write_lat", "--local", "--cpus", "0,1");
        assertEquals(List.of(0, 1), c.localCpus);
        assertEquals(3, parse("perf", "write_lat", "--pin-cpu", "3").pinCpu);
    }

    @Test
    void shouldBeServerWithoutHost() {
        PerfCommand c = parse("perf", "ib_read_lat");
        assertNull(c.host);
        assertEquals(PerfTest.READ_LAT, PerfTest.of(c.testName));
        assertFalse(c.local);
        assertTrue(parse("perf", "write_bw", "--local").local);
    }

    @Test
    void shouldSweepPowersOfTwoFrom2To8MiBWithAll() {
        PerfPlan plan = parse("perf", "write_bw", "-a").plan(PerfTest.WRITE_BW);
        assertEquals(23, plan.sizes().size());
        assertEquals(2L, plan.sizes().getFirst());
        assertEquals(1L << 23, plan.sizes().getLast());
        assertTrue(plan.sweep());
        assertEquals(List.of(8L), parse("perf", "atomic_bw", "-a").plan(PerfTest.ATOMIC_BW).sizes());
    }

    @Test
    void shouldRejectWhatJcclCannotRun() {
        assertThrows(PerfException.class, () -> parse("perf", "atomic_bw", "-s", "16").plan(PerfTest.ATOMIC_BW));
        assertThrows(PerfException.class, () -> parse("perf", "write_lat", "-q", "2").plan(PerfTest.WRITE_LAT));
        assertThrows(PerfException.class, () -> parse("perf", "write_bw", "-n", "2").plan(PerfTest.WRITE_BW));
        assertThrows(IllegalArgumentException.class, () -> PerfTest.of("write_bandwidth"));
        assertEquals(1, Main.run("perf", "write_bw", "-c", "UD", "--local"));
    }

    @Test
    void shouldScaleWarmupWithMessageSize() {
        assertEquals(2000, PerfCommand.defaultWarmup(PerfTest.WRITE_BW, List.of(2L)));
        assertEquals(16, PerfCommand.defaultWarmup(PerfTest.WRITE_BW, List.of(1L << 23)));
        assertEquals(1000, PerfCommand.defaultWarmup(PerfTest.WRITE_LAT, List.of(2L)));
        assertEquals(0, parse("perf", "write_bw", "--warmup", "0").plan(PerfTest.WRITE_BW).warmupIterations());
    }

    @Test
    void shouldRoundTripThePlanOverTheWire() {
        PerfPlan plan = new PerfPlan(PerfTest.SEND_BW, List.of(2L, 4L, 8L), 77, 5, 0, 3, 64, 16, 100, "FETCH_AND_ADD");
        assertEquals(plan, PerfPlan.decode(plan.encode()));
        assertThrows(IllegalArgumentException.class, () -> PerfPlan.decode("hello"));
    }
}
