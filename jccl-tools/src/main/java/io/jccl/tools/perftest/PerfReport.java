package io.jccl.tools.perftest;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * perftest's text output: the banner ({@code ctx_print_test_info}), the address lines, the 87-dash
 * {@code RESULT_LINE}, the table headers and the row formats of {@code perftest_parameters.h}, and the JSON keys
 * of {@code --out_json}.
 */
public final class PerfReport {
    /** perftest's RESULT_LINE: 87 dashes. */
    public static final String RESULT_LINE = "-".repeat(87);
    /** Bandwidth header (RESULT_FMT), MiB/s. */
    public static final String BW_HEADER =
        " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]";
    /** Bandwidth header with --report_gbits (RESULT_FMT_G). */
    public static final String BW_HEADER_GBITS =
        " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]";
    /** Latency header (RESULT_FMT_LAT). */
    public static final String LAT_HEADER = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]"
        + "    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";
    /** Latency header in duration mode (RESULT_FMT_LAT_DUR). */
    public static final String LAT_DURATION_HEADER = " #bytes        #iterations       t_avg[usec]    tps average";

    private static final String BW_ROW = " %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f";
    private static final String BW_ROW_EXT = " %-7d    %d           %-7.6f            %-7.6f            %-7.6f";
    private static final String LAT_ROW =
        " %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f";
    private static final String LAT_DURATION_ROW = " %-7d       %d            %-7.2f        %-7.2f";

    private PerfReport() {
    }

    /** What the banner shows. */
    public record Banner(PerfTest test, String atomicType, String device, String transport, int queuePairs,
                         boolean client, int txDepth, int rxDepth, int cqModeration, int mtuBytes, String linkType,
                         int inlineSize, int outstandingReads) {
    }

    /** The test banner, ending with a RESULT_LINE (perftest's {@code ctx_print_test_info}). */
    public static String banner(Banner b) {
        StringBuilder out = new StringBuilder();
        line(out, RESULT_LINE);
        line(out, "                    " + b.test().title(b.atomicType()));
        line(out, " Dual-port       : OFF\t\tDevice         : " + b.device());
        line(out, " Number of qps   : " + b.queuePairs() + "\t\tTransport type : " + transportName(b.transport()));
        line(out, " Connection type : RC\t\tUsing SRQ      : OFF");
        if (b.client()) {
            line(out, " TX depth        : " + b.txDepth());
        }
        if (b.test().verb() == PerfTest.Verb.SEND && !b.client()) {
            line(out, " RX depth        : " + b.rxDepth());
        }
        if (b.test().isBandwidth()) {
            line(out, " CQ Moderation   : " + b.cqModeration());
        }
        line(out, " Mtu             : " + b.mtuBytes() + "[B]");
        line(out, " Link type       : " + b.linkType());
        if (b.test().verb() == PerfTest.Verb.READ || b.test().verb() == PerfTest.Verb.ATOMIC) {
            line(out, " Outstand reads  : " + b.outstandingReads());
        } else {
            line(out, " Max inline data : " + b.inlineSize() + "[B]");
        }
        line(out, " rdma_cm QPs\t : OFF");
        line(out, " Data ex. method : Ethernet");
        line(out, RESULT_LINE);
        return out.toString();
    }

    /** perftest's short transport name ({@code IB} for InfiniBand-style transports). */
    static String transportName(String transport) {
        String t = transport == null ? "" : transport;
        int paren = t.indexOf(" (");
        if (paren > 0) {
            t = t.substring(0, paren);
        }
        return t.equals("InfiniBand") ? "IB" : t;
    }

    /** One {@code local address:} / {@code remote address:} line (LID 0000: these devices have no LIDs). */
    public static String address(boolean local, int qpn, int psn, int rkey, long vaddr) {
        return String.format(Locale.ROOT, " %s address: LID 0000 QPN 0x%04x PSN 0x%06x RKey 0x%08x VAddr 0x%016x",
            local ? "local" : "remote", qpn, psn, rkey, vaddr);
    }

    /** The table header for a test (with the RESULT_LINE above it). */
    public static String header(PerfTest test, boolean gbits, boolean duration) {
        String h = test.isBandwidth() ? gbits ? BW_HEADER_GBITS : BW_HEADER
            : duration ? LAT_DURATION_HEADER : LAT_HEADER;
        return h + System.lineSeparator();
    }

    /** A bandwidth row (REPORT_FMT; REPORT_FMT_EXT for averages below 0.1 Gb/s, as perftest). */
    public static String row(BandwidthResult r, boolean gbits) {
        boolean extraDigits = gbits && r.average() < 0.1;
        return String.format(Locale.ROOT, extraDigits ? BW_ROW_EXT : BW_ROW, r.size(), r.iterations(), r.peak(),
            r.average(), r.messageRateMpps()) + System.lineSeparator();
    }

    /** A latency row (REPORT_FMT_LAT, or REPORT_FMT_LAT_DUR in duration mode). */
    public static String row(LatencyResult r, boolean duration) {
        if (duration) {
            return String.format(Locale.ROOT, LAT_DURATION_ROW, r.size(), r.iterations(), r.average(), r.tps())
                + System.lineSeparator();
        }
        return String.format(Locale.ROOT, LAT_ROW, r.size(), r.iterations(), r.min(), r.max(), r.typical(),
            r.average(), r.stdev(), r.p99(), r.p999()) + System.lineSeparator();
    }

    /** perftest's JSON keys for a bandwidth row: MsgSize, n_iterations, BW_peak, BW_average, MsgRate. */
    public static Map<String, Object> json(BandwidthResult r, boolean gbits) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("MsgSize", r.size());
        m.put("n_iterations", r.iterations());
        m.put("BW_peak", r.peak());
        m.put("BW_average", r.average());
        m.put("MsgRate", r.messageRateMpps());
        m.put("bw_unit", gbits ? "Gb/sec" : "MiB/sec");
        return m;
    }

    /** perftest's JSON keys for a latency row: t_min … percentile_99.9 (and tps_average in duration mode). */
    public static Map<String, Object> json(LatencyResult r, boolean duration) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("MsgSize", r.size());
        m.put("n_iterations", r.iterations());
        if (!duration) {
            m.put("t_min", r.min());
            m.put("t_max", r.max());
            m.put("t_typical", r.typical());
        }
        m.put("t_avg", r.average());
        if (!duration) {
            m.put("t_stdev", r.stdev());
            m.put("percentile_99", r.p99());
            m.put("percentile_99.9", r.p999());
        } else {
            m.put("tps_average", r.tps());
        }
        return m;
    }

    /**
     * The whole JSON document: test parameters and {@code results}, an object for a single size (as perftest's
     * {@code --out_json}) or an array of objects for an {@code -a} sweep.
     */
    public static Map<String, Object> document(Map<String, Object> parameters, List<Map<String, Object>> rows,
                                               boolean sweep) {
        Map<String, Object> root = new LinkedHashMap<>(parameters);
        if (sweep || rows.size() != 1) {
            root.put("results", new ArrayList<Object>(rows));
        } else {
            root.put("results", rows.getFirst());
        }
        return root;
    }

    private static void line(StringBuilder out, String s) {
        out.append(s).append(System.lineSeparator());
    }
}
