package io.jccl.benchmarks;

import io.jccl.services.ingest.IngestConsumer;
import io.jccl.services.ingest.IngestProducer;
import io.jccl.services.ingest.IngestSettings;
import io.jccl.services.ingest.RecordHandler;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The feature ingestion ring (jccl-services) against a plain TCP socket producer → consumer, in one run: records/s
 * and per-record latency (p50, p99) for each record size and producer count, with the ring's two ways to send:
 * {@code append} (one reservation and one commit per record; returns once the record is in the consumer's memory)
 * and {@code offer} (records batched, up to JCCL_INGEST_BATCH_BYTES per reservation and commit; returns once the
 * record is in the producer's retention buffer, or after the batch it completed was committed), and the ring's
 * ingest-to-visible lag (producer's stamp to the consumer's handler, append mode, measured records only).
 * Producers and consumer are threads of this JVM; the ring's consumer snapshots to a temporary directory (fsync
 * every 50 ms) as it would in production. The socket baseline streams length-prefixed records over one connection
 * per producer to a reader thread per connection; its "append" returns when the kernel took the bytes. A warm-up
 * round of every kind runs first and is not reported.
 *
 * <pre>
 * java -cp ... io.jccl.benchmarks.IngestBench [--device shm0|tcp0] [--sizes 64,1024] [--producers 1,4]
 *     [--seconds 1] [--rounds 3]
 * </pre>
 */
public final class IngestBench {
    private static final int MAX_SAMPLES = 1 << 20;

    private IngestBench() {
    }

    /** One measured row. */
    private record Row(double recordsPerSecond, double p50Us, double p99Us, double lagP99Us) {
    }

    /** Entry point. */
    public static void main(String[] args) throws Exception {
        String device = option(args, "--device", "shm0");
        int[] sizes = Arrays.stream(option(args, "--sizes", "64,1024").split(",")).mapToInt(Integer::parseInt)
            .toArray();
        int[] producerCounts = Arrays.stream(option(args, "--producers", "1,4").split(","))
            .mapToInt(Integer::parseInt).toArray();
        double seconds = Double.parseDouble(option(args, "--seconds", "1"));
        int rounds = Integer.parseInt(option(args, "--rounds", "3"));
        long durationNs = (long) (seconds * 1e9);
        ring(device, sizes[0], producerCounts[0], durationNs / 2, false); // warm-up: JIT, not reported
        ring(device, sizes[0], producerCounts[0], durationNs / 2, true);
        socket(sizes[0], producerCounts[0], durationNs / 2);
        System.out.printf("feature ingestion ring on %s vs plain TCP socket (median of %d rounds of %.1f s; append,"
            + " offer and socket rounds interleaved)%n", device, rounds, seconds);
        System.out.printf("%-5s %-4s | %10s %8s %8s %10s | %10s %8s %8s | %10s %8s %8s | %7s %7s%n", "bytes", "prod",
            "append/s", "p50 us", "p99 us", "lag p99us", "offer/s", "p50 us", "p99 us", "socket/s", "p50 us", "p99 us",
            "app/sok", "off/sok");
        for (int size : sizes) {
            for (int producers : producerCounts) {
                List<Row> append = new ArrayList<>();
                List<Row> offer = new ArrayList<>();
                List<Row> socket = new ArrayList<>();
                for (int round = 0; round < rounds; round++) {
                    append.add(ring(device, size, producers, durationNs, false));
                    offer.add(ring(device, size, producers, durationNs, true));
                    socket.add(socket(size, producers, durationNs));
                }
                Row a = median(append);
                Row o = median(offer);
                Row s = median(socket);
                System.out.printf("%-5d %-4d | %10.0f %8.1f %8.1f %10.1f | %10.0f %8.1f %8.1f | %10.0f %8.1f %8.1f |"
                    + " %7.2f %7.2f%n", size, producers, a.recordsPerSecond(), a.p50Us(), a.p99Us(), a.lagP99Us(),
                    o.recordsPerSecond(), o.p50Us(), o.p99Us(), s.recordsPerSecond(), s.p50Us(), s.p99Us(),
                    a.recordsPerSecond() / s.recordsPerSecond(), o.recordsPerSecond() / s.recordsPerSecond());
            }
        }
    }

    private static Row ring(String device, int size, int producers, long durationNs, boolean batched)
        throws Exception {
        Path dir = Files.createTempDirectory("jccl-ingest-bench");
        IngestSettings settings = IngestSettings.defaults().withDevice(device).withDirectory(dir)
            .withBindAddress(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0)).withTimes(50, 4000, 30_000);
        AtomicBoolean stop = new AtomicBoolean();
        AtomicLong measureFromNs = new AtomicLong(Long.MAX_VALUE);
        long[] lags = new long[MAX_SAMPLES];
        int[] lagCount = new int[1];
        try (IngestConsumer consumer = IngestConsumer.open(settings)) {
            RecordHandler handler = (producer, sequence, timestampNs, buffer, offset, length) -> {
                if (timestampNs >= measureFromNs.get() && lagCount[0] < MAX_SAMPLES) {
                    lags[lagCount[0]++] = IngestConsumer.epochNanos() - timestampNs;
                }
            };
            Thread poller = Thread.ofPlatform().name("ingest-bench-consumer").start(() -> {
                while (!stop.get()) {
                    if (consumer.poll(handler, 1024) == 0) {
                        Thread.onSpinWait();
                    }
                }
            });
            long[][] samples = new long[producers][];
            long[] counts = new long[producers];
            CyclicBarrier start = new CyclicBarrier(producers, () -> measureFromNs.set(IngestConsumer.epochNanos()));
            Thread[] threads = new Thread[producers];
            AtomicLong elapsedNs = new AtomicLong();
            for (int p = 0; p < producers; p++) {
                int id = p;
                threads[p] = Thread.ofPlatform().name("ingest-bench-producer-" + p).start(() -> {
                    long[] latencies = new long[MAX_SAMPLES];
                    try (IngestProducer producer = IngestProducer.connect(consumer.address(), id, settings);
                         Arena arena = Arena.ofConfined()) {
                        MemorySegment payload = arena.allocate(size);
                        payload.fill((byte) id);
                        for (int i = 0; i < 1000; i++) {
                            producer.append(payload, 0, size); // warm-up, not measured
                        }
                        start.await();
                        long n = 0;
                        long beginNs = System.nanoTime();
                        long endNs = beginNs + durationNs;
                        long nowNs = beginNs;
                        while (nowNs < endNs) {
                            if (batched) {
                                producer.offer(payload, 0, size);
                            } else {
                                producer.append(payload, 0, size);
                            }
                            long afterNs = System.nanoTime();
                            if (n < MAX_SAMPLES) {
                                latencies[(int) n] = afterNs - nowNs;
                            }
                            n++;
                            nowNs = afterNs;
                        }
                        producer.send();
                        elapsedNs.accumulateAndGet(System.nanoTime() - beginNs, Math::max);
                        counts[id] = n;
                        samples[id] = Arrays.copyOf(latencies, (int) Math.min(n, MAX_SAMPLES));
                    } catch (Exception e) {
                        throw new IllegalStateException(e);
                    }
                });
            }
            for (Thread t : threads) {
                t.join();
            }
            stop.set(true);
            poller.join();
            if (Boolean.getBoolean("jccl.bench.verbose")) {
                System.err.println((batched ? "offer " : "append ") + size + " B x " + producers + ": "
                    + consumer.stats());
            }
            long[] measured = Arrays.copyOf(lags, lagCount[0]);
            Arrays.sort(measured);
            double lagP99Us = measured.length == 0 ? Double.NaN
                : measured[Math.min(measured.length - 1, (int) (measured.length * 0.99))] / 1e3;
            return row(samples, counts, elapsedNs.get(), lagP99Us);
        } finally {
            deleteTree(dir);
        }
    }

    private static Row socket(int size, int producers, long durationNs) throws Exception {
        try (ServerSocketChannel server = ServerSocketChannel.open()) {
            server.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
            Thread[] readers = new Thread[producers];
            long[][] samples = new long[producers][];
            long[] counts = new long[producers];
            AtomicLong elapsedNs = new AtomicLong();
            CyclicBarrier start = new CyclicBarrier(producers);
            Thread[] writers = new Thread[producers];
            for (int p = 0; p < producers; p++) {
                int id = p;
                writers[p] = Thread.ofPlatform().start(() -> {
                    long[] latencies = new long[MAX_SAMPLES];
                    try (SocketChannel channel = SocketChannel.open(server.getLocalAddress())) {
                        channel.setOption(StandardSocketOptions.TCP_NODELAY, true);
                        ByteBuffer record = ByteBuffer.allocateDirect(4 + size);
                        record.putInt(size).position(0);
                        for (int i = 0; i < 1000; i++) {
                            write(channel, record);
                        }
                        start.await();
                        long n = 0;
                        long beginNs = System.nanoTime();
                        long endNs = beginNs + durationNs;
                        long nowNs = beginNs;
                        while (nowNs < endNs) {
                            write(channel, record);
                            long afterNs = System.nanoTime();
                            if (n < MAX_SAMPLES) {
                                latencies[(int) n] = afterNs - nowNs;
                            }
                            n++;
                            nowNs = afterNs;
                        }
                        elapsedNs.accumulateAndGet(nowNs - beginNs, Math::max);
                        counts[id] = n;
                        samples[id] = Arrays.copyOf(latencies, (int) Math.min(n, MAX_SAMPLES));
                    } catch (Exception e) {
                        throw new IllegalStateException(e);
                    }
                });
                SocketChannel accepted = server.accept();
                readers[p] = Thread.ofPlatform().start(() -> read(accepted, size));
            }
            for (Thread t : writers) {
                t.join();
            }
            for (Thread t : readers) {
                t.join();
            }
            return row(samples, counts, elapsedNs.get(), Double.NaN);
        }
    }

    private static void write(SocketChannel channel, ByteBuffer record) throws IOException {
        record.position(0);
        while (record.hasRemaining()) {
            channel.write(record);
        }
    }

    /** The consumer of the baseline: reads every record (length, then payload) until the producer closes. */
    private static void read(SocketChannel channel, int size) {
        ByteBuffer buffer = ByteBuffer.allocateDirect(64 << 10);
        try (channel) {
            while (channel.read(buffer) >= 0) {
                buffer.flip();
                while (buffer.remaining() >= 4 && buffer.remaining() >= 4 + buffer.getInt(buffer.position())) {
                    buffer.position(buffer.position() + 4 + size);
                }
                buffer.compact();
            }
        } catch (IOException ignored) {
            // the producer closed
        }
    }

    private static Row row(long[][] samples, long[] counts, long elapsedNs, double lagP99Us) {
        long total = Arrays.stream(counts).sum();
        long[] all = Arrays.stream(samples).flatMapToLong(Arrays::stream).sorted().toArray();
        double p50 = all.length == 0 ? 0 : all[all.length / 2] / 1e3;
        double p99 = all.length == 0 ? 0 : all[Math.min(all.length - 1, (int) (all.length * 0.99))] / 1e3;
        return new Row(total / (elapsedNs / 1e9), p50, p99, lagP99Us);
    }

    private static Row median(List<Row> rows) {
        List<Row> sorted = new ArrayList<>(rows);
        sorted.sort(Comparator.comparingDouble(Row::recordsPerSecond));
        return sorted.get(sorted.size() / 2);
    }

    private static void deleteTree(Path dir) throws IOException {
        try (var files = Files.walk(dir)) {
            for (Path p : files.sorted(Comparator.reverseOrder()).toList()) {
                Files.deleteIfExists(p);
            }
        }
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
