package io.jccl.tools.perftest;

import io.jccl.common.CpuAffinity;
import io.jccl.tools.JcclRuntime;
import io.jccl.tools.Json;
import io.jccl.tools.ProgressLine;
import io.jccl.verbs.Context;
import io.jccl.verbs.Device;
import io.jccl.verbs.Verbs;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;

/**
 * {@code jccl perf TEST [HOST]}: the perftest programs over JCCL devices. Without HOST it is the server; with HOST
 * the client, which connects to the server's out-of-band port, runs the test and prints the table. With
 * {@code --local} one command runs both, the server as a second JVM on this host.
 */
@Command(name = "perf", mixinStandardHelpOptions = true, sortOptions = false,
    description = {"perftest-compatible benchmarks: write_bw write_lat read_bw read_lat send_bw send_lat atomic_bw "
        + "atomic_lat.",
        "Server: jccl perf write_bw      Client: jccl perf write_bw HOST      One host: jccl perf write_bw --local"})
public final class PerfCommand implements Callable<Integer> {
    @Parameters(index = "0", paramLabel = "TEST", description = "write_bw, write_lat, read_bw, read_lat, send_bw, "
        + "send_lat, atomic_bw or atomic_lat (ib_ prefix allowed)")
    String testName;

    @Parameters(index = "1", arity = "0..1", paramLabel = "HOST", description = "server to connect to (client mode)")
    String host;

    @Option(names = {"-d", "--ib-dev"}, paramLabel = "DEV", description = "device (default: first device found)")
    String device;

    @Option(names = {"-i", "--ib-port"}, paramLabel = "PORT", description = "device port (default 1)")
    int ibPort = 1;

    @Option(names = {"-s", "--size"}, paramLabel = "BYTES", converter = io.jccl.tools.SizeArgument.Converter.class,
        description = "message size (default 65536 BW, 2 LAT, 8 atomics; K/M/G accepted)")
    Long size;

    @Option(names = {"-a", "--all"}, description = "run sizes 2 .. 2^23")
    boolean all;

    @Option(names = {"-n", "--iters"}, paramLabel = "N",
        description = "iterations (default 1000; 5000 for write_bw); per QP for BW tests")
    Integer iterations;

    @Option(names = {"-D", "--duration"}, paramLabel = "SECONDS", description = "run each size this long instead of -n")
    int duration;

    @Option(names = {"-q", "--qp"}, paramLabel = "QPS", description = "queue pairs (BW tests, default 1)")
    int queuePairs = 1;

    @Option(names = {"-p", "--port"}, paramLabel = "PORT", description = "out-of-band TCP port (default 18515)")
    int port = 18515;

    @Option(names = "--report_gbits", description = "report BW in Gb/sec instead of MiB/sec")
    boolean reportGbits;

    @Option(names = {"-t", "--tx-depth"}, paramLabel = "N", description = "TX depth (default 128 BW, 1 LAT)")
    Integer txDepth;

    @Option(names = {"-r", "--rx-depth"}, paramLabel = "N", description = "receive depth for SEND tests (default 512)")
    int rxDepth = 512;

    @Option(names = {"-Q", "--cq-mod"}, paramLabel = "N", description = "signal every N-th request (default 100)")
    int cqModeration = 100;

    @Option(names = {"-I", "--inline_size"}, paramLabel = "BYTES",
        converter = io.jccl.tools.SizeArgument.IntConverter.class, description = "max inline size (default 220 WRITE, 236 SEND, capped by the device)")
    Integer inlineSize;

    @Option(names = {"-A", "--atomic_type"}, paramLabel = "TYPE",
        description = "FETCH_AND_ADD (default) or CMP_AND_SWAP")
    String atomicType = "FETCH_AND_ADD";

    @Option(names = {"-c", "--connection"}, paramLabel = "TYPE", description = "connection type: RC only")
    String connection = "RC";

    @Option(names = {"-o", "--outs"}, paramLabel = "N", description = "outstanding READs/atomics (shown; default 16)")
    int outstandingReads = 16;

    @Option(names = {"-e", "--events"}, description = "passive server sides (WRITE/READ/atomic tests) wait in the "
        + "CQ instead of busy-polling; better for providers with their own progress thread (tcp) on few cores")
    boolean events;

    @Option(names = {"-F", "--CPU-freq"}, description = "accepted and ignored (no cpufreq check)")
    boolean cpuFreq;

    @Option(names = {"-x", "--gid-index"}, paramLabel = "N", description = "accepted and ignored")
    Integer gidIndex;

    @Option(names = {"-m", "--mtu"}, paramLabel = "BYTES", description = "accepted and ignored (the port's MTU is used)")
    Integer mtu;

    @Option(names = {"--json", "--out_json_file"}, paramLabel = "FILE",
        description = "also write the results as JSON (perftest keys) to FILE")
    Path jsonFile;

    @Option(names = "--out_json", description = "write the JSON results to perftest_out.json (unless --json names "
        + "a file), as perftest's --out_json")
    boolean outJson;

    @Option(names = "--warmup", paramLabel = "N",
        description = "unmeasured iterations before each size (default: 16..2000 BW, 16..1000 LAT, by size)")
    Integer warmup;

    @Option(names = "--local", description = "run server and client on this host (server in a second JVM); "
        + "prints the client's table")
    boolean local;

    @Option(names = "--pin-cpu", paramLabel = "CPU", description = "pin the measuring thread to this CPU "
        + "(sched_setaffinity)")
    Integer pinCpu;

    @Option(names = "--cpus", paramLabel = "SERVER,CLIENT", split = ",", description = "with --local: pin the "
        + "server's and the client's measuring threads to these CPUs (as the UCX baseline pins CPU 0 and 1)")
    List<Integer> localCpus;

    @Option(names = "--connect-timeout", paramLabel = "MS", description = "client: keep trying to reach the server "
        + "this long (default 5000; 60000 with --local)")
    Integer connectTimeoutMs;

    @Option(names = "--accept-timeout", paramLabel = "MS", hidden = true, description = "server: give up waiting "
        + "for a client after this long (default: wait forever)")
    int acceptTimeoutMs;

    @Option(names = "--check-alloc", description = "print the heap bytes the client allocated inside the measured "
        + "loops (should be 0: the loops and the providers' post/poll paths allocate nothing)")
    boolean checkAllocation;

    PrintStream out = System.out;
    PrintStream err = System.err;
    /** Local mode: tells the client to stop trying to connect (the server process is gone). */
    java.util.function.BooleanSupplier connectGiveUp = () -> false;
    /** Heap bytes the client allocated in the measured loops of the last run (-1 on the server). */
    long lastAllocatedBytes = -1;

    @Override
    public Integer call() throws Exception {
        PerfTest test = PerfTest.of(testName);
        if (outJson && jsonFile == null) {
            jsonFile = Path.of("perftest_out.json");
        }
        if (!connection.equalsIgnoreCase("RC")) {
            throw new PerfException("connection type " + connection + " is not supported: JCCL has RC queue pairs "
                + "only");
        }
        if (local && host != null) {
            throw new PerfException("--local runs both sides on this host; leave out HOST");
        }
        if (local) {
            return LocalPerf.run(this, test);
        }
        if (pinCpu != null) {
            // as perftest users do with taskset
            String why = CpuAffinity.bindCurrentThread(pinCpu);
            if (why != null) {
                throw new PerfException("cannot pin to CPU " + pinCpu + ": " + why + " (does the CPU exist and is it "
                    + "in this process's cpuset?)");
            }
        }
        return host == null ? server(test) : client(test, host);
    }

    /** The plan the client proposes, from the flags and perftest's per-test defaults. */
    PerfPlan plan(PerfTest test) {
        List<Long> sizes;
        if (all) {
            sizes = PerfPlan.allSizes(test);
        } else {
            long s = size != null ? size : test.defaultSize();
            if (test.verb() == PerfTest.Verb.ATOMIC && s != 8) {
                throw new PerfException("atomic tests use 8-byte operands (-s 8)");
            }
            if (s < 1) {
                throw new PerfException("message size must be at least 1 byte");
            }
            sizes = List.of(s);
        }
        if (!test.isBandwidth() && queuePairs != 1) {
            throw new PerfException("latency tests use one QP (-q is for BW tests)");
        }
        int iters = iterations != null ? iterations : test.defaultIterations();
        if (iters < 5) {
            throw new PerfException("iterations must be at least 5 (perftest's MIN_ITER)");
        }
        int tx = txDepth != null ? txDepth : test.defaultTxDepth();
        int inline = inlineSize != null ? inlineSize : test.defaultInline();
        int warm = warmup != null ? warmup : defaultWarmup(test, sizes);
        String atomic = atomicType.toUpperCase(java.util.Locale.ROOT);
        return new PerfPlan(test, sizes, iters, warm, duration, queuePairs, tx, Math.min(cqModeration, tx), inline,
            atomic);
    }

    /**
     * Default warm-up (JIT) iterations per size: BW tests about 128 MiB of traffic (16 to 2000 messages), latency
     * tests about 16 MiB (16 to 1000 round trips).
     */
    static int defaultWarmup(PerfTest test, List<Long> sizes) {
        long largest = sizes.stream().mapToLong(Long::longValue).max().orElse(1);
        long traffic = test.isBandwidth() ? 128L << 20 : 16L << 20;
        long cap = test.isBandwidth() ? 2000 : 1000;
        return (int) Math.max(16, Math.min(cap, traffic / Math.max(1, largest)));
    }

    Device resolveDevice() {
        if (device != null) {
            return Verbs.device(device);
        }
        List<Device> devices = Verbs.devices();
        if (devices.isEmpty()) {
            throw new PerfException("No JCCL devices found (is a provider jar on the class path?)");
        }
        return devices.getFirst();
    }

    private int client(PerfTest test, String serverHost) throws IOException {
        PerfPlan plan = plan(test);
        Device dev = resolveDevice();
        int timeout = connectTimeoutMs != null ? connectTimeoutMs : 5000;
        try (OutOfBand oob = OutOfBand.connect(serverHost, port, timeout, connectGiveUp)) {
            try {
                oob.send(plan.encode());
                oob.expect("plan-ok");
                return runSide(plan, dev, oob, true);
            } catch (IOException | RuntimeException e) {
                oob.fail(String.valueOf(e.getMessage()));
                throw e;
            }
        }
    }

    private int server(PerfTest test) throws IOException {
        Device dev = resolveDevice();
        try (OutOfBand oob = OutOfBand.accept(port, acceptTimeoutMs)) {
            try {
                PerfPlan plan = PerfPlan.decode(oob.receive());
                if (plan.test() != test) {
                    throw new PerfException("client runs " + plan.test().id() + " but this server was started for "
                        + test.id());
                }
                oob.send("plan-ok");
                return runSide(plan, dev, oob, false);
            } catch (IOException | RuntimeException e) {
                oob.fail(String.valueOf(e.getMessage()));
                throw e;
            }
        }
    }

    private int runSide(PerfPlan plan, Device dev, OutOfBand oob, boolean client) throws IOException {
        PerfTest test = plan.test();
        Context context = dev.open();
        PerfSession created;
        try {
            created = new PerfSession(plan, client, oob, context, rxDepth, events);
        } catch (RuntimeException e) {
            context.close();
            throw e;
        }
        try (PerfSession session = created) {
            var port0 = session.port();
            out.print(PerfReport.banner(new PerfReport.Banner(test, plan.atomicType(), dev.name(),
                session.attributes().transport(), plan.queuePairs(), client, plan.txDepth(), rxDepth,
                plan.cqModeration(), port0.activeMtu().bytes(), port0.linkLayer(), session.inlineSize(),
                outstandingReads)));
            out.print(session.connect());
            out.println(PerfReport.RESULT_LINE);
            boolean printTable = client || test == PerfTest.SEND_BW;
            if (printTable) {
                out.print(PerfReport.header(test, reportGbits, plan.durationMode() && !test.isBandwidth()));
            }
            out.flush();
            ProgressLine progress = new ProgressLine(err, client && plan.sweep() && JcclRuntime.stderrIsTerminal());
            List<Map<String, Object>> rows = new ArrayList<>();
            int index = 0;
            for (long s : plan.sizes()) {
                progress.show(test.id() + " " + s + " B (" + (++index) + "/" + plan.sizes().size() + ")");
                session.prepare(s);
                oob.barrier("go " + s);
                if (test.isBandwidth()) {
                    BandwidthResult r;
                    if (client) {
                        r = session.clientBandwidth(s, reportGbits);
                        session.finishSize();
                    } else {
                        r = session.serverBandwidth(s, reportGbits);
                    }
                    if (r != null && printTable) {
                        progress.clear();
                        out.print(PerfReport.row(r, reportGbits));
                        rows.add(PerfReport.json(r, reportGbits));
                    }
                } else if (client) {
                    LatencyResult r = session.clientLatency(s);
                    session.finishSize();
                    progress.clear();
                    out.print(PerfReport.row(r, plan.durationMode()));
                    rows.add(PerfReport.json(r, plan.durationMode()));
                } else {
                    session.serverLatency(s);
                }
                out.flush();
            }
            progress.clear();
            out.println(PerfReport.RESULT_LINE);
            out.flush();
            lastAllocatedBytes = client ? session.measuredLoopAllocatedBytes() : -1;
            if (checkAllocation && client) {
                err.println("# heap bytes allocated by the client inside the measured loops: " + lastAllocatedBytes);
            }
            if (jsonFile != null && !rows.isEmpty()) {
                writeJson(plan, dev, session, rows);
            }
            return 0;
        }
    }

    private void writeJson(PerfPlan plan, Device dev, PerfSession session, List<Map<String, Object>> rows)
        throws IOException {
        Map<String, Object> parameters = new LinkedHashMap<>();
        parameters.put("test", plan.test().perftestName());
        parameters.put("device", dev.name());
        parameters.put("provider", dev.providerName());
        parameters.put("transport", session.attributes().transport());
        parameters.put("link_type", session.port().linkLayer());
        parameters.put("mtu", session.port().activeMtu().bytes());
        parameters.put("num_of_qps", plan.queuePairs());
        parameters.put("tx_depth", plan.txDepth());
        parameters.put("cq_mod", plan.cqModeration());
        parameters.put("inline_size", session.inlineSize());
        parameters.put("iterations", plan.iterations());
        parameters.put("warmup_iterations", plan.warmupIterations());
        parameters.put("duration", plan.durationSeconds());
        parameters.put("report_gbits", reportGbits);
        parameters.put("client_loop_allocated_bytes", session.measuredLoopAllocatedBytes());
        Path parent = jsonFile.toAbsolutePath().getParent();
        if (parent != null) {
            Files.createDirectories(parent);
        }
        Files.writeString(jsonFile, Json.write(PerfReport.document(parameters, rows, plan.sweep())));
    }
}
