package io.jccl.benchmarks;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;

/**
 * JCCL collective timing with exactly the method and CSV of the peers' {@code mpi_coll.c}
 * ({@code ../shared/peers/src/mpi_coll.c}), so that {@code bench/compare} compares like for like.
 *
 * <pre>
 * usage: CollectiveBench &lt;impl-label&gt; [ops-spec] [blocks] [target_seconds]
 *   [jit_warmup_seconds]
 *   ops-spec like "allreduce:8,1024;bcast:1048576;allgather:1048576" (bytes; allgather = total output bytes)
 *   jit_warmup_seconds: before the method below, run each case at least 20000 times and at least this long,
 *   stopping at this long (10x up to 64 KiB) (default 0 = exactly mpi_coll.c)
 * </pre>
 *
 * <p>Method, per op and size: 3 warm-up ops; Barrier; 5 ops timed, the estimate is the MAX over ranks; iters =
 * target / estimate clamped to [3, 20000]; then {@code blocks} blocks of Barrier + iters ops, block time = MAX over
 * ranks of (elapsed / iters); median, min and max over the blocks. float32, SUM, out-of-place allreduce, broadcast
 * from root 0 in place, allgather of count = bytes / 4 / n floats per rank. algbw = bytes / median; busbw = algbw ×
 * 2(n-1)/n (allreduce, and {@code allreduce_inplace}: send buffer = receive buffer), (n-1)/n (allgather), 1
 * (broadcast), as nccl-tests. Buffers come from the communicator's allocator (registered, page-aligned): one send
 * and one receive buffer for the largest size, used from their start by every size. After the blocks every element
 * of the result is checked (allreduce: n(n+1)/2; broadcast: 1; allgather: segment r = r+1);
 * a mismatch prints the first bad element and exits with status 3.
 *
 * <p>The communicator comes from the environment that {@code ./jccl run -np N} sets (JCCL_RANK, JCCL_WORLD_SIZE,
 * JCCL_STORE_ADDR …); {@code JCCL_BENCH_BACKEND=local} runs a single rank without communication (for testing the
 * harness). CSV: {@code impl,op,nranks,bytes,iters,blocks,median_us,min_us,max_us,algbw_GBps,busbw_GBps}, printed
 * by rank 0, preceded by a {@code #} line naming the library.
 */
public final class CollectiveBench {
    static final String DEFAULT_SPEC = "allreduce:8,1024,65536,1048576,16777216,67108864;bcast:1048576,16777216;"
        + "allgather:1048576,16777216";

    private CollectiveBench() {
    }

    /**
     * The in-place all-reduce (send buffer = receive buffer), as torch.distributed's {@code all_reduce(tensor)} and
     * DDP's gradient buckets call it: gloo has only this form, so it is the like-for-like comparison with gloo.
     */
    static final String ALLREDUCE_IN_PLACE = "allreduce_inplace";

    /** One (op, bytes) pair of the spec. */
    record Case(String op, long bytes) {
    }

    /** Parses "op:size,size;op:size". */
    static List<Case> parseSpec(String spec) {
        List<Case> cases = new ArrayList<>();
        for (String part : spec.split(";")) {
            if (part.isBlank()) {
                continue;
            }
            int colon = part.indexOf(':');
            if (colon < 0) {
                continue;
            }
            String op = part.substring(0, colon).trim();
            if (!op.equals("allreduce") && !op.equals(ALLREDUCE_IN_PLACE) && !op.equals("bcast")
                && !op.equals("allgather")) {
                throw new IllegalArgumentException("unknown op " + op + " (allreduce, " + ALLREDUCE_IN_PLACE
                    + ", bcast, allgather)");
            }
            for (String size : part.substring(colon + 1).split(",")) {
                if (!size.isBlank()) {
                    cases.add(new Case(op, Long.parseLong(size.trim())));
                }
            }
        }
        return cases;
    }

    /** Runs the benchmark; returns the exit status. */
    public static int run(BenchBackend comm, String impl, String spec, int blocks, double target) {
        return run(comm, impl, spec, blocks, target, 0);
    }

    /**
     * Runs the benchmark with an optional JIT warm-up: before mpi_coll.c's own 3 warm-up ops of each case, the
     * operation runs {@link #WARMUP_OPS} times or for {@code jitWarmupSeconds} (ten times that up to 64 KiB),
     * whichever comes first (0: no warm-up, exactly mpi_coll.c). The compiled code of a JVM
     * library is only as fast as C once it has run some thousand times; mpi_coll.c's 3 + 5 ops leave the first
     * sizes of a sweep to the interpreter and the first compiler tier.
     */
    public static int run(BenchBackend comm, String impl, String spec, int blocks, double target,
                          double jitWarmupSeconds) {
        int rank = comm.rank();
        int n = comm.size();
        blocks = Math.max(1, Math.min(blocks, 100));
        if (rank == 0) {
            System.out.println("# " + comm.describe());
            System.out.println("impl,op,nranks,bytes,iters,blocks,median_us,min_us,max_us,algbw_GBps,busbw_GBps");
            System.out.flush();
        }
        List<Case> cases = parseSpec(spec);
        // One send and one receive buffer, sized for the largest case and page-aligned; every case uses their
        // start (mpi_coll.c allocates per size; the memory is the same kind: page-aligned, here also registered).
        long maxSend = 4;
        long maxRecv = 4;
        for (Case c : cases) {
            boolean ag = c.op().equals("allgather");
            long count = Math.max(1, ag ? c.bytes() / 4 / n : c.bytes() / 4);
            maxSend = Math.max(maxSend, 4 * count);
            maxRecv = Math.max(maxRecv, 4 * count * (ag ? n : 1));
        }
        MemorySegment sendAll = comm.allocate(maxSend);
        MemorySegment recvAll = comm.allocate(maxRecv);
        for (Case c : cases) {
            boolean inPlace = c.op().equals(ALLREDUCE_IN_PLACE);
            boolean ar = inPlace || c.op().equals("allreduce");
            boolean ag = c.op().equals("allgather");
            long count = Math.max(1, ag ? c.bytes() / 4 / n : c.bytes() / 4);
            long recvCount = count * (ag ? n : 1);
            MemorySegment sb = sendAll.asSlice(0, 4 * count);
            MemorySegment rb = recvAll.asSlice(0, 4 * recvCount);
            if (rank == 0) {
                System.out.println("# algorithm " + c.op() + " " + c.bytes() + ": " + comm.algorithm(c.op(), c.bytes()));
            }
            for (long i = 0; i < count; i++) {
                sb.setAtIndex(ValueLayout.JAVA_FLOAT, i, rank + 1);
            }
            rb.fill((byte) 0);
            double factor = ar ? 2.0 * (n - 1) / n : ag ? (double) (n - 1) / n : 1.0;
            // In place the values grow n-fold per operation (to infinity after some hundred: adding infinities
            // costs what adding finite floats does); the check below starts again from rank + 1.
            Runnable op = inPlace ? () -> comm.allReduceSum(sb, sb, count)
                : ar ? () -> comm.allReduceSum(sb, rb, count)
                : ag ? () -> comm.allGather(sb, rb, count)
                : () -> comm.broadcast(sb, count, 0);
            if (jitWarmupSeconds > 0) {
                warmUp(comm, op, c.bytes(), jitWarmupSeconds);
            }
            timeOps(op, 3);
            comm.barrier();
            double est = timeOps(op, 5) / 5;
            double gest = comm.maxOverRanks(est);
            long iters = (long) (target / (gest > 1e-9 ? gest : 1e-9));
            iters = Math.max(3, Math.min(iters, 20000));
            double[] res = new double[blocks];
            for (int b = 0; b < blocks; b++) {
                comm.barrier();
                double t = timeOps(op, iters) / iters;
                res[b] = comm.maxOverRanks(t);
            }
            if (inPlace) {
                for (long i = 0; i < count; i++) {
                    sb.setAtIndex(ValueLayout.JAVA_FLOAT, i, rank + 1);
                }
                comm.barrier();
                op.run();
            }
            String bad = check(inPlace ? "allreduce" : c.op(), rank, n, sb, inPlace ? sb : rb, count);
            if (bad != null) {
                System.err.printf(Locale.ROOT, "rank %d %s %d: %s%n", rank, c.op(), c.bytes(), bad);
                System.err.flush();
                return 3;
            }
            if (rank == 0) {
                Arrays.sort(res);
                double med = res[blocks / 2];
                double algbw = c.bytes() / med / 1e9;
                System.out.printf(Locale.ROOT, "%s,%s,%d,%d,%d,%d,%.2f,%.2f,%.2f,%.3f,%.3f%n", impl, c.op(), n,
                    c.bytes(), iters, blocks, med * 1e6, res[0] * 1e6, res[blocks - 1] * 1e6, algbw,
                    algbw * factor);
                System.out.flush();
            }
        }
        comm.free(sendAll);
        comm.free(recvAll);
        return 0;
    }

    /** Operations after which the warm-up of a case stops (C2 compiles after roughly 10 000 invocations). */
    static final long WARMUP_OPS = 20000;

    /**
     * JIT warm-up of one case: runs op for at least {@link #WARMUP_OPS} operations and at least {@code seconds},
     * stopping at {@code seconds} (ten times that for cases of 64 KiB or less: those are the ones that start cold,
     * before any loop has been compiled, and are slow until C2 has compiled the path) even if fewer operations ran,
     * in chunks sized from a MAX-over-ranks estimate, so that every rank runs the same number of operations (every
     * decision uses values all ranks share). The time floor matters for the first, small cases of a JVM, whose
     * operations can all run before C2 has compiled the path (measured: docs/performance-results.md, "The warm-up's time
     * floor").
     */
    static void warmUp(BenchBackend comm, Runnable op, long bytes, double seconds) {
        double cap = bytes <= 65536 ? 10 * seconds : seconds;
        double spent = 0;
        long ops = 0;
        while (spent < cap && (ops < WARMUP_OPS || spent < seconds)) {
            // The same calls as a timed block (barrier, timeOps, MAX over ranks), so that the code the blocks run is
            // what the JIT compiles here: a path first taken inside the timed blocks (the barrier's, say) traps out
            // of compiled code and is recompiled there, on the core of a spinning rank.
            comm.barrier();
            double est = comm.maxOverRanks(timeOps(op, 5) / 5);
            spent += 5 * est;
            ops += 5;
            double left = cap - spent;
            if (left < 5 * est) {
                break;
            }
            double wanted = Math.max(WARMUP_OPS - ops, 0.5 * (seconds - spent) / Math.max(est, 1e-9));
            long n = (long) Math.max(1, Math.min(wanted, 0.5 * left / Math.max(est, 1e-9)));
            comm.barrier();
            ops += n;
            spent += comm.maxOverRanks(timeOps(op, n));
        }
        // Idle a moment, together, so the compilations the warm-up queued finish before the timed blocks: with as
        // many ranks as cores, a compiler thread that wakes inside a block takes a spinning rank's core.
        comm.barrier();
        io.jccl.tools.JitSettle.await();
        comm.barrier();
    }

    /**
     * Runs {@code op} {@code n} times and returns the elapsed seconds. The warm-up and every timed loop go through
     * this one method, so the loop the blocks time is already compiled (an own loop in the caller would be
     * compiled on stack, inside the first timed block).
     */
    static double timeOps(Runnable op, long n) {
        long t0 = System.nanoTime();
        for (long i = 0; i < n; i++) {
            op.run();
        }
        return (System.nanoTime() - t0) * 1e-9;
    }

    /** Checks every element of the result; returns a description of the first mismatch, or null. */
    static String check(String op, int rank, int n, MemorySegment sb, MemorySegment rb, long count) {
        switch (op) {
            case "allreduce" -> {
                float expect = n * (n + 1) / 2.0f;
                for (long i = 0; i < count; i++) {
                    float got = rb.getAtIndex(ValueLayout.JAVA_FLOAT, i);
                    if (got != expect) {
                        return "element " + i + ": got " + got + " expect " + expect;
                    }
                }
            }
            case "allgather" -> {
                for (int r = 0; r < n; r++) {
                    for (long i = 0; i < count; i++) {
                        float got = rb.getAtIndex(ValueLayout.JAVA_FLOAT, r * count + i);
                        if (got != r + 1) {
                            return "segment " + r + " element " + i + ": got " + got + " expect " + (r + 1);
                        }
                    }
                }
            }
            default -> {
                for (long i = 0; i < count; i++) {
                    float got = sb.getAtIndex(ValueLayout.JAVA_FLOAT, i);
                    if (got != 1.0f) {
                        return "element " + i + ": got " + got + " expect 1.0";
                    }
                }
            }
        }
        return null;
    }

    /** Entry point: {@code <impl-label> [ops-spec] [blocks] [target_seconds] [jit_warmup_seconds_per_case]}. */
    public static void main(String[] args) throws Exception {
        String impl = args.length > 0 ? args[0] : "jccl";
        String spec = args.length > 1 ? args[1] : DEFAULT_SPEC;
        int blocks = args.length > 2 ? Integer.parseInt(args[2]) : 5;
        double target = args.length > 3 ? Double.parseDouble(args[3]) : 0.2;
        double jitWarmup = args.length > 4 ? Double.parseDouble(args[4]) : 0;
        int status;
        try (BenchBackend comm = BenchBackend.fromEnvironment()) {
            if (comm.rank() == 0 && jitWarmup > 0) {
                System.out.printf(Locale.ROOT, "# JIT warm-up: each case runs at least %d ops and at least %.2f s, "
                    + "stopping at %.2f s (%.1f s up to 64 KiB), then idle until the JIT is quiet (0.25-3 s), before mpi_coll.c's method%n",
                    WARMUP_OPS, jitWarmup, jitWarmup, 10 * jitWarmup);
            }
            status = run(comm, impl, spec, blocks, target, jitWarmup);
        }
        System.exit(status);
    }
}
