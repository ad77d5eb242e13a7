package io.jccl.tools.perftest;

import org.HdrHistogram.Histogram;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

class PerfReportTest {
    @Test
    void shouldPrintPerftestHeadersVerbatim() {
        assertEquals(87, PerfReport.RESULT_LINE.length());
        assertEquals(List.of("#bytes", "#iterations", "BW", "peak[MiB/sec]", "BW", "average[MiB/sec]",
            "MsgRate[Mpps]"), words(PerfReport.BW_HEADER));
        assertEquals(List.of("#bytes", "#iterations", "BW", "peak[Gb/sec]", "BW", "average[Gb/sec]",
            "MsgRate[Mpps]"), words(PerfReport.header(PerfTest.SEND_BW, true, false)));
        assertEquals(List.of("#bytes", "#iterations", "t_min[usec]", "t_max[usec]", "t_typical[usec]",
            "t_avg[usec]", "t_stdev[usec]", "99%", "percentile[usec]", "99.9%", "percentile[usec]"),
            words(PerfReport.header(PerfTest.WRITE_LAT, false, false)));
        assertEquals(List.of("#bytes", "#iterations", "t_avg[usec]", "tps", "average"),
            words(PerfReport.header(PerfTest.SEND_LAT, false, true)));
    }

    @Test
    void shouldFormatRowsWithOneValuePerColumn() {
        String bw = PerfReport.row(new BandwidthResult(65536, 5000, 11034.956, 11033.71, 0.176539), false);
        assertEquals(List.of("65536", "5000", "11034.96", "11033.71", "0.176539"), words(bw));
        assertTrue(bw.startsWith(" 65536      5000 "), bw);
        Histogram h = new Histogram(1, 60_000_000_000L, 3);
        for (int i = 1; i <= 1000; i++) {
            h.recordValue(2000 + i);
        }
        LatencyResult lat = LatencyResult.fromRoundTrips(2, h, 2, 1_000_000);
        List<String> cols = words(PerfReport.row(lat, false));
        assertEquals(9, cols.size());
        assertEquals("2", cols.get(0));
        assertEquals("1000", cols.get(1));
        assertEquals(4, words(PerfReport.row(lat, true)).size());
    }

    @Test
    void shouldPrintTheBannerLabels() {
        String banner = PerfReport.banner(new PerfReport.Banner(PerfTest.WRITE_BW, "FETCH_AND_ADD", "shm0",
            "InfiniBand (0)", 1, true, 128, 512, 100, 4096, "Memory", 220, 16));
        List<String> lines = banner.lines().toList();
        assertEquals(PerfReport.RESULT_LINE, lines.getFirst());
        assertEquals("                    RDMA_Write BW Test", lines.get(1));
        assertEquals(" Dual-port       : OFF\t\tDevice         : shm0", lines.get(2));
        assertEquals(" Number of qps   : 1\t\tTransport type : IB", lines.get(3));
        assertEquals(" Connection type : RC\t\tUsing SRQ      : OFF", lines.get(4));
        assertTrue(lines.contains(" TX depth        : 128"));
        assertTrue(lines.contains(" CQ Moderation   : 100"));
        assertTrue(lines.contains(" Mtu             : 4096[B]"));
        assertTrue(lines.contains(" Link type       : Memory"));
        assertTrue(lines.contains(" Max inline data : 220[B]"));
        assertEquals(PerfReport.RESULT_LINE, lines.getLast());
        String atomic = PerfReport.banner(new PerfReport.Banner(PerfTest.ATOMIC_LAT, "FETCH_AND_ADD", "shm0",
            "shm", 1, true, 1, 512, 1, 4096, "Memory", 0, 16));
        assertTrue(atomic.contains("                    Atomic FETCH_AND_ADD Latency Test"));
        assertTrue(atomic.contains(" Outstand reads  : 16"));
        assertTrue(PerfReport.address(true, 0x1234, 0xabcdef, 0x55, 0x7f00L)
            .matches(" local address: LID 0000 QPN 0x1234 PSN 0xabcdef RKey 0x00000055 VAddr 0x0000000000007f00"));
    }

    @Test
    void shouldUsePerftestJsonKeys() {
        Map<String, Object> bw = PerfReport.json(new BandwidthResult(8, 10, 1, 2, 3), false);
        assertEquals(List.of("MsgSize", "n_iterations", "BW_peak", "BW_average", "MsgRate", "bw_unit"),
            List.copyOf(bw.keySet()));
        Map<String, Object> lat = PerfReport.json(new LatencyResult(2, 10, 1, 2, 3, 4, 5, 6, 7, 8), false);
        assertEquals(List.of("MsgSize", "n_iterations", "t_min", "t_max", "t_typical", "t_avg", "t_stdev",
            "percentile_99", "percentile_99.9"), List.copyOf(lat.keySet()));
        Map<String, Object> single = PerfReport.document(Map.of("test", "ib_write_bw"), List.of(bw), false);
        assertTrue(single.get("results") instanceof Map);
        Map<String, Object> sweep = PerfReport.document(Map.of("test", "ib_write_bw"), List.of(bw, bw), true);
        assertTrue(sweep.get("results") instanceof List);
    }

    @Test
    void shouldComputeBandwidthAsPerftest() {
        int n = 1000;
        long[] posted = new long[n];
        long[] completed = new long[n];
        for (int i = 0; i < n; i++) {
            posted[i] = i * 1000L;           // one post per microsecond
            completed[i] = (i + 1) * 1000L;  // one completion per microsecond
        }
        BandwidthResult r = BandwidthResult.compute(1 << 20, posted, completed, n, 1, false);
        assertEquals(1_000_000.0, r.average(), 1e-6, "1 MiB per microsecond is 1e6 MiB/s");
        assertEquals(1.0, r.messageRateMpps(), 1e-9);
        assertTrue(r.peak() >= r.average());
        BandwidthResult g = BandwidthResult.compute(125_000, posted, completed, n, 100, true);
        assertEquals(1000.0, g.average(), 1e-6, "125 kB per microsecond is 1000 Gb/s");
        BandwidthResult d = BandwidthResult.fromTotals(1 << 20, 1000, 1_000_000_000L, false);
        assertEquals(1000.0, d.average(), 1e-9);
        assertEquals(0.0, d.peak());
    }

    @Test
    void shouldHalveRoundTripsForPingPongLatency() {
        Histogram h = new Histogram(1, 60_000_000_000L, 3);
        for (int i = 0; i < 100; i++) {
            h.recordValue(10_000);
        }
        assertEquals(5.0, LatencyResult.fromRoundTrips(2, h, 2, 0).typical(), 0.01);
        assertEquals(10.0, LatencyResult.fromRoundTrips(2, h, 1, 0).typical(), 0.01);
        assertEquals(2, PerfTest.SEND_LAT.rttFactor());
        assertEquals(1, PerfTest.READ_LAT.rttFactor());
    }

    static List<String> words(String s) {
        return List.of(s.trim().split("\\s+"));
    }
}
