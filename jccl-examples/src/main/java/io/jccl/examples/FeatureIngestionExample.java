package io.jccl.examples;

import io.jccl.services.ingest.IngestConsumer;
import io.jccl.services.ingest.IngestLog;
import io.jccl.services.ingest.IngestProducer;
import io.jccl.services.ingest.IngestSettings;
import io.jccl.services.ingest.IngestStats;
import io.jccl.services.ingest.RecordHandler;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The feature ingestion ring (jccl-services) as an online feature store's write path: producers stream feature
 * updates (an entity id and a vector of 8 floats) into the consumer's ring; the consumer keeps the latest vector per
 * entity (the online table), snapshots what it read to disk and acknowledges it; the example reports throughput and
 * the ingest-to-visible lag, then rebuilds the table from the snapshots alone, as a restarted consumer would, and
 * checks it equals the live one.
 *
 * <pre>
 * ./jccl example FeatureIngestionExample [--device shm0|tcp0] [--producers 2] [--records 20000] [--entities 1000]
 *     [--dir DIR]   (default: a temporary directory, deleted afterwards)
 * </pre>
 */
public final class FeatureIngestionExample {
    private static final int FEATURES = 8;
    private static final int RECORD_BYTES = 8 + 4 * FEATURES;

    private FeatureIngestionExample() {
    }

    /** Entry point. */
    public static void main(String[] args) throws Exception {
        String dir = ExampleSupport.option(args, "--dir", "");
        Path directory = dir.isEmpty() ? Files.createTempDirectory("jccl-feature-ingestion") : Path.of(dir);
        try {
            System.out.println(run(ExampleSupport.option(args, "--device", "shm0"),
                Integer.parseInt(ExampleSupport.option(args, "--producers", "2")),
                Integer.parseInt(ExampleSupport.option(args, "--records", "20000")),
                Integer.parseInt(ExampleSupport.option(args, "--entities", "1000")), directory));
        } finally {
            if (dir.isEmpty()) {
                try (var files = Files.walk(directory)) {
                    for (Path p : files.sorted(java.util.Comparator.reverseOrder()).toList()) {
                        Files.deleteIfExists(p);
                    }
                }
            }
        }
    }

    /** Runs consumer and producers in this process over {@code device}; returns the report. */
    public static String run(String device, int producers, int records, int entities, Path directory)
        throws Exception {
        IngestSettings settings = IngestSettings.fromEnvironment().withDevice(device).withDirectory(directory)
            .withBindAddress(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
        Map<Long, float[]> online = new HashMap<>();
        RecordHandler toTable = (producer, sequence, timestampNs, buffer, offset, length) ->
            online.put(buffer.get(ValueLayout.JAVA_LONG_UNALIGNED, offset), features(buffer, offset));
        StringBuilder report = new StringBuilder();
        long startNs = System.nanoTime();
        IngestStats stats;
        try (IngestConsumer consumer = IngestConsumer.open(settings)) {
            AtomicBoolean done = new AtomicBoolean();
            List<Thread> threads = new ArrayList<>();
            List<Throwable> failures = new ArrayList<>();
            for (int p = 0; p < producers; p++) {
                int id = p;
                threads.add(Thread.ofPlatform().name("feature-producer-" + p).start(() -> {
                    try (IngestProducer producer = IngestProducer.connect(consumer.address(), id, settings)) {
                        byte[] record = new byte[RECORD_BYTES];
                        MemorySegment view = MemorySegment.ofArray(record);
                        for (int i = 0; i < records / producers; i++) {
                            long entity = (i * 7919L + id) % entities;
                            view.set(ValueLayout.JAVA_LONG_UNALIGNED, 0, entity);
                            for (int f = 0; f < FEATURES; f++) {
                                view.set(ValueLayout.JAVA_FLOAT_UNALIGNED, 8 + 4 * f, entity + f + i * 0.001f);
                            }
                            producer.append(record);
                        }
                        producer.flush(Duration.ofSeconds(60)); // every record durable: acknowledged
                    } catch (Throwable e) {
                        synchronized (failures) {
                            failures.add(e);
                        }
                    }
                }));
            }
            Thread watcher = Thread.ofPlatform().start(() -> {
                for (Thread t : threads) {
                    try {
                        t.join();
                    } catch (InterruptedException e) {
                        return;
                    }
                }
                done.set(true);
            });
            while (!done.get()) {
                if (consumer.poll(toTable, 1024) == 0) {
                    Thread.onSpinWait();
                }
            }
            watcher.join();
            while (consumer.poll(toTable, 1024) > 0) {
                Thread.onSpinWait(); // what the last flushes left unread (none: flush waited for it)
            }
            if (!failures.isEmpty()) {
                throw new IllegalStateException("a producer failed", failures.getFirst());
            }
            consumer.awaitDurable(Duration.ofSeconds(30));
            stats = consumer.stats();
        }
        double seconds = (System.nanoTime() - startNs) / 1e9;
        report.append(String.format("%d producers appended %d feature updates over %s in %.2f s (%.0f records/s)%n",
            producers, stats.records(), device, seconds, stats.records() / seconds));
        report.append(String.format("ingest-to-visible lag: p50 %.1f us, p99 %.1f us, max %.1f us%n",
            stats.lagP50Ns() / 1e3, stats.lagP99Ns() / 1e3, stats.lagMaxNs() / 1e3));
        report.append(String.format("durable (acknowledged): %d records in %d snapshots in %s%n",
            stats.durableRecords(), stats.snapshots(), directory));
        Map<Long, float[]> rebuilt = new HashMap<>();
        long[] last = IngestLog.replay(directory, (producer, sequence, timestampNs, buffer, offset, length) ->
            rebuilt.put(buffer.get(ValueLayout.JAVA_LONG_UNALIGNED, offset), features(buffer, offset)));
        boolean same = rebuilt.size() == online.size() && online.entrySet().stream()
            .allMatch(e -> Arrays.equals(e.getValue(), rebuilt.get(e.getKey())));
        report.append(String.format("rebuilt from the snapshots: %d entities, %s; last sequences %s%n",
            rebuilt.size(), same ? "identical to the online table" : "DIFFERENT from the online table",
            Arrays.toString(Arrays.copyOf(last, producers))));
        return report.toString();
    }

    private static float[] features(MemorySegment buffer, long offset) {
        float[] values = new float[FEATURES];
        for (int f = 0; f < FEATURES; f++) {
            values[f] = buffer.get(ValueLayout.JAVA_FLOAT_UNALIGNED, offset + 8 + 4 * f);
        }
        return values;
    }
}
