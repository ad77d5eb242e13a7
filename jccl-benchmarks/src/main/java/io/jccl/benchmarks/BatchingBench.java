package io.jccl.benchmarks;

import io.jccl.collectives.CommunicatorOptions;
import io.jccl.collectives.store.InMemoryStore;
import io.jccl.collectives.store.Store;
import io.jccl.services.batching.BatchModel;
import io.jccl.services.batching.BatchingConfig;
import io.jccl.services.batching.BatchingStats;
import io.jccl.services.batching.InferenceClient;
import io.jccl.services.batching.InferenceResponse;
import io.jccl.services.batching.InferenceServer;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.Arrays;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * The inference batching ring under an open-loop offered load: {@code --producers} threads, each an
 * {@link InferenceClient}, submit requests at Poisson arrival times adding up to the offered rate; a request's
 * latency runs from its scheduled arrival (so time spent waiting for a free slot counts) to its answer. The model
 * stands in for an accelerator: a batch of {@code b} costs {@code --batch-us + b x --row-us} of CPU (a spin). Per
 * (max queue delay, offered load): achieved throughput, p50/p99 latency, mean batch size. The first 20% of each
 * point is warm-up and not counted (new batch sizes, JIT), and a throw-away point runs first. Throughput is answers
 * over the time they took (end of warm-up to last answer). One CSV line per point.
 *
 * <pre>
 * java -cp ... io.jccl.benchmarks.BatchingBench [--device shm0] [--loads 1000,2000,4000,8000]
 *     [--delays-us 0,250,1000] [--seconds 1] [--producers 2] [--max-batch 16] [--preferred 8,16]
 *     [--batch-us 200] [--row-us 10]
 * </pre>
 */
public final class BatchingBench {
    private static final int ROW_BYTES = 256;

    private BatchingBench() {
    }

    /** Entry point. */
    public static void main(String[] args) throws Exception {
        String device = option(args, "--device", "shm0");
        int[] loads = ints(option(args, "--loads", "1000,2000,4000,8000"));
        int[] delaysUs = ints(option(args, "--delays-us", "0,250,1000"));
        double seconds = Double.parseDouble(option(args, "--seconds", "1"));
        int producers = Integer.parseInt(option(args, "--producers", "2"));
        int maxBatch = Integer.parseInt(option(args, "--max-batch", "16"));
        int[] preferred = ints(option(args, "--preferred", "8,16"));
        long batchNs = TimeUnit.MICROSECONDS.toNanos(Long.parseLong(option(args, "--batch-us", "200")));
        long rowNs = TimeUnit.MICROSECONDS.toNanos(Long.parseLong(option(args, "--row-us", "10")));
        BatchModel model = (inputs, batchSize, outputs) -> {
            long until = System.nanoTime() + batchNs + batchSize * rowNs;
            while (System.nanoTime() < until) {
                Thread.onSpinWait();
            }
            MemorySegment.copy(inputs, 0, outputs, 0, Math.min(inputs.byteSize(), outputs.byteSize()));
        };
        // A throw-away point first (R5.3: JIT, first batch sizes, connections), reported apart as a comment.
        System.out.println("# warm-up: " + point(device, delaysUs[0], loads[loads.length - 1], seconds, producers,
            maxBatch, preferred, model));
        System.out.println("device,delay_us,offered_rps,achieved_rps,p50_us,p99_us,mean_batch,answered,timeouts");
        for (int delayUs : delaysUs) {
            for (int load : loads) {
                System.out.println(point(device, delayUs, load, seconds, producers, maxBatch, preferred, model));
            }
        }
    }

    private static String point(String device, int delayUs, int load, double seconds, int producers, int maxBatch,
                                int[] preferred, BatchModel model) throws Exception {
        CommunicatorOptions options = CommunicatorOptions.fromEnvironment().withTransports(device)
            .withTimeout(Duration.ofSeconds(60));
        BatchingConfig config = BatchingConfig.of(ROW_BYTES, ROW_BYTES).withDevice(device).withMaxBatchSize(maxBatch)
            .withPreferredBatchSizes(preferred).withMaxQueueDelayNs(TimeUnit.MICROSECONDS.toNanos(delayUs))
            .withSlotsPerProducer(64).withMaxProducers(producers);
        long durationNs = (long) (seconds * 1e9);
        long warmupNs = durationNs / 5;
        try (Store store = new InMemoryStore();
             InferenceServer server = InferenceServer.create(store, "bench", config, model, options)) {
            CompletableFuture<?>[] runs = new CompletableFuture<?>[producers];
            long[][] latencies = new long[producers][];
            int[] counts = new int[producers];
            long[][] spans = new long[producers][2];
            // Every producer connects first; the clock starts once all have (a slow connection is not load).
            java.util.concurrent.CyclicBarrier connected = new java.util.concurrent.CyclicBarrier(producers);
            for (int p = 0; p < producers; p++) {
                int id = p;
                latencies[p] = new long[(int) Math.max(16, 2L * load * seconds / producers + 1024)];
                runs[p] = CompletableFuture.runAsync(() -> counts[id] = produce(store, options, id,
                    (double) load / producers, connected, warmupNs, durationNs, latencies[id], spans[id]),
                    r -> Thread.ofPlatform().daemon().name("producer-" + id).start(r));
            }
            CompletableFuture.allOf(runs).get(10L * (long) Math.ceil(seconds) + 60, TimeUnit.SECONDS);
            int n = 0;
            for (int c : counts) {
                n += c;
            }
            long[] all = new long[n];
            int k = 0;
            for (int p = 0; p < producers; p++) {
                System.arraycopy(latencies[p], 0, all, k, counts[p]);
                k += counts[p];
            }
            Arrays.sort(all);
            BatchingStats stats = server.stats();
            // Throughput over the time answers took: from the end of the warm-up to the last answer (a lagging
            // server stretches it; offered requests are all answered eventually).
            long first = Long.MAX_VALUE;
            long last = Long.MIN_VALUE;
            for (long[] span : spans) {
                first = Math.min(first, span[0]);
                last = Math.max(last, span[1]);
            }
            double measured = Math.max(1, last - first) / 1e9;
            return String.format("%s,%d,%d,%.0f,%.1f,%.1f,%.2f,%d,%d", device, delayUs, load, n / measured,
                n == 0 ? 0 : all[n / 2] / 1e3, n == 0 ? 0 : all[Math.min(n - 1, (int) (n * 0.99))] / 1e3,
                stats.meanBatchSize(), n, stats.timeouts());
        }
    }

    /** One producer's open loop; returns how many answers after the warm-up it recorded into {@code out}. */
    private static int produce(Store store, CommunicatorOptions options, int id, double rate,
                               java.util.concurrent.CyclicBarrier connected, long warmupNs, long durationNs,
                               long[] out, long[] span) {
        Random random = new Random(id * 7919L + 1);
        long[] scheduledOf = new long[1 << 16];
        int recorded = 0;
        try (Arena arena = Arena.ofConfined();
             InferenceClient client = InferenceClient.connect(store, "bench", options)) {
            MemorySegment row = arena.allocate(ROW_BYTES);
            connected.await(60, TimeUnit.SECONDS);
            long start = System.nanoTime();
            long next = start;
            long end = start + durationNs;
            long countFrom = start + warmupNs;
            span[0] = countFrom;
            span[1] = countFrom;
            while (true) {
                long now = System.nanoTime();
                if (now >= end && client.inFlight() == 0) {
                    return recorded;
                }
                if (now >= next && next < end && client.inFlight() < client.slots()) {
                    long requestId = client.submit(row);
                    scheduledOf[(int) (requestId & 0xFFFF)] = next;
                    next += (long) (-Math.log(1 - random.nextDouble()) / rate * 1e9);
                    continue;
                }
                long waitNs = next < end && client.inFlight() < client.slots() ? Math.max(0, next - now)
                    : TimeUnit.MILLISECONDS.toNanos(1);
                InferenceResponse r = waitNs == 0 ? client.poll() : client.poll(waitNs);
                if (r != null) {
                    long scheduled = scheduledOf[(int) (r.requestId() & 0xFFFF)];
                    if (scheduled >= countFrom && recorded < out.length) {
                        long now2 = System.nanoTime();
                        out[recorded++] = now2 - scheduled;
                        span[1] = now2;
                    }
                }
            }
        } catch (Exception e) {
            throw new IllegalStateException("producer " + id + ": " + e, e);
        }
    }

    private static int[] ints(String list) {
        return Arrays.stream(list.split(",")).filter(s -> !s.isBlank()).mapToInt(Integer::parseInt).toArray();
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
