package io.jccl.tools.colltests;

import io.jccl.tools.Json;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;

/**
 * {@code jccl plot -o OUT.svg RUN.json…}: busbw against size from several {@code jccl tests --json} runs on one
 * plot, one line per run — for example one run per {@code JCCL_ALGO} or per provider.
 */
@Command(name = "plot", mixinStandardHelpOptions = true, sortOptions = false,
    description = {"Plot busbw against size from jccl tests --json files, one line per file (its label: the "
        + "transport and algorithm, or --label of that run).",
        "Example: JCCL_ALGO=ring jccl tests all_reduce_perf -b 8 -e 64M -f 4 --json ring.json; JCCL_ALGO=tree … "
            + "--json tree.json; jccl plot -o algos.svg ring.json tree.json"})
public final class PlotCommand implements Callable<Integer> {
    @Option(names = {"-o", "--output"}, required = true, paramLabel = "FILE.svg|FILE.png", description = "the plot")
    Path output;

    @Option(names = "--in-place", description = "plot the in-place columns (default: out-of-place)")
    boolean inPlace;

    @Option(names = "--title", paramLabel = "TEXT", description = "the title (default: the test and rank count)")
    String title;

    @Parameters(arity = "1..*", paramLabel = "RUN.json", description = "jccl tests --json (-J) outputs")
    List<Path> runs;

    PrintStream out = System.out;

    @Override
    public Integer call() throws Exception {
        List<BusBandwidthPlot.Series> series = new ArrayList<>();
        String defaultTitle = null;
        for (Path run : runs) {
            Object parsed;
            try {
                parsed = Json.parse(Files.readString(run));
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException(run + ": " + e.getMessage(), e);
            }
            if (!(parsed instanceof Map<?, ?> doc) || !(doc.get("results") instanceof List<?> rows)) {
                throw new IllegalArgumentException(run + ": not a jccl tests --json file (no \"results\")");
            }
            List<BusBandwidthPlot.Point> points = new ArrayList<>();
            for (Object row : rows) {
                if (row instanceof Map<?, ?> r && r.get("size") instanceof Double size
                    && r.get(inPlace ? "in_place" : "out_of_place") instanceof Map<?, ?> placement
                    && placement.get("busbw_GBps") instanceof Double busbw) {
                    points.add(new BusBandwidthPlot.Point(size.longValue(), busbw));
                }
            }
            Object label = doc.get("label");
            series.add(new BusBandwidthPlot.Series(label != null ? label.toString() : run.getFileName().toString(),
                points));
            if (defaultTitle == null) {
                defaultTitle = doc.get("test") + (doc.get("ranks") instanceof Double n ? ", " + n.intValue()
                    + " ranks" : "") + (inPlace ? ", in-place" : ", out-of-place");
            }
        }
        new BusBandwidthPlot(title != null ? title : defaultTitle, series).write(output);
        out.println("wrote " + output + " (" + series.size() + " line" + (series.size() == 1 ? "" : "s") + ")");
        return 0;
    }
}
