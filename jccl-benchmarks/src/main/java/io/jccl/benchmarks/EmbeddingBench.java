package io.jccl.benchmarks;

import io.jccl.collectives.CommunicatorOptions;
import io.jccl.collectives.store.InMemoryStore;
import io.jccl.collectives.store.Store;
import io.jccl.services.embedding.EmbeddingClient;
import io.jccl.services.embedding.EmbeddingLookup;
import io.jccl.services.embedding.EmbeddingServer;
import io.jccl.services.transfer.TransferEngine;
import io.jccl.services.transfer.TransferSettings;

import java.io.BufferedInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;

/**
 * The embedding cache against a real Redis server, in one run (issue 18, part 4): lookups of random rows of a table
 * of {@code --rows} rows × D floats, batches of 1, 16 and 256, one client thread in a closed loop; lookups/s and
 * batch latency p50/p99/p99.9. JCCL: table served by rank 0, looked up by rank 1 (two engines as threads of this
 * JVM) one-sided over each device, client cache off: {@code shm0} with direct access (loads from the mapped table),
 * {@code shm0/read} and {@code tcp0} with READ work requests; then a cache-on row (a skewed load: 90% of lookups to
 * 10% of the rows, a cache of 15% of the rows). Redis: the same rows stored as binary values
 * ({@code e:D:row} → D×4 bytes) in a redis-server on {@code --redis-port}, fetched with MGET and with pipelined GETs by
 * a plain RESP client over one socket (this class). Rounds of JCCL and Redis interleave so that both see the same
 * machine; each cell is the median over the rounds. {@code bench/embedding} starts Redis and runs this.
 *
 * <pre>
 * java -cp ... io.jccl.benchmarks.EmbeddingBench [--devices shm0,shm0/read,tcp0] [--dims 64,256] [--batches 1,16,256]
 *     [--rows 32768] [--seconds 1] [--rounds 3] [--redis-port 6379]
 * </pre>
 */
public final class EmbeddingBench {
    private static final int MAX_SAMPLES = 1 << 22;
    private final long[] samples = new long[MAX_SAMPLES];

    private EmbeddingBench() {
    }

    /** One measured cell: lookups per second and batch latency percentiles (µs). */
    record Cell(double lookupsPerSecond, double p50Us, double p99Us, double p999Us) {
        static Cell median(List<Cell> cells) {
            return new Cell(med(cells, 0), med(cells, 1), med(cells, 2), med(cells, 3));
        }

        private static double med(List<Cell> cells, int field) {
            double[] v = new double[cells.size()];
            for (int i = 0; i < v.length; i++) {
                Cell c = cells.get(i);
                v[i] = switch (field) {
                    case 0 -> c.lookupsPerSecond;
                    case 1 -> c.p50Us;
                    case 2 -> c.p99Us;
                    default -> c.p999Us;
                };
            }
            Arrays.sort(v);
            return v[v.length / 2];
        }
    }

    /** A measured body: one batch per call. */
    interface BatchBody {
        void run(int batch) throws Exception;
    }

    private Cell measure(int batch, long durationNs, BatchBody body) throws Exception {
        long warmUntil = System.nanoTime() + Math.min(durationNs / 4, 300_000_000L);
        while (System.nanoTime() < warmUntil) {
            body.run(batch);
        }
        int n = 0;
        long start = System.nanoTime();
        long end = start + durationNs;
        long now = start;
        while (now < end && n < MAX_SAMPLES) {
            body.run(batch);
            long t = System.nanoTime();
            samples[n++] = t - now;
            now = t;
        }
        double seconds = (now - start) / 1e9;
        Arrays.sort(samples, 0, n);
        return new Cell(n * (double) batch / seconds, samples[(int) (n * 0.5)] / 1e3,
            samples[Math.min(n - 1, (int) (n * 0.99))] / 1e3, samples[Math.min(n - 1, (int) (n * 0.999))] / 1e3);
    }

    /** Entry point. */
    public static void main(String[] args) throws Exception {
        String[] devices = option(args, "--devices", "shm0,shm0/read,tcp0").split(",");
        int[] dims = ints(option(args, "--dims", "64,256"));
        int[] batches = ints(option(args, "--batches", "1,16,256"));
        int rows = Integer.parseInt(option(args, "--rows", "32768"));
        double seconds = Double.parseDouble(option(args, "--seconds", "1"));
        int rounds = Integer.parseInt(option(args, "--rounds", "3"));
        String redisPort = option(args, "--redis-port", "");
        new EmbeddingBench().run(devices, dims, batches, rows, (long) (seconds * 1e9), rounds,
            redisPort.isEmpty() ? -1 : Integer.parseInt(redisPort));
    }

    private void run(String[] devices, int[] dims, int[] batches, int rows, long durationNs, int rounds, int redisPort)
        throws Exception {
        System.out.printf("embedding cache vs Redis: %d rows, one client thread, closed loop, uniform random rows "
            + "(cache off); median of %d rounds of %.1f s per cell%n", rows, rounds, durationNs / 1e9);
        for (int dim : dims) {
            Redis redis = redisPort < 0 ? null : new Redis(redisPort, rows, dim);
            // [device][batch] -> rounds
            List<List<List<Cell>>> jccl = new ArrayList<>();
            List<List<Cell>> mget = new ArrayList<>();
            List<List<Cell>> pipe = new ArrayList<>();
            List<List<List<Cell>>> cached = new ArrayList<>();
            double[][] hitRate = new double[devices.length][batches.length];
            for (String d : devices) {
                List<List<Cell>> perBatch = new ArrayList<>();
                List<List<Cell>> perBatchCached = new ArrayList<>();
                for (int b : batches) {
                    perBatch.add(new ArrayList<>());
                    perBatchCached.add(new ArrayList<>());
                }
                jccl.add(perBatch);
                cached.add(perBatchCached);
            }
            for (int b : batches) {
                mget.add(new ArrayList<>());
                pipe.add(new ArrayList<>());
            }
            Pair[] pairs = new Pair[devices.length];
            for (int d = 0; d < devices.length; d++) {
                pairs[d] = new Pair(devices[d], rows, dim, batches[batches.length - 1]);
            }
            SplittableRandom rnd = new SplittableRandom(42);
            for (int round = 0; round < rounds; round++) {
                for (int bi = 0; bi < batches.length; bi++) {
                    for (int d = 0; d < devices.length; d++) {
                        Pair p = pairs[d];
                        jccl.get(d).get(bi).add(measure(batches[bi], durationNs, b -> p.lookup(p.plain, b, rnd,
                            rows, false)));
                        long hits0 = p.cachedClient.cacheHits();
                        long miss0 = p.cachedClient.cacheMisses();
                        cached.get(d).get(bi).add(measure(batches[bi], durationNs, b -> p.lookup(p.cachedLookup, b,
                            rnd, rows, true)));
                        long h = p.cachedClient.cacheHits() - hits0;
                        long m = p.cachedClient.cacheMisses() - miss0;
                        hitRate[d][bi] = h / (double) Math.max(1, h + m);
                    }
                    if (redis != null) {
                        mget.get(bi).add(measure(batches[bi], durationNs, b -> redis.mget(b, rnd)));
                        pipe.get(bi).add(measure(batches[bi], durationNs, b -> redis.pipelinedGets(b, rnd)));
                    }
                }
            }
            for (Pair p : pairs) {
                p.close();
            }
            if (redis != null) {
                redis.close();
            }
            System.out.printf("%n## D = %d floats (%d B per row)%n", dim, dim * 4);
            System.out.printf("%-26s %5s %14s %10s %10s %10s %12s %12s%n", "system", "batch", "lookups/s", "p50 us",
                "p99 us", "p99.9 us", "x MGET", "x pipelined");
            for (int bi = 0; bi < batches.length; bi++) {
                Cell rm = redis == null ? null : Cell.median(mget.get(bi));
                Cell rp = redis == null ? null : Cell.median(pipe.get(bi));
                for (int d = 0; d < devices.length; d++) {
                    print("jccl " + devices[d] + " (cache off)", batches[bi], Cell.median(jccl.get(d).get(bi)), rm,
                        rp);
                }
                if (rm != null) {
                    print("redis MGET", batches[bi], rm, null, null);
                    print("redis pipelined GET", batches[bi], rp, null, null);
                }
                for (int d = 0; d < devices.length; d++) {
                    print(String.format("jccl %s cache on (%.0f%% hit)", devices[d], 100 * hitRate[d][bi]),
                        batches[bi], Cell.median(cached.get(d).get(bi)), null, null);
                }
            }
            System.out.println("(x MGET / x pipelined: throughput ratio, and in brackets the p99 ratio redis/jccl: "
                + "> 1 means JCCL is faster)");
        }
    }

    private static void print(String name, int batch, Cell c, Cell mget, Cell pipe) {
        String vsMget = mget == null ? "" : String.format("%.1f (%.1f)", c.lookupsPerSecond / mget.lookupsPerSecond,
            mget.p99Us / c.p99Us);
        String vsPipe = pipe == null ? "" : String.format("%.1f (%.1f)", c.lookupsPerSecond / pipe.lookupsPerSecond,
            pipe.p99Us / c.p99Us);
        System.out.printf("%-26s %5d %14.0f %10.1f %10.1f %10.1f %12s %12s%n", name, batch, c.lookupsPerSecond,
            c.p50Us, c.p99Us, c.p999Us, vsMget, vsPipe);
    }

    /** Two engines as threads of this JVM over one device: rank 0 serves the table, rank 1 looks it up. */
    private static final class Pair implements AutoCloseable {
        final TransferEngine serverEngine;
        final TransferEngine clientEngine;
        final EmbeddingServer server;
        final EmbeddingClient client;
        final EmbeddingLookup plain;
        final EmbeddingClient cachedClient;
        final EmbeddingLookup cachedLookup;
        final int rows;

        Pair(String device, int rows, int dim, int maxBatch) throws Exception {
            this.rows = rows;
            Store store = new InMemoryStore();
            boolean direct = !device.endsWith("/read");
            CommunicatorOptions options = CommunicatorOptions.defaults().withTransports(device.split("/")[0])
                .withTimeout(Duration.ofSeconds(60));
            CompletableFuture<TransferEngine> zero = CompletableFuture.supplyAsync(
                () -> TransferEngine.create(store, 0, 2, options, TransferSettings.fromEnvironment()));
            clientEngine = TransferEngine.create(store, 1, 2, options, TransferSettings.fromEnvironment());
            serverEngine = zero.get(120, TimeUnit.SECONDS);
            server = EmbeddingServer.create(serverEngine, "bench-" + dim, rows, dim, (r, out) -> {
                for (int j = 0; j < out.length; j++) {
                    out[j] = r + j;
                }
            });
            client = EmbeddingClient.open(clientEngine, "bench-" + dim, Duration.ofSeconds(60), 0,
                EmbeddingClient.ROW_RETRY_LIMIT_DEFAULT, direct);
            plain = client.newLookup(maxBatch);
            // The cache-on client: another engine pair would double the set-up; the same engines with a second
            // client need a second table name (one client per table per engine), so the table is served twice.
            cachedServer = EmbeddingServer.create(serverEngine, "bench-cached-" + dim, rows, dim, (r, out) -> {
                for (int j = 0; j < out.length; j++) {
                    out[j] = r + j;
                }
            });
            cachedClient = EmbeddingClient.open(clientEngine, "bench-cached-" + dim, Duration.ofSeconds(60),
                rows * 15 / 100, EmbeddingClient.ROW_RETRY_LIMIT_DEFAULT, direct);
            cachedLookup = cachedClient.newLookup(maxBatch);
        }

        private final EmbeddingServer cachedServer;

        /** One batch: uniform random rows, or (skewed) 90% of them from the first 10% of the table. */
        void lookup(EmbeddingLookup l, int batch, SplittableRandom rnd, int rows, boolean skewed) {
            l.clear();
            int hot = Math.max(1, rows / 10);
            for (int i = 0; i < batch; i++) {
                l.add(skewed && rnd.nextInt(10) < 9 ? rnd.nextInt(hot) : rnd.nextInt(rows));
            }
            if (!l.execute()) {
                throw new IllegalStateException("lookup failed: " + l.error(0));
            }
        }

        @Override
        public void close() {
            plain.close();
            cachedLookup.close();
            client.close();
            cachedClient.close();
            server.close();
            cachedServer.close();
            clientEngine.close();
            serverEngine.close();
        }
    }

    /** A plain RESP2 client over one socket: SET to load, MGET and pipelined GETs to fetch binary values. */
    private static final class Redis implements AutoCloseable {
        private final Socket socket;
        private final OutputStream out;
        private final InputStream in;
        private final int rows;
        private final int dim;
        private final byte[] request = new byte[1 << 20];
        private final byte[] value;
        /** Every row's key, encoded once: the client should not allocate where JCCL's lookups do not. */
        private final byte[][] keys;
        private int length;

        Redis(int port, int rows, int dim) throws IOException {
            this.rows = rows;
            this.dim = dim;
            socket = new Socket("127.0.0.1", port);
            socket.setTcpNoDelay(true);
            out = socket.getOutputStream();
            in = new BufferedInputStream(socket.getInputStream(), 1 << 16);
            value = new byte[dim * 4];
            keys = new byte[rows][];
            for (int r = 0; r < rows; r++) {
                keys[r] = ("e:" + dim + ":" + r).getBytes(StandardCharsets.US_ASCII);
            }
            // Load: the same rows as the JCCL table, as binary values, pipelined 256 SETs at a time.
            ByteBuffer v = ByteBuffer.wrap(value).order(ByteOrder.LITTLE_ENDIAN);
            for (int r = 0; r < rows; r += 256) {
                length = 0;
                int n = Math.min(256, rows - r);
                for (int k = 0; k < n; k++) {
                    for (int j = 0; j < dim; j++) {
                        v.putFloat(j * 4, r + k + j);
                    }
                    header('*', 3);
                    bulk("SET".getBytes(StandardCharsets.US_ASCII));
                    key(r + k);
                    bulk(value);
                }
                out.write(request, 0, length);
                for (int k = 0; k < n; k++) {
                    expect('+');
                    skipLine();
                }
            }
        }

        void mget(int batch, SplittableRandom rnd) throws IOException {
            length = 0;
            header('*', batch + 1);
            bulk(MGET);
            for (int i = 0; i < batch; i++) {
                key(rnd.nextInt(rows));
            }
            out.write(request, 0, length);
            expect('*');
            int n = (int) readNumber();
            for (int i = 0; i < n; i++) {
                readBulk();
            }
        }

        void pipelinedGets(int batch, SplittableRandom rnd) throws IOException {
            length = 0;
            for (int i = 0; i < batch; i++) {
                header('*', 2);
                bulk(GET);
                key(rnd.nextInt(rows));
            }
            out.write(request, 0, length);
            for (int i = 0; i < batch; i++) {
                readBulk();
            }
        }

        private static final byte[] MGET = "MGET".getBytes(StandardCharsets.US_ASCII);
        private static final byte[] GET = "GET".getBytes(StandardCharsets.US_ASCII);

        private void readBulk() throws IOException {
            expect('$');
            int n = (int) readNumber();
            if (n != value.length) {
                throw new IOException("value of " + n + " B, expected " + value.length);
            }
            int got = 0;
            while (got < n) {
                int k = in.read(value, got, n - got);
                if (k < 0) {
                    throw new IOException("redis closed the connection");
                }
                got += k;
            }
            skipLine();
        }

        private void expect(char c) throws IOException {
            int b = in.read();
            if (b != c) {
                throw new IOException("redis replied '" + (char) b + "', expected '" + c + "'");
            }
        }

        private long readNumber() throws IOException {
            long v = 0;
            int b;
            boolean neg = false;
            while ((b = in.read()) != '\r') {
                if (b == '-') {
                    neg = true;
                } else {
                    v = v * 10 + (b - '0');
                }
            }
            in.read(); // \n
            return neg ? -v : v;
        }

        private void skipLine() throws IOException {
            int b;
            while ((b = in.read()) != '\n') {
                if (b < 0) {
                    throw new IOException("redis closed the connection");
                }
            }
        }

        private void header(char c, int n) {
            request[length++] = (byte) c;
            number(n);
        }

        private void number(int n) {
            int digits = n < 10 ? 1 : n < 100 ? 2 : n < 1000 ? 3 : n < 10000 ? 4 : n < 100000 ? 5 : 10;
            if (digits == 10) {
                digits = Integer.toString(n).length();
            }
            for (int i = digits - 1, v = n; i >= 0; i--, v /= 10) {
                request[length + i] = (byte) ('0' + v % 10);
            }
            length += digits;
            request[length++] = '\r';
            request[length++] = '\n';
        }

        private void bulk(byte[] b) {
            header('$', b.length);
            System.arraycopy(b, 0, request, length, b.length);
            length += b.length;
            request[length++] = '\r';
            request[length++] = '\n';
        }

        private void key(int row) {
            bulk(keys[row]);
        }

        @Override
        public void close() throws IOException {
            socket.close();
        }
    }

    private static int[] ints(String csv) {
        return Arrays.stream(csv.split(",")).mapToInt(Integer::parseInt).toArray();
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
