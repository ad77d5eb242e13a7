package io.jccl.tools.perftest;

import io.jccl.tools.Main;
import io.jccl.verbs.Device;
import io.jccl.verbs.Verbs;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/** End-to-end: {@code jccl perf … --local} over the shm provider, server in a second JVM. */
class PerfSystemTest {
    @BeforeAll
    static void needsShm() {
        assumeTrue(Verbs.devices().stream().map(Device::name).anyMatch("shm0"::equals), "no shm0 device");
    }

    private static List<String> run(String... args) {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        PrintStream saved = System.out;
        int status;
        try (PrintStream capture = new PrintStream(bytes, true, StandardCharsets.UTF_8)) {
            System.setOut(capture);
            status = Main.run(args);
        } finally {
            System.setOut(saved);
        }
        String text = bytes.toString(StandardCharsets.UTF_8);
        System.out.print(text);
        assertEquals(0, status, text);
        return text.lines().toList();
    }

    private static List<Double> rowAfter(List<String> lines, String headerStart) {
        for (int i = 0; i < lines.size() - 1; i++) {
            if (lines.get(i).startsWith(headerStart)) {
                return PerfReportTest.words(lines.get(i + 1)).stream().map(Double::parseDouble).toList();
            }
        }
        throw new AssertionError("no table with header '" + headerStart + "' in " + lines);
    }

    @Test
    void shouldReportWriteBandwidth(@TempDir Path dir) throws Exception {
        Path json = dir.resolve("write_bw.json");
        List<String> lines = run("perf", "write_bw", "--local", "-d", "shm0", "-s", "65536", "-n", "200", "--json",
            json.toString());
        assertTrue(lines.contains("                    RDMA_Write BW Test"), lines.toString());
        assertTrue(lines.stream().anyMatch(l -> l.startsWith(" local address: LID 0000 QPN 0x")));
        assertTrue(lines.stream().anyMatch(l -> l.startsWith(" remote address: LID 0000 QPN 0x")));
        List<Double> row = rowAfter(lines, PerfReport.BW_HEADER);
        assertEquals(5, row.size());
        assertEquals(65536, row.get(0));
        assertEquals(200, row.get(1));
        assertTrue(row.get(3) > 1, "average MiB/s " + row.get(3));
        assertTrue(row.get(2) >= row.get(3) * 0.999, "peak below average: " + row);
        assertTrue(row.get(4) > 0);
        String text = Files.readString(json);
        for (String key : List.of("\"MsgSize\": 65536", "\"n_iterations\": 200", "\"BW_peak\"", "\"BW_average\"",
            "\"MsgRate\"", "\"test\": \"ib_write_bw\"")) {
            assertTrue(text.contains(key), key + " missing in " + text);
        }
    }

    @Test
    void shouldReportSendLatency() {
        List<String> lines = run("perf", "send_lat", "--local", "-d", "shm0", "-n", "500");
        assertTrue(lines.contains("                    Send Latency Test"), lines.toString());
        List<Double> row = rowAfter(lines, " #bytes #iterations    t_min[usec]");
        assertEquals(9, row.size());
        assertEquals(2, row.get(0));
        assertEquals(500, row.get(1));
        double min = row.get(2);
        double max = row.get(3);
        double typical = row.get(4);
        assertTrue(min > 0 && min <= typical && typical <= max, row.toString());
        assertTrue(row.get(7) <= row.get(8) + 1e-9, "p99 above p99.9: " + row);
    }

    @Test
    void shouldRunReadAndAtomicLatencyAndSendBandwidth() {
        assertEquals(9, rowAfter(run("perf", "read_lat", "--local", "-n", "200", "-s", "64"),
            " #bytes #iterations    t_min[usec]").size());
        List<Double> atomic = rowAfter(run("perf", "atomic_bw", "--local", "-n", "300"), PerfReport.BW_HEADER);
        assertEquals(8, atomic.get(0));
        List<Double> send = rowAfter(run("perf", "send_bw", "--local", "-n", "300", "-s", "4096", "-q", "2"),
            PerfReport.BW_HEADER);
        assertEquals(600, send.get(1), "iterations count every QP");
    }

    @Test
    @Timeout(value = 60, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
    void durationEndsWhenNothingIsOutstandingAtTheDeadline() {
        // A TX depth equal to the CQ moderation completes whole batches: the deadline is usually first seen with
        // every request reaped, and the loop used to wait for a completion that could never come.
        for (String tx : new String[] {"1", "8"}) {
            List<Double> bw = rowAfter(run("perf", "write_bw", "--local", "-d", "shm0", "-D", "1", "-s", "65536",
                "-t", tx, "-Q", tx), PerfReport.BW_HEADER);
            assertTrue(bw.get(1) > 0 && bw.get(3) > 0, "tx " + tx + ": " + bw);
        }
    }

    @Test
    void shouldRunForADurationAndStopBothSides() {
        List<Double> bw = rowAfter(run("perf", "send_bw", "--local", "-D", "1", "-s", "4096"), PerfReport.BW_HEADER);
        assertEquals(0.0, bw.get(2), "perftest reports no peak in duration mode");
        assertTrue(bw.get(1) > 0 && bw.get(3) > 0, bw.toString());
        List<Double> lat = rowAfter(run("perf", "write_lat", "--local", "-D", "1"),
            PerfReport.LAT_DURATION_HEADER);
        assertEquals(4, lat.size(), "duration form: #bytes #iterations t_avg tps");
        assertTrue(lat.get(1) > 0 && lat.get(2) > 0 && lat.get(3) > 0, lat.toString());
    }
}
