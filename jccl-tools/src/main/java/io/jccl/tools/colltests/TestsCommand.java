package io.jccl.tools.colltests;

import io.jccl.collectives.Communicator;
import io.jccl.collectives.DataType;
import io.jccl.collectives.LaunchEnvironment;
import io.jccl.collectives.ReduceOp;
import io.jccl.tools.JcclRuntime;
import io.jccl.tools.Json;
import io.jccl.tools.ProgressLine;
import io.jccl.tools.SizeArgument;
import io.jccl.tools.launcher.Launcher;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;
import picocli.CommandLine.Model.CommandSpec;

import java.io.PrintStream;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;

/**
 * {@code jccl tests NAME_perf}: the nccl-tests programs over a JCCL {@link Communicator}: same flags
 * ({@code -b -e -f -i -n -w -c -d -o -r}), same table (out-of-place and in-place time, algbw, busbw, #wrong) and
 * footer. Run inside a launcher ({@code jccl run -np N jccl-tests…}, torchrun, mpirun) it is one rank; started
 * directly it launches {@code --np} local ranks of itself with {@link Launcher}. Rank 0 prints.
 */
@Command(name = "tests", mixinStandardHelpOptions = true, sortOptions = false,
    description = {"nccl-tests-compatible collective benchmarks: all_reduce_perf all_gather_perf broadcast_perf "
        + "reduce_perf reduce_scatter_perf alltoall_perf gather_perf scatter_perf sendrecv_perf.",
        "Started directly it runs --np local ranks (default 2); under jccl run / torchrun / mpirun it is one rank."})
public final class TestsCommand implements Callable<Integer> {
    @Parameters(index = "0", paramLabel = "TEST", description = "all_reduce_perf, all_gather_perf, broadcast_perf, "
        + "reduce_perf, reduce_scatter_perf, alltoall_perf, gather_perf, scatter_perf, sendrecv_perf")
    String test;

    @Option(names = {"-b", "--minbytes"}, paramLabel = "SIZE", description = "smallest size (default 32M; K/M/G)")
    String minBytes = "32M";

    @Option(names = {"-e", "--maxbytes"}, paramLabel = "SIZE", description = "largest size (default 32M)")
    String maxBytes = "32M";

    @Option(names = {"-f", "--stepfactor"}, paramLabel = "F", description = "multiply the size by F each step "
        + "(a whole number, 2 or more; 0 or 1: add -i bytes instead)")
    String stepFactorText = "0";

    long stepFactor;

    @Option(names = {"-i", "--stepbytes"}, paramLabel = "BYTES", description = "add BYTES each step (default 1M)")
    String stepBytes = "1M";

    @Option(names = {"-n", "--iters"}, paramLabel = "N", description = "timed iterations (default 20)")
    int iterations = 20;

    @Option(names = {"-w", "--warmup_iters"}, paramLabel = "N", description = "warm-up iterations (default 5)")
    int warmup = 5;

    @Option(names = "--jit_warmup", paramLabel = "N", description = "JCCL addition: before the table, run every size "
        + "and placement N unmeasured times (fewer for large sizes, at most 256 MiB moved per size) so the JIT has "
        + "compiled the collective path before anything is timed; 0 = off, as nccl-tests (default 20000)")
    int jitWarmup = 20000;

    @Option(names = {"-c", "--check"}, paramLabel = "0|1", description = "check results (default 1)")
    int check = 1;

    @Option(names = {"-d", "--datatype"}, paramLabel = "TYPE", description = "float (default), double, half, "
        + "bfloat16, int8, uint8, int32, int64")
    String dataType = "float";

    @Option(names = {"-o", "--op"}, paramLabel = "OP", description = "sum (default), prod, min, max, avg")
    String reduceOp = "sum";

    @Option(names = {"-r", "--root"}, paramLabel = "RANK", description = "root rank (default 0)")
    int root;

    @Option(names = {"-a", "--average"}, paramLabel = "0-3", description = "how ranks' times combine: 0 rank 0, "
        + "1 average (default), 2 minimum, 3 maximum")
    int average = 1;

    @Option(names = {"-np", "--np"}, paramLabel = "N", description = "ranks to launch when not started by a "
        + "launcher (default 2)")
    int ranks = 2;

    @Option(names = {"-g", "--ngpus"}, paramLabel = "1", description = "accepted for compatibility; must be 1")
    int ngpus = 1;

    @Option(names = {"-J", "--output_file", "--json"}, paramLabel = "FILE", description = "also write the results "
        + "as JSON (rank 0)")
    java.nio.file.Path jsonFile;

    @Option(names = "--plot", paramLabel = "FILE.svg|FILE.png", description = "also draw busbw against size (one "
        + "line per placement; overlay several runs, e.g. one per JCCL_ALGO or provider, with jccl plot)")
    java.nio.file.Path plotFile;

    @Option(names = "--label", paramLabel = "TEXT", description = "the name of this run in --json and --plot "
        + "(default: the transport and the algorithms the cost model picked)")
    String label;

    @Option(names = "--timeout", paramLabel = "SECONDS", description = "kill the local ranks after this long "
        + "(default 600)")
    long timeoutSeconds = 600;

    @Spec
    CommandSpec spec;

    PrintStream out = System.out;

    @Override
    public Integer call() throws Exception {
        checkSizes();
        BusBandwidth kind = BusBandwidth.of(test);
        DataType type = DataType.parse(dataType);
        ReduceOp op = parseOp(reduceOp);
        if (ngpus != 1) {
            throw new IllegalArgumentException("-g: one device per rank (JCCL ranks are processes)");
        }
        if (!LaunchEnvironment.launched(System.getenv())) {
            return launch();
        }
        try (Communicator comm = Communicator.fromEnvironment()) {
            return runRank(comm, kind, type, op);
        }
    }

    /** Starts {@link #ranks} local ranks of this same command line and returns the job's status. */
    private int launch() throws Exception {
        // The parse result's original arguments are the whole command line, "tests" included.
        List<String> forwarded = new ArrayList<>(spec.commandLine().getParseResult().originalArgs());
        if (forwarded.isEmpty() || !forwarded.getFirst().equals("tests")) {
            forwarded.addFirst("tests");
        }
        CollectiveTest shape = new CollectiveTest(BusBandwidth.of(test), ranks, 0, DataType.parse(dataType),
            ReduceOp.SUM, 0);
        int sizeCount = (int) sizes(parseSize(minBytes), parseSize(maxBytes), stepFactor, parseSize(stepBytes))
            .stream().filter(size -> shape.blockCount(size) > 0).count();
        ProgressLine progress = new ProgressLine(System.err, JcclRuntime.stderrIsTerminal());
        try (SweepProgress watched = new SweepProgress(out, progress, test, sizeCount)) {
            // With a progress line, the ranks' stdout and stderr both pass through it (one lock: no interleaving).
            PrintStream stdout = progress.enabled() ? new PrintStream(watched, true, StandardCharsets.UTF_8) : out;
            PrintStream stderr = progress.enabled()
                ? new PrintStream(watched.errors(System.err), true, StandardCharsets.UTF_8) : System.err;
            watched.startTicker(1000);
            Launcher.Result result = Launcher.builder().ranks(ranks).prefixOutput(false).out(stdout).err(stderr)
                .aotCache(io.jccl.tools.launcher.AotCache.fromEnvironment(System.getenv(), stderr))
                .timeout(Duration.ofSeconds(timeoutSeconds))
                .javaMain(List.of(), "io.jccl.tools.Main", forwarded).build().run();
            stdout.flush();
            stderr.flush();
            return result.exitCode();
        }
    }

    private static ReduceOp parseOp(String name) {
        for (ReduceOp op : ReduceOp.values()) {
            if (op.shortName().equalsIgnoreCase(name) || op.name().equalsIgnoreCase(name)) {
                return op;
            }
        }
        throw new IllegalArgumentException("unknown reduction '" + name + "'; sum, prod, min, max or avg");
    }

    /** Parses nccl-tests sizes: a number with an optional K, M or G suffix (powers of 1024). */
    static long parseSize(String text) {
        return SizeArgument.parse("size", text);
    }

    /**
     * Checks the size flags before anything starts, so that a bad one is one clear line naming the flag and what it
     * accepts (not a raw "For input string" from a rank).
     */
    void checkSizes() {
        long min = SizeArgument.parse("-b", minBytes);
        long max = SizeArgument.parse("-e", maxBytes);
        SizeArgument.parse("-i", stepBytes);
        String f = stepFactorText.trim();
        try {
            stepFactor = Long.parseLong(f);
        } catch (NumberFormatException e) {
            stepFactor = -1;
        }
        if (stepFactor < 0) {
            throw new IllegalArgumentException("-f " + stepFactorText + ": the step factor is a whole number, 2 or "
                + "more (0 or 1: step by -i bytes instead)");
        }
        if (min > max) {
            throw new IllegalArgumentException("-b " + minBytes + " is larger than -e " + maxBytes + ": the sizes run "
                + "from -b up to -e");
        }
    }

    /** The sizes nccl-tests visits: from min to max, times the step factor (if given) or plus the step bytes. */
    static List<Long> sizes(long min, long max, long factor, long step) {
        List<Long> sizes = new ArrayList<>();
        for (long s = min; s <= max && sizes.size() < 10_000; s = factor > 1 ? s * factor : s + Math.max(1, step)) {
            sizes.add(s);
            if (s == 0) {
                break;
            }
        }
        return sizes;
    }

    private int runRank(Communicator comm, BusBandwidth kind, DataType type, ReduceOp op) {
        int n = comm.size();
        int rank = comm.rank();
        if (kind == BusBandwidth.SEND_RECV && n < 2) {
            throw new IllegalArgumentException("sendrecv_perf needs at least 2 ranks");
        }
        if (root < 0 || root >= n) {
            throw new IllegalArgumentException("root " + root + " outside 0.." + (n - 1));
        }
        long min = parseSize(minBytes);
        long max = parseSize(maxBytes);
        List<Long> sizes = sizes(min, max, stepFactor, parseSize(stepBytes));
        CollectiveTest coll = new CollectiveTest(kind, n, rank, type, op, root);
        long largestBlock = Math.max(1, coll.blockCount(max));
        long bufferBytes = Math.max(64, coll.bufferBytes(largestBlock));
        MemorySegment sendBuffer = comm.allocate(bufferBytes);
        MemorySegment recvBuffer = comm.allocate(bufferBytes);
        boolean print = rank == 0;
        if (print) {
            out.printf(Locale.ROOT, "# nThread 1 nGpus 1 minBytes %d maxBytes %d step: %s warmup iters: %d iters: %d "
                    + "agg iters: 1 validation: %d graph: 0%n", min, max,
                stepFactor > 1 ? stepFactor + "(factor)" : parseSize(stepBytes) + "(bytes)", warmup, iterations, check);
            out.println("#");
            out.println("# Using devices");
        }
        printDevices(comm, print);
        long jitStartNs = System.nanoTime();
        long settledMs = 0;
        int jitRuns = 0;
        if (jitWarmup > 0) {
            // The whole table once, unmeasured and unprinted, with fewer runs per size: every path the table takes
            // (the timed loop, barrier, the double and long all-reduces of the bookkeeping, the check, formatting a
            // row) is compiled before the first timed row, instead of trapping out of compiled code and being
            // recompiled inside it. Why: docs/tools.md, "What is measured" (step 0).
            Sweep warm = new Sweep(comm, kind, coll, type, op, sendBuffer, recvBuffer);
            for (long size : sizes) {
                int count = jitRunsFor(coll.sizeBytes(coll.blockCount(size)), jitWarmup);
                warm.row(size, count);
                jitRuns += 2 * count;
            }
            // Once more, one timed run per row: the untimed code between rows (check, initialisation,
            // bookkeeping) has now seen every size once and was compiled for the last; its traps on the other
            // sizes happen here, not in the table.
            for (long size : sizes) {
                warm.row(size, 1);
                jitRuns += 2;
            }
        }
        if (jitRuns > 0) {
            // Idle a moment, together, so the compilations the warm-up queued finish now: on a machine with as many
            // cores as ranks, a compiler thread that wakes in a timed loop takes a spinning rank's core.
            comm.barrier();
            settledMs = io.jccl.tools.JitSettle.await();
            comm.barrier();
        }
        if (print) {
            if (jitWarmup > 0) {
                out.printf(Locale.ROOT, "# JIT warm-up: %d unmeasured runs over all sizes, then %d ms idle (until the JIT "
                    + "was quiet), in %.1f s (--jit_warmup %d)%n", jitRuns, settledMs, (System.nanoTime() - jitStartNs) / 1e9,
                    jitWarmup);
            }
            out.print(CollectiveReport.header());
            out.flush();
        }
        Sweep table = new Sweep(comm, kind, coll, type, op, sendBuffer, recvBuffer);
        for (long size : sizes) {
            String row = table.row(size, iterations);
            if (print && row != null) {
                out.println(row);
                out.flush();
            }
        }
        long totalWrong = table.totalWrong;
        double avgBusBw = table.averageBusBandwidth();
        if (print) {
            out.print(CollectiveReport.footer(totalWrong, avgBusBw));
            out.flush();
            String transport = n > 1 ? comm.transportOf(1).split(" ")[0] : "self";
            String runLabel = label != null ? label : transport + " " + String.join("/", table.algorithms);
            if (plotFile != null) {
                try {
                    new BusBandwidthPlot(kind.program() + ", " + n + " ranks, " + CollectiveReport.typeName(type),
                        List.of(new BusBandwidthPlot.Series(runLabel + ", out-of-place", table.outOfPlacePoints),
                            new BusBandwidthPlot.Series(runLabel + ", in-place", table.inPlacePoints))).write(plotFile);
                } catch (java.io.IOException e) {
                    throw new java.io.UncheckedIOException("cannot write " + plotFile, e);
                }
            }
            if (jsonFile != null) {
                Map<String, Object> doc = new LinkedHashMap<>();
                doc.put("test", kind.program());
                doc.put("label", runLabel);
                doc.put("transport", transport);
                doc.put("ranks", n);
                doc.put("iters", iterations);
                doc.put("warmup_iters", warmup);
                doc.put("results", table.jsonRows);
                doc.put("out_of_bounds", totalWrong);
                doc.put("avg_busbw_GBps", avgBusBw);
                try {
                    java.nio.file.Files.writeString(jsonFile, Json.write(doc));
                } catch (java.io.IOException e) {
                    throw new java.io.UncheckedIOException("cannot write " + jsonFile, e);
                }
            }
        }
        return totalWrong == 0 ? 0 : 1;
    }

    /**
     * Runs the collective {@code count} times and returns the elapsed nanoseconds. Warm-up, JIT warm-up and the timed
     * loop all go through here, so the loop the JIT compiles while warming up is the loop that is then timed (an
     * on-stack replacement in the middle of the first timed size was what made nccl-tests-style means erratic).
     */
    private static long runs(Communicator comm, CollectiveTest coll, MemorySegment send, MemorySegment recv,
                             long block, int count) {
        long t0 = System.nanoTime();
        for (int i = 0; i < count; i++) {
            coll.run(comm, send, recv, block);
        }
        return System.nanoTime() - t0;
    }

    /**
     * The rows of one table: measures a size's out-of-place and in-place placements as nccl-tests does and formats
     * the row, accumulating the totals, the JSON rows and the plot points. The JIT warm-up pass runs a whole
     * throw-away sweep first (fewer runs per size), so that the table's code paths are compiled before it.
     */
    private final class Sweep {
        private final Communicator comm;
        private final BusBandwidth kind;
        private final CollectiveTest coll;
        private final DataType type;
        private final ReduceOp op;
        private final MemorySegment sendBuffer;
        private final MemorySegment recvBuffer;
        long totalWrong;
        final List<Object> jsonRows = new ArrayList<>();
        final java.util.Set<String> algorithms = new java.util.LinkedHashSet<>();
        final List<BusBandwidthPlot.Point> outOfPlacePoints = new ArrayList<>();
        final List<BusBandwidthPlot.Point> inPlacePoints = new ArrayList<>();

        Sweep(Communicator comm, BusBandwidth kind, CollectiveTest coll, DataType type, ReduceOp op,
              MemorySegment sendBuffer, MemorySegment recvBuffer) {
            this.comm = comm;
            this.kind = kind;
            this.coll = coll;
            this.type = type;
            this.op = op;
            this.sendBuffer = sendBuffer;
            this.recvBuffer = recvBuffer;
        }

        /** nccl-tests' "Avg bus bandwidth": the mean busbw of every placement of every row (0 without rows). */
        double averageBusBandwidth() {
            double sum = 0;
            int n = 0;
            for (List<BusBandwidthPlot.Point> points : List.of(outOfPlacePoints, inPlacePoints)) {
                for (BusBandwidthPlot.Point p : points) {
                    sum += p.busbwGBps();
                    n++;
                }
            }
            return n == 0 ? 0 : sum / n;
        }

        /** Measures one size with {@code iterations} timed runs per placement; returns its row (null: no row). */
        String row(long size, int iterations) {
            long block = coll.blockCount(size);
            if (block == 0) {
                return null;
            }
            long bytes = coll.sizeBytes(block);
            Map<String, Object> jsonRow = new LinkedHashMap<>();
            jsonRow.put("size", bytes);
            jsonRow.put("count", bytes / type.sizeBytes());
            jsonRow.put("type", CollectiveReport.typeName(type));
            jsonRow.put("redop", coll.reduces() ? op.shortName() : "none");
            jsonRow.put("root", coll.rooted() ? root : -1);
            String algorithm = algorithmOf(comm, kind, bytes);
            jsonRow.put("algorithm", algorithm);
            algorithms.add(algorithm);
            StringBuilder row = new StringBuilder(CollectiveReport.rowStart(bytes, bytes / type.sizeBytes(),
                CollectiveReport.typeName(type), coll.reduces() ? op.shortName() : "none", coll.rooted() ? root : -1));
            for (boolean inPlace : new boolean[] {false, true}) {
                MemorySegment send = coll.send(sendBuffer, recvBuffer, block, inPlace);
                MemorySegment recv = coll.recv(recvBuffer, block, inPlace);
                runs(comm, coll, send, recv, block, warmup);
                comm.barrier();
                double timeUs = combineTime(runs(comm, coll, send, recv, block, iterations) / 1e3 / iterations, comm);
                String wrong = "N/A";
                if (check != 0) {
                    recvBuffer.fill((byte) 0);
                    coll.initialize(send, block);
                    coll.run(comm, send, recv, block);
                    long w = sumOverRanks(coll.check(recv, block), comm);
                    totalWrong += w;
                    wrong = Long.toString(w);
                }
                double algbw = BusBandwidth.algorithmBandwidth(bytes, timeUs / 1e6);
                double busbw = algbw * kind.factor(comm.size());
                row.append(CollectiveReport.placement(timeUs, algbw, busbw, wrong));
                Map<String, Object> placement = new LinkedHashMap<>();
                placement.put("time_us", timeUs);
                placement.put("algbw_GBps", algbw);
                placement.put("busbw_GBps", busbw);
                placement.put("wrong", check != 0 ? Long.parseLong(wrong) : null);
                jsonRow.put(inPlace ? "in_place" : "out_of_place", placement);
                (inPlace ? inPlacePoints : outOfPlacePoints).add(new BusBandwidthPlot.Point(bytes, busbw));
            }
            jsonRows.add(jsonRow);
            return row.toString();
        }
    }

    /**
     * JIT warm-up runs for one size: {@code limit}, capped so that at most 256 MiB move per size (at least 1). Also
     * used by {@code jccl demo}'s closing table.
     */
    public static int jitRunsFor(long sizeBytes, int limit) {
        long cap = Math.max(1, (256L << 20) / Math.max(1, sizeBytes));
        return (int) Math.min(limit, cap);
    }

    /** The algorithm the communicator's cost model (or JCCL_ALGO) picks for this test at {@code sizeBytes}. */
    private static String algorithmOf(Communicator comm, BusBandwidth kind, long sizeBytes) {
        io.jccl.collectives.Collective collective = switch (kind) {
            case ALL_REDUCE -> io.jccl.collectives.Collective.ALL_REDUCE;
            case BROADCAST -> io.jccl.collectives.Collective.BROADCAST;
            case REDUCE -> io.jccl.collectives.Collective.REDUCE;
            case ALL_GATHER -> io.jccl.collectives.Collective.ALL_GATHER;
            case REDUCE_SCATTER -> io.jccl.collectives.Collective.REDUCE_SCATTER;
            case ALL_TO_ALL -> io.jccl.collectives.Collective.ALL_TO_ALL;
            case GATHER -> io.jccl.collectives.Collective.GATHER;
            case SCATTER -> io.jccl.collectives.Collective.SCATTER;
            case SEND_RECV -> io.jccl.collectives.Collective.SEND_RECV;
        };
        try {
            return comm.algorithmFor(collective, sizeBytes).shortName();
        } catch (RuntimeException e) {
            return "?"; // collectives the cost model does not choose for (send/recv)
        }
    }

    /** Combines the ranks' times as nccl-tests' {@code -a}: rank 0's, the average, the minimum or the maximum. */
    private double combineTime(double timeUs, Communicator comm) {
        MemorySegment t = scalar(comm);
        t.set(ValueLayout.JAVA_DOUBLE, 0, average == 0 && comm.rank() != 0 ? 0 : timeUs);
        ReduceOp how = switch (average) {
            case 2 -> ReduceOp.MIN;
            case 3 -> ReduceOp.MAX;
            default -> ReduceOp.SUM;
        };
        comm.allReduce(t, t, 1, DataType.FLOAT64, how);
        double v = t.get(ValueLayout.JAVA_DOUBLE, 0);
        return average == 0 || average == 2 || average == 3 ? v : v / comm.size();
    }

    /** Sums a count over the ranks. */
    private long sumOverRanks(long value, Communicator comm) {
        MemorySegment w = scalar(comm);
        w.set(ValueLayout.JAVA_LONG, 0, value);
        comm.allReduce(w, w, 1, DataType.INT64, ReduceOp.SUM);
        return w.get(ValueLayout.JAVA_LONG, 0);
    }

    /**
     * One 8-byte native scratch buffer for the bookkeeping all-reduces (times, wrong counts). Not a heap array:
     * a heap segment reaching the collective path's compiled code (type-profiled on native segments) made it
     * trap and deoptimize once per size, and the timed loop of the next size ran on interpreted kernels.
     */
    private MemorySegment scalar(Communicator comm) {
        if (scalar == null) {
            scalar = comm.allocate(8);
        }
        return scalar;
    }

    private MemorySegment scalar;

    /** nccl-tests' "# Rank r Group 0 Pid p on host device d" lines, gathered to rank 0. */
    private void printDevices(Communicator comm, boolean print) {
        int n = comm.size();
        MemorySegment mine = comm.allocate(8);
        MemorySegment all = comm.allocate(8L * n);
        mine.set(ValueLayout.JAVA_LONG, 0, ProcessHandle.current().pid());
        comm.allGather(mine, all, 1, DataType.INT64);
        if (!print) {
            return;
        }
        String host;
        try {
            host = InetAddress.getLocalHost().getHostName();
        } catch (java.io.IOException e) {
            host = "localhost";
        }
        for (int r = 0; r < n; r++) {
            String transport = r == comm.rank() ? (n > 1 ? "to rank 1: " + comm.transportOf(1) : "self")
                : "from rank 0: " + comm.transportOf(r);
            out.printf(Locale.ROOT, "#  Rank %2d Group  0 Pid %6d on %10s device  0 [jccl] %s%n", r,
                all.getAtIndex(ValueLayout.JAVA_LONG, r), host, transport);
        }
        out.println("#");
    }
}
