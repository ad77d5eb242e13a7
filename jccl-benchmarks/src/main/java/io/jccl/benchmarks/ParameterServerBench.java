package io.jccl.benchmarks;

import io.jccl.collectives.Communicator;
import io.jccl.collectives.CommunicatorOptions;
import io.jccl.collectives.DataType;
import io.jccl.collectives.ReduceOp;
import io.jccl.collectives.store.InMemoryStore;
import io.jccl.services.ps.Optimizer;
import io.jccl.services.ps.OptimizerSpec;
import io.jccl.services.ps.ParameterServer;
import io.jccl.services.ps.ParameterServerSpec;
import io.jccl.services.ps.ParameterWorker;
import io.jccl.services.transfer.TransferEngine;
import io.jccl.services.transfer.TransferSettings;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;

/**
 * The parameter server's step against all-reduce training's step on one device, in one run (issue 18): per model
 * size, one synchronous push + pull round per step (W workers, S servers; the servers sum the gradients and apply
 * SGD with momentum) against {@code Communicator.allReduce} of the same float32 gradient followed by the same SGD
 * update on every rank (W ranks). Every rank is a thread of this JVM with its own engine or communicator; the two
 * sides take turns round by round (they never run at once) and each round's time per step is recorded; the medians
 * and their ratio are printed.
 *
 * <pre>
 * java -cp ... io.jccl.benchmarks.ParameterServerBench [--device shm0|tcp0] [--sizes 16384,262144,2097152]
 *     [--workers 2] [--servers 1] [--rounds 5] [--steps-bytes 268435456]
 * </pre>
 * {@code --sizes} are float32 counts; each round runs {@code clamp(steps-bytes / model bytes, 10, 500)} steps.
 */
public final class ParameterServerBench {
    private ParameterServerBench() {
    }

    /** Entry point. */
    public static void main(String[] args) throws Exception {
        String device = option(args, "--device", "shm0");
        int workers = Integer.parseInt(option(args, "--workers", "2"));
        int servers = Integer.parseInt(option(args, "--servers", "1"));
        int rounds = Integer.parseInt(option(args, "--rounds", "5"));
        long stepsBytes = Long.parseLong(option(args, "--steps-bytes", String.valueOf(256L << 20)));
        System.out.printf(Locale.ROOT, "# ParameterServerBench --device %s: %d servers, %d workers; medians of %d "
            + "rounds, us per step%n", device, servers, workers, rounds);
        System.out.printf(Locale.ROOT, "%12s %8s %14s %14s %10s%n", "model", "steps", "push+pull", "allReduce",
            "ps/ar");
        for (String s : option(args, "--sizes", "16384,262144,2097152").split(",")) {
            int count = Integer.parseInt(s.trim());
            int steps = (int) Math.max(10, Math.min(500, stepsBytes / (4L * count)));
            double[][] us = measure(device, servers, workers, count, steps, rounds);
            double ps = median(us[0]);
            double ar = median(us[1]);
            System.out.printf(Locale.ROOT, "%12s %8d %14.1f %14.1f %10.2f%n", bytes(4L * count), steps, ps, ar,
                ps / ar);
        }
    }

    private static double[][] measure(String device, int servers, int workers, int count, int steps, int rounds)
        throws Exception {
        CommunicatorOptions options = CommunicatorOptions.fromEnvironment().withTransports(device)
            .withTimeout(Duration.ofSeconds(120));
        OptimizerSpec sgd = OptimizerSpec.sgd(0.01f, 0.9f);
        ParameterServerSpec spec = ParameterServerSpec.synchronous("bench", servers, workers, count, sgd,
            1f / workers).withTimeout(Duration.ofSeconds(120));
        double[] psUs = new double[rounds];
        double[] arUs = new double[rounds];
        // Turns: the PS workers and the all-reduce ranks meet twice a round, so only one side runs at a time.
        CyclicBarrier turns = new CyclicBarrier(2 * workers);
        InMemoryStore psStore = new InMemoryStore();
        InMemoryStore arStore = new InMemoryStore();
        List<CompletableFuture<Void>> all = new ArrayList<>();
        for (int r = 0; r < servers + workers; r++) {
            int rank = r;
            all.add(start("ps-" + r, () -> {
                try (TransferEngine engine = TransferEngine.create(psStore, rank, servers + workers, options,
                    TransferSettings.fromEnvironment())) {
                    if (rank < servers) {
                        try (ParameterServer server = ParameterServer.start(engine, spec, new float[count])) {
                            server.serve();
                        }
                        return;
                    }
                    float[] p = new float[count];
                    float[] g = new float[count];
                    Arrays.fill(g, 1e-3f);
                    try (ParameterWorker worker = ParameterWorker.connect(engine, spec)) {
                        for (int i = 0; i < 5; i++) { // warm-up
                            worker.pull(p);
                            worker.push(g);
                        }
                        for (int round = 0; round < rounds; round++) {
                            turns.await(300, TimeUnit.SECONDS);
                            long t0 = System.nanoTime();
                            for (int i = 0; i < steps; i++) {
                                worker.pull(p);
                                worker.push(g);
                            }
                            if (worker.worker() == 0) {
                                psUs[round] = (System.nanoTime() - t0) / 1e3 / steps;
                            }
                            turns.await(300, TimeUnit.SECONDS);
                        }
                        turns.await(300, TimeUnit.SECONDS); // the last all-reduce round runs alone too
                    }
                }
            }));
        }
        for (int r = 0; r < workers; r++) {
            int rank = r;
            all.add(start("ar-" + r, () -> {
                try (Communicator c = Communicator.create(arStore, rank, workers, options)) {
                    MemorySegment buffer = c.allocate(4L * count);
                    float[] p = new float[count];
                    float[] g = new float[count];
                    Optimizer optimizer = new Optimizer(sgd, count);
                    for (int i = 0; i < 5 + 2 * rounds; i++) {
                        if (i < 5) {
                            step(c, buffer, g, p, optimizer, count, workers);
                            continue;
                        }
                        turns.await(300, TimeUnit.SECONDS); // the PS side's turn is between these two
                        if ((i - 5) % 2 == 0) {
                            continue;
                        }
                        long t0 = System.nanoTime();
                        for (int k = 0; k < steps; k++) {
                            step(c, buffer, g, p, optimizer, count, workers);
                        }
                        if (rank == 0) {
                            arUs[(i - 5) / 2] = (System.nanoTime() - t0) / 1e3 / steps;
                        }
                    }
                    turns.await(300, TimeUnit.SECONDS);
                }
            }));
        }
        CompletableFuture.allOf(all.toArray(CompletableFuture[]::new)).get(1800, TimeUnit.SECONDS);
        return new double[][] {psUs, arUs};
    }

    /** One all-reduce training step: gradient into the buffer, allReduce SUM, back, SGD (as the servers do). */
    private static void step(Communicator c, MemorySegment buffer, float[] g, float[] p, Optimizer optimizer,
                             int count, int workers) {
        MemorySegment.copy(g, 0, buffer, ValueLayout.JAVA_FLOAT, 0, count);
        c.allReduce(buffer, count, DataType.FLOAT32, ReduceOp.SUM);
        MemorySegment.copy(buffer, ValueLayout.JAVA_FLOAT, 0, g, 0, count);
        optimizer.step(p, g, 1f / workers);
        Arrays.fill(g, 1e-3f);
    }

    private interface Body {
        void run() throws Exception;
    }

    private static CompletableFuture<Void> start(String name, Body body) {
        CompletableFuture<Void> f = new CompletableFuture<>();
        Thread.ofPlatform().daemon().name(name).start(() -> {
            try {
                body.run();
                f.complete(null);
            } catch (Throwable e) {
                f.completeExceptionally(e);
            }
        });
        return f;
    }

    private static double median(double[] values) {
        double[] v = values.clone();
        Arrays.sort(v);
        return v.length % 2 == 1 ? v[v.length / 2] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2;
    }

    private static String bytes(long n) {
        return n >= 1 << 20 ? (n >> 20) + " MiB" : (n >> 10) + " KiB";
    }

    private static String option(String[] args, String name, String fallback) {
        for (int i = 0; i + 1 < args.length; i++) {
            if (args[i].equals(name)) {
                return args[i + 1];
            }
        }
        return fallback;
    }
}
