package io.jccl.examples;

import io.jccl.collectives.CommunicatorOptions;
import io.jccl.collectives.store.InMemoryStore;
import io.jccl.collectives.store.Store;
import io.jccl.examples.digits.DigitsDataset;
import io.jccl.examples.digits.MultilayerPerceptron;
import io.jccl.services.ps.OptimizerSpec;
import io.jccl.services.ps.ParameterServer;
import io.jccl.services.ps.ParameterServerSpec;
import io.jccl.services.ps.ParameterWorker;
import io.jccl.services.transfer.TransferEngine;
import io.jccl.services.transfer.TransferSettings;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * Trains {@code jccl demo}'s digits classifier (the same 64-32-10 MLP, data, global batch of 64 and shuffle) through
 * the parameter server (jccl-services, {@code io.jccl.services.ps}): server ranks hold the weights' shards and apply
 * the optimizer; every worker, each step, READs the weights (no server CPU), computes the gradient of its share of
 * the global batch and pushes it (WRITE + WRITE_WITH_IMM). Worker 0 prints the test accuracy, which reaches the
 * demo's (~97% after 30 epochs).
 *
 * <pre>
 * ./jccl example ParameterServerTrainingExample [--device shm0|tcp0] [--servers 2] [--workers 2] [--epochs 30]
 *     [--optimizer sgd|adam] [--staleness S]     every rank a thread of this process, own engine and devices;
 * ./jccl run -np 4 ... io.jccl.examples.ParameterServerTrainingExample --servers 2 [...]
 *     one rank per process (ranks 0..servers-1 serve, the others train).
 * </pre>
 */
public final class ParameterServerTrainingExample {
    static final int HIDDEN = 32;
    static final int BATCH = 64;
    static final long MODEL_SEED = 42;
    static final long SHUFFLE_SEED = 11;
    static final int TEST_IMAGES = 297;

    private ParameterServerTrainingExample() {
    }

    /**
     * What one run is.
     *
     * @param servers server ranks
     * @param workers worker ranks
     * @param epochs passes over the training set
     * @param optimizer {@code sgd} (momentum 0.9, lr 0.05) or {@code adam} (lr 0.01)
     * @param staleness -1: synchronous; otherwise the asynchronous mode's bound
     */
    public record Settings(int servers, int workers, int epochs, String optimizer, int staleness) {
        ParameterServerSpec spec(int parameterCount) {
            // SGD: momentum 0.9 at lr 0.05 moves as the demo's plain SGD at lr 0.5 once the momentum built up.
            OptimizerSpec o = optimizer.equals("adam") ? OptimizerSpec.adam(0.01f) : OptimizerSpec.sgd(0.05f, 0.9f);
            ParameterServerSpec s = ParameterServerSpec.synchronous("digits", servers, workers, parameterCount, o,
                1f / BATCH).withTimeout(Duration.ofSeconds(120));
            return staleness < 0 ? s : s.withStaleness(staleness);
        }
    }

    /** Entry point. */
    public static void main(String[] args) throws Exception {
        Settings settings = new Settings(Integer.parseInt(ExampleSupport.option(args, "--servers", "2")),
            Integer.parseInt(ExampleSupport.option(args, "--workers", "2")),
            Integer.parseInt(ExampleSupport.option(args, "--epochs", "30")),
            ExampleSupport.option(args, "--optimizer", "sgd"),
            Integer.parseInt(ExampleSupport.option(args, "--staleness", "-1")));
        String report;
        if (ExampleSupport.launched(System.getenv())) {
            try (TransferEngine engine = TransferEngine.fromEnvironment()) {
                Settings s = new Settings(settings.servers(), engine.size() - settings.servers(), settings.epochs(),
                    settings.optimizer(), settings.staleness());
                report = runRank(engine, s);
            }
        } else {
            report = runAll(ExampleSupport.option(args, "--device", "shm0"), settings);
        }
        System.out.println(report);
    }

    /** Runs every rank as a thread of this process over {@code device}; returns worker 0's report. */
    public static String runAll(String device, Settings settings) throws Exception {
        Store store = new InMemoryStore();
        CommunicatorOptions options = CommunicatorOptions.fromEnvironment().withTransports(device)
            .withTimeout(Duration.ofSeconds(120));
        int ranks = settings.servers() + settings.workers();
        List<CompletableFuture<String>> results = new ArrayList<>();
        for (int r = 0; r < ranks; r++) {
            int rank = r;
            CompletableFuture<String> result = new CompletableFuture<>();
            Thread.ofPlatform().daemon().name("ps-rank-" + r).start(() -> {
                String out = null;
                try (TransferEngine engine = TransferEngine.create(store, rank, ranks, options,
                    TransferSettings.fromEnvironment())) {
                    out = runRank(engine, settings);
                } catch (Exception e) {
                    result.completeExceptionally(new IllegalStateException("rank " + rank + ": " + e.getMessage(), e));
                }
                result.complete(out);
            });
            results.add(result);
        }
        // The first failure ends the wait (a server would otherwise wait its timeout for a worker that is gone).
        CompletableFuture<Object> firstFailure = new CompletableFuture<>();
        for (CompletableFuture<String> f : results) {
            f.whenComplete((v, e) -> {
                if (e != null) {
                    firstFailure.completeExceptionally(e);
                }
            });
        }
        CompletableFuture.anyOf(CompletableFuture.allOf(results.toArray(CompletableFuture[]::new)), firstFailure)
            .get(600, TimeUnit.SECONDS);
        return results.get(settings.servers()).get();
    }

    /** One rank's part: serve (ranks below {@code servers}) or train. */
    static String runRank(TransferEngine engine, Settings settings) {
        DigitsDataset data = DigitsDataset.load(TEST_IMAGES, 7);
        MultilayerPerceptron model = new MultilayerPerceptron(DigitsDataset.FEATURES, HIDDEN, DigitsDataset.CLASSES,
            MODEL_SEED);
        ParameterServerSpec spec = settings.spec(model.parameterCount());
        if (engine.rank() < settings.servers()) {
            try (ParameterServer server = ParameterServer.start(engine, spec, model.parameters())) {
                server.serve();
                return "server " + server.server() + ": " + server.version() + " updates";
            }
        }
        StringBuilder report = new StringBuilder();
        try (ParameterWorker worker = ParameterWorker.connect(engine, spec)) {
            int w = worker.worker();
            if (w == 0) {
                report.append(String.format(Locale.ROOT, "training the 64-%d-10 digits classifier through %d "
                        + "parameter server(s) and %d worker(s) over %s, %s, %s, global batch %d, %d epochs%n",
                    HIDDEN, settings.servers(), settings.workers(), engine.deviceFor(0), settings.optimizer(),
                    spec.isSynchronous() ? "synchronous" : "staleness " + spec.staleness(), BATCH,
                    settings.epochs()));
            }
            int n = data.trainLabels().length;
            int[] order = new int[n];
            for (int i = 0; i < n; i++) {
                order[i] = i;
            }
            Random shuffler = new Random(SHUFFLE_SEED);
            float[] parameters = model.parameters();
            float[] gradient = new float[model.parameterCount()];
            long start = System.nanoTime();
            double accuracy = 0;
            for (int epoch = 1; epoch <= settings.epochs(); epoch++) {
                DigitsDataset.shuffle(order, shuffler);
                for (int from = 0; from < n; from += BATCH) {
                    int size = Math.min(BATCH, n - from);
                    // This worker's contiguous share of the global batch (as jccl demo splits it over ranks).
                    int lo = from + (int) ((long) size * w / settings.workers());
                    int hi = from + (int) ((long) size * (w + 1) / settings.workers());
                    worker.pull(parameters);
                    java.util.Arrays.fill(gradient, 0f);
                    for (int i = lo; i < hi; i++) {
                        model.accumulateGradient(data.trainFeatures()[order[i]], data.trainLabels()[order[i]],
                            gradient);
                    }
                    worker.push(gradient);
                }
                if (w == 0 && (epoch == 1 || epoch % 5 == 0 || epoch == settings.epochs())) {
                    worker.pull(parameters);
                    accuracy = model.accuracy(data.testFeatures(), data.testLabels());
                    report.append(String.format(Locale.ROOT, "epoch %3d  test accuracy %.1f%%%n", epoch,
                        100 * accuracy));
                }
            }
            if (w == 0) {
                report.append(String.format(Locale.ROOT, "%d steps in %.2f s; final test accuracy %.1f%%",
                    worker.steps(), (System.nanoTime() - start) / 1e9, 100 * accuracy));
            }
        }
        return report.toString();
    }
}
