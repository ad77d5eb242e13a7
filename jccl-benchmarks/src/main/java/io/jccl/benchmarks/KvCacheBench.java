package io.jccl.benchmarks;

import io.jccl.collectives.CommunicatorOptions;
import io.jccl.collectives.store.InMemoryStore;
import io.jccl.collectives.store.Store;
import io.jccl.services.kvcache.KvBlockPool;
import io.jccl.services.kvcache.KvCacheLayout;
import io.jccl.services.kvcache.KvCacheReceiver;
import io.jccl.services.kvcache.KvCacheSender;
import io.jccl.services.kvcache.KvRequest;
import io.jccl.services.transfer.TransferEngine;
import io.jccl.services.transfer.TransferSettings;

import java.time.Duration;
import java.util.ArrayDeque;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * KV-cache transfer (jccl-services) against block size on one device: prefill (rank 0) sends requests of
 * {@code --blocks} blocks to decode (rank 1), which takes each whole request and releases it at once (its blocks go
 * back to the prefill side); up to 4 requests in flight, the decode pool holding 8 (so that returns overlap new
 * requests). Two table rows per
 * block size: blocks consecutive in the prefill pool (one WRITE per request: coalesced) and scattered (every other
 * block: one WRITE per block). Beside them, in the same JVM and run, a raw verbs WRITE stream of one block per work
 * request over the engine's queue pairs: the ratio column. Two ranks as threads of this JVM, each with its own
 * engine and device context; {@code bench/kvcache} runs it beside {@code jccl perf write_bw --local}.
 *
 * <pre>
 * java -cp ... io.jccl.benchmarks.KvCacheBench [--device shm0|tcp0] [--tokens 16,64,256] [--blocks 8]
 *     [--layers 4] [--heads 2] [--head-dim 64] [--element-bytes 2] [--seconds 1] [--rounds 3]
 * </pre>
 */
public final class KvCacheBench {
    private static final int IN_FLIGHT = 4;

    private KvCacheBench() {
    }

    /** Entry point. */
    public static void main(String[] args) throws Exception {
        String device = option(args, "--device", "shm0");
        double seconds = Double.parseDouble(option(args, "--seconds", "1"));
        int rounds = Integer.parseInt(option(args, "--rounds", "3"));
        int blocks = Integer.parseInt(option(args, "--blocks", "8"));
        int layers = Integer.parseInt(option(args, "--layers", "4"));
        int heads = Integer.parseInt(option(args, "--heads", "2"));
        int headDim = Integer.parseInt(option(args, "--head-dim", "64"));
        int elementBytes = Integer.parseInt(option(args, "--element-bytes", "2"));
        long durationNs = (long) (seconds * 1e9);
        TransferSettings settings = TransferSettings.fromEnvironment();
        System.out.printf("KV-cache transfer on %s: requests of %d blocks, %d layers x %d KV heads x %d x %d B per "
            + "token (K and V), %d requests in flight, decode pool of twice that; median of %d rounds of %.1f s; "
            + "raw = a WRITE stream of one block per request over %d QPs in the same JVM%n", device, blocks, layers,
            heads, headDim, elementBytes,
            IN_FLIGHT, rounds, seconds, settings.queuePairsPerPeer());
        System.out.printf("%-7s %-10s %-11s %12s %10s %10s %7s%n", "tokens", "block", "prefill", "blocks/s", "GB/s",
            "raw GB/s", "ratio");
        // Warm-up (JIT, class loading, first connections), not measured: without it the first row of every run came
        // out lowest whatever it measured.
        blocksPerSecond(device, settings, new KvCacheLayout(16, layers, heads, headDim, elementBytes), blocks, false,
            durationNs / 2);
        for (String t : option(args, "--tokens", "16,64,256").split(",")) {
            KvCacheLayout layout = new KvCacheLayout(Integer.parseInt(t.trim()), layers, heads, headDim, elementBytes);
            double[][] kv = new double[2][rounds];
            double[] raw = new double[rounds];
            for (int r = 0; r < rounds; r++) {
                // Contiguous, scattered and raw interleaved round by round, so that all three see the same (shared,
                // loaded) machine. A round that fails (on an overloaded host a tcp0 link can be declared dead) is
                // reported and left out of the median.
                for (int mode = 0; mode < 2; mode++) {
                    try {
                        kv[mode][r] = blocksPerSecond(device, settings, layout, blocks, mode == 1, durationNs);
                    } catch (Exception e) {
                        kv[mode][r] = Double.NaN;
                        System.out.println("  (KV round " + r + " failed: " + e + ")");
                    }
                }
                try {
                    raw[r] = TransferBench.rawBandwidth(device, layout.blockBytes(), settings.queuePairsPerPeer(),
                        durationNs);
                } catch (RuntimeException e) {
                    raw[r] = Double.NaN;
                    System.out.println("  (raw round " + r + " failed: " + e + ")");
                }
            }
            double rawGbs = median(raw);
            for (int mode = 0; mode < 2; mode++) {
                double blocksPerS = median(kv[mode]);
                double gbs = blocksPerS * layout.blockBytes() / 1e9;
                System.out.printf("%-7s %-10s %-11s %12.0f %10.2f %10.2f %7.2f%n", t.trim(),
                    size(layout.blockBytes()), mode == 1 ? "scattered" : "contiguous", blocksPerS, gbs, rawGbs,
                    gbs / rawGbs);
            }
        }
    }

    private static String size(long bytes) {
        return bytes >= (1 << 20) ? (bytes >> 20) + " MiB" : (bytes >> 10) + " KiB";
    }

    /** Median of the rounds that did not fail (NaN when all failed). */
    private static double median(double[] v) {
        double[] s = java.util.Arrays.stream(v).filter(Double::isFinite).sorted().toArray();
        if (s.length == 0) {
            return Double.NaN;
        }
        return s.length % 2 == 1 ? s[s.length / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
    }

    private static String option(String[] args, String name, String fallback) {
        for (int i = 0; i + 1 < args.length; i++) {
            if (args[i].equals(name)) {
                return args[i + 1];
            }
        }
        return fallback;
    }

    /** Blocks per second prefill → decode for {@code durationNs}, after a warm-up of 0.2 s. */
    private static double blocksPerSecond(String device, TransferSettings settings, KvCacheLayout layout, int blocks,
                                          boolean scattered, long durationNs) throws Exception {
        Store store = new InMemoryStore();
        CommunicatorOptions options = CommunicatorOptions.fromEnvironment().withTransports(device)
            .withTimeout(Duration.ofSeconds(120));
        CyclicBarrier barrier = new CyclicBarrier(2);
        AtomicBoolean stop = new AtomicBoolean();
        CompletableFuture<Void> decode = new CompletableFuture<>();
        Thread.ofPlatform().daemon().start(() -> {
            try (TransferEngine e = TransferEngine.create(store, 1, 2, options, settings);
                 KvCacheReceiver receiver = KvCacheReceiver.create(e, "bench", layout, 2 * IN_FLIGHT * blocks)) {
                barrier.await();
                while (!stop.get()) {
                    KvRequest r = receiver.poll(10, TimeUnit.MILLISECONDS);
                    if (r != null) {
                        receiver.release(r);
                    }
                }
                barrier.await(60, TimeUnit.SECONDS); // the prefill side is done before this engine closes
                decode.complete(null);
            } catch (Throwable t) {
                barrier.reset();
                decode.completeExceptionally(t);
            }
        });
        CompletableFuture<Double> prefill = new CompletableFuture<>();
        Thread.ofPlatform().start(() -> {
            try (TransferEngine e = TransferEngine.create(store, 0, 2, options, settings);
                 KvBlockPool pool = KvBlockPool.register(e, "bench/prefill", layout, 2 * blocks)) {
                barrier.await();
                int[] table = new int[blocks];
                for (int i = 0; i < blocks; i++) {
                    table[i] = scattered ? 2 * i : i;
                }
                try (KvCacheSender sender = KvCacheSender.open(e, "bench", pool, Duration.ofSeconds(60))) {
                    ArrayDeque<KvCacheSender.Send> inFlight = new ArrayDeque<>();
                    long id = 0;
                    long start = System.nanoTime();
                    long measureFrom = start + 200_000_000L;
                    long end = measureFrom + durationNs;
                    long measured = 0;
                    long now = start;
                    while (now - end < 0) {
                        if (inFlight.size() == IN_FLIGHT) {
                            inFlight.pollFirst().await();
                            if (now - measureFrom >= 0) {
                                measured++;
                            }
                        }
                        inFlight.addLast(sender.submit(id++, table, blocks, blocks * layout.tokensPerBlock(),
                            Duration.ofSeconds(60)));
                        now = System.nanoTime();
                    }
                    while (!inFlight.isEmpty()) {
                        inFlight.pollFirst().await();
                    }
                    sender.awaitReturned(Duration.ofSeconds(60));
                    stop.set(true);
                    barrier.await(60, TimeUnit.SECONDS);
                    prefill.complete(measured * (double) blocks / (durationNs / 1e9));
                }
            } catch (Throwable t) {
                stop.set(true);
                barrier.reset();
                prefill.completeExceptionally(t);
            }
        });
        double result = prefill.get(300, TimeUnit.SECONDS);
        decode.get(60, TimeUnit.SECONDS);
        return result;
    }
}
