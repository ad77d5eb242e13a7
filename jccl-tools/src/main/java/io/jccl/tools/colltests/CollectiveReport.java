package io.jccl.tools.colltests;

import java.util.Locale;

/** nccl-tests' table: the two header rows, the row format and the footer ({@code common.cu}). */
final class CollectiveReport {
    private CollectiveReport() {
    }

    /** The three header lines above the table. */
    static String header() {
        String nl = System.lineSeparator();
        return "#" + nl
            + String.format(Locale.ROOT, "# %10s  %12s  %8s  %6s  %6s           out-of-place                       "
                + "in-place          ", "", "", "", "", "") + nl
            + String.format(Locale.ROOT, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s",
                "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
                "busbw", "#wrong") + nl
            + String.format(Locale.ROOT, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s",
                "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "") + nl;
    }

    /** The row's first columns: size, count, type, redop, root. */
    static String rowStart(long size, long count, String type, String redop, int root) {
        return String.format(Locale.ROOT, "%12d  %12d  %8s  %6s  %6d", size, count, type, redop, root);
    }

    /** One placement's columns: time, algbw, busbw, #wrong ("N/A" when not checked). */
    static String placement(double timeUs, double algbw, double busbw, String wrong) {
        String time;
        if (timeUs >= 10000.0) {
            time = String.format(Locale.ROOT, "%7.0f", timeUs);
        } else if (timeUs >= 100.0) {
            time = String.format(Locale.ROOT, "%7.1f", timeUs);
        } else {
            time = String.format(Locale.ROOT, "%7.2f", timeUs);
        }
        return String.format(Locale.ROOT, "  %7s  %6.2f  %6.2f  %5s", time, algbw, busbw, wrong);
    }

    /** The footer: out-of-bounds count with OK/FAILED and the average bus bandwidth. */
    static String footer(long wrong, double avgBusBw) {
        String nl = System.lineSeparator();
        return String.format(Locale.ROOT, "# Out of bounds values : %d %s", wrong, wrong == 0 ? "OK" : "FAILED") + nl
            + String.format(Locale.ROOT, "# Avg bus bandwidth    : %g ", avgBusBw) + nl + "#" + nl;
    }

    /** nccl-tests' type names. */
    static String typeName(io.jccl.collectives.DataType type) {
        return switch (type) {
            case FLOAT32 -> "float";
            case FLOAT64 -> "double";
            case FLOAT16 -> "half";
            default -> type.shortName();
        };
    }
}
