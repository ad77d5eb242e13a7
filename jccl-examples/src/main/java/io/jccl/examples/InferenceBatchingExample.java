package io.jccl.examples;

import io.jccl.collectives.CommunicatorOptions;
import io.jccl.collectives.store.InMemoryStore;
import io.jccl.collectives.store.Store;
import io.jccl.examples.digits.DigitsDataset;
import io.jccl.examples.digits.MultilayerPerceptron;
import io.jccl.services.batching.BatchModel;
import io.jccl.services.batching.BatchingConfig;
import io.jccl.services.batching.BatchingStats;
import io.jccl.services.batching.InferenceClient;
import io.jccl.services.batching.InferenceResponse;
import io.jccl.services.batching.InferenceServer;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * The inference batching ring (jccl-services) serving the digits MLP that {@code jccl demo} trains: the consumer
 * trains the model for a few epochs, then serves it through an {@link InferenceServer} (Triton's dynamic batching:
 * max batch size, preferred sizes, max queue delay); several producer threads, each an {@link InferenceClient} with
 * its own lane of the ring, WRITE the held-out test images as requests and check the predicted digits that come
 * back. Prints accuracy, batch sizes and why batches closed, and request latency percentiles.
 *
 * <pre>
 * ./jccl example InferenceBatchingExample [--device shm0|tcp0] [--producers 4] [--requests 400]
 *     [--max-batch 16] [--preferred 8,16] [--delay-us 500]
 * </pre>
 */
public final class InferenceBatchingExample {
    private static final int HIDDEN = 32;
    /** Output row: the predicted digit, then the batch size the model ran (to show batching in the example). */
    private static final int OUTPUT_BYTES = 8;

    private InferenceBatchingExample() {
    }

    /** Entry point. */
    public static void main(String[] args) throws Exception {
        String device = ExampleSupport.option(args, "--device", "shm0");
        int producers = Integer.parseInt(ExampleSupport.option(args, "--producers", "4"));
        int requests = Integer.parseInt(ExampleSupport.option(args, "--requests", "400"));
        int maxBatch = Integer.parseInt(ExampleSupport.option(args, "--max-batch", "16"));
        int[] preferred = Arrays.stream(ExampleSupport.option(args, "--preferred", "8,16").split(","))
            .filter(s -> !s.isBlank()).mapToInt(Integer::parseInt).toArray();
        long delayUs = Long.parseLong(ExampleSupport.option(args, "--delay-us", "500"));
        System.out.println(run(device, producers, requests, maxBatch, preferred, delayUs));
    }

    /** The model as the batching service sees it: rows of 64 floats in, a digit out. */
    static BatchModel serve(MultilayerPerceptron model) {
        float[] x = new float[DigitsDataset.FEATURES];
        return (inputs, batchSize, outputs) -> {
            for (int i = 0; i < batchSize; i++) {
                MemorySegment.copy(inputs, ValueLayout.JAVA_FLOAT_UNALIGNED, (long) i * x.length * Float.BYTES, x, 0,
                    x.length);
                outputs.set(ValueLayout.JAVA_INT_UNALIGNED, (long) i * OUTPUT_BYTES, model.predict(x));
                outputs.set(ValueLayout.JAVA_INT_UNALIGNED, (long) i * OUTPUT_BYTES + 4, batchSize);
            }
        };
    }

    /** Trains, serves, sends {@code requests} test images from each of {@code producers} threads; the report. */
    public static String run(String device, int producers, int requests, int maxBatch, int[] preferred, long delayUs)
        throws Exception {
        DigitsDataset data = DigitsDataset.load(360, 7);
        MultilayerPerceptron model = train(data);
        double offline = model.accuracy(data.testFeatures(), data.testLabels());
        CommunicatorOptions options = CommunicatorOptions.fromEnvironment().withTransports(device)
            .withTimeout(Duration.ofSeconds(60));
        BatchingConfig config = BatchingConfig.of(DigitsDataset.FEATURES * Float.BYTES, OUTPUT_BYTES)
            .withDevice(device).withMaxBatchSize(maxBatch).withPreferredBatchSizes(preferred)
            .withMaxQueueDelayNs(TimeUnit.MICROSECONDS.toNanos(delayUs)).withSlotsPerProducer(8)
            .withMaxProducers(Math.max(1, producers));
        try (Store store = new InMemoryStore();
             InferenceServer server = InferenceServer.create(store, "digits", config, serve(model), options)) {
            List<CompletableFuture<long[]>> clients = new ArrayList<>();
            for (int p = 0; p < producers; p++) {
                int seed = p;
                // Platform threads: a producer waits in the provider's blocking poll, which would pin a virtual
                // thread's carrier.
                clients.add(CompletableFuture.supplyAsync(() -> produce(store, options, data, requests, seed),
                    r -> Thread.ofPlatform().daemon().name("producer-" + seed).start(r)));
            }
            long correct = 0;
            long[] latencies = new long[producers * requests];
            int n = 0;
            for (CompletableFuture<long[]> c : clients) {
                long[] r = c.get(120, TimeUnit.SECONDS);
                correct += r[0];
                System.arraycopy(r, 1, latencies, n, r.length - 1);
                n += r.length - 1;
            }
            Arrays.sort(latencies, 0, n);
            BatchingStats stats = server.stats();
            return String.format("%s: %d producers x %d requests, %s%n"
                    + "served accuracy %.3f (offline %.3f): every answer went to its requester%n"
                    + "%s%n"
                    + "latency p50 %.0f us, p99 %.0f us (submit to answer, producer side)",
                device, producers, requests, config, (double) correct / n, offline, stats,
                latencies[n / 2] / 1e3, latencies[Math.min(n - 1, (int) (n * 0.99))] / 1e3);
        }
    }

    private static long[] produce(Store store, CommunicatorOptions options, DigitsDataset data, int requests,
                                  int seed) {
        Random random = new Random(seed);
        long[] result = new long[1 + requests];
        int[] labelOf = new int[1 << 16];
        try (Arena arena = Arena.ofConfined();
             InferenceClient client = InferenceClient.connect(store, "digits", options)) {
            MemorySegment row = arena.allocate((long) DigitsDataset.FEATURES * Float.BYTES);
            int answered = 0;
            for (int i = 0; i < requests; i++) {
                int k = random.nextInt(data.testLabels().length);
                MemorySegment.copy(data.testFeatures()[k], 0, row, ValueLayout.JAVA_FLOAT_UNALIGNED, 0,
                    DigitsDataset.FEATURES);
                long id = client.submit(row);
                labelOf[(int) (id & 0xFFFF)] = data.testLabels()[k];
                // Keep a few requests in flight: answers come back in batches.
                while (client.inFlight() >= 4 || (i == requests - 1 && client.inFlight() > 0)) {
                    InferenceResponse r = client.poll(TimeUnit.SECONDS.toNanos(30));
                    if (r == null || !r.isOk()) {
                        throw new IllegalStateException("producer " + client.lane() + ": " + r);
                    }
                    if (r.output().get(ValueLayout.JAVA_INT_UNALIGNED, 0) == labelOf[(int) (r.requestId() & 0xFFFF)]) {
                        result[0]++;
                    }
                    result[1 + answered++] = r.latencyNs();
                }
            }
            return result;
        }
    }

    private static MultilayerPerceptron train(DigitsDataset data) {
        MultilayerPerceptron model = new MultilayerPerceptron(DigitsDataset.FEATURES, HIDDEN, DigitsDataset.CLASSES,
            42);
        float[] gradient = new float[model.parameterCount()];
        int[] order = new int[data.trainLabels().length];
        for (int i = 0; i < order.length; i++) {
            order[i] = i;
        }
        Random random = new Random(1);
        for (int epoch = 0; epoch < 10; epoch++) {
            DigitsDataset.shuffle(order, random);
            for (int start = 0; start + 32 <= order.length; start += 32) {
                Arrays.fill(gradient, 0f);
                for (int i = start; i < start + 32; i++) {
                    model.accumulateGradient(data.trainFeatures()[order[i]], data.trainLabels()[order[i]], gradient);
                }
                model.step(gradient, 0.5f, 32);
            }
        }
        return model;
    }
}
