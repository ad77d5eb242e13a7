package io.jccl.examples;

import io.jccl.collectives.CommunicatorOptions;
import io.jccl.collectives.store.FileStore;
import io.jccl.services.kvcache.KvBlockPool;
import io.jccl.services.kvcache.KvCacheLayout;
import io.jccl.services.kvcache.KvCacheReceiver;
import io.jccl.services.kvcache.KvCacheSender;
import io.jccl.services.kvcache.KvRequest;
import io.jccl.services.transfer.TransferEngine;
import io.jccl.services.transfer.TransferSettings;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.zip.CRC32;

/**
 * Disaggregated inference's KV-cache hand-off between two processes (jccl-services' {@code io.jccl.services.kvcache}):
 * the prefill process fills a paged KV cache with synthetic K and V for each request (a value per layer, K/V,
 * token, head and dimension), sends each request's blocks by its block table, and frees its own blocks once the
 * decode process has them; the decode process gets each request whole (one notification), checks every block against
 * the same synthetic data, prints its checksum, and releases the request, which returns its blocks to the prefill
 * side for later requests. The prefill process compares the decode's checksums with its own; any mismatch, in
 * either process, makes the example fail (non-zero exit).
 *
 * <pre>
 * ./jccl example KvCacheTransferExample [--device shm0|tcp0] [--requests 32] [--tokens-per-block 16]
 *     [--layers 4] [--heads 2] [--head-dim 64] [--element-bytes 2] [--decode-blocks 32] [--max-tokens 300]
 *     this process is prefill and starts the decode process (a second JVM) itself;
 * JCCL_TRANSPORT=tcp0 ./jccl run -np 2 io.jccl.examples.KvCacheTransferExample [options]
 *     rank 0 prefill, rank 1 decode, joined through the launcher's store.
 * </pre>
 */
public final class KvCacheTransferExample {
    private static final String NAME = "example";
    private static final Duration WAIT = Duration.ofSeconds(60);

    private KvCacheTransferExample() {
    }

    /** The example's settings, from its command line. */
    record Settings(String device, int requests, KvCacheLayout layout, int decodeBlocks, int maxTokens) {
        static Settings of(String[] args) {
            KvCacheLayout layout = new KvCacheLayout(
                Integer.parseInt(ExampleSupport.option(args, "--tokens-per-block", "16")),
                Integer.parseInt(ExampleSupport.option(args, "--layers", "4")),
                Integer.parseInt(ExampleSupport.option(args, "--heads", "2")),
                Integer.parseInt(ExampleSupport.option(args, "--head-dim", "64")),
                Integer.parseInt(ExampleSupport.option(args, "--element-bytes", "2")));
            return new Settings(ExampleSupport.option(args, "--device", "shm0"),
                Integer.parseInt(ExampleSupport.option(args, "--requests", "32")), layout,
                Integer.parseInt(ExampleSupport.option(args, "--decode-blocks", "32")),
                Integer.parseInt(ExampleSupport.option(args, "--max-tokens", "300")));
        }

        String[] toArgs() {
            return new String[] {"--device", device, "--requests", "" + requests, "--tokens-per-block",
                "" + layout.tokensPerBlock(), "--layers", "" + layout.layers(), "--heads", "" + layout.kvHeads(),
                "--head-dim", "" + layout.headDim(), "--element-bytes", "" + layout.elementBytes(),
                "--decode-blocks", "" + decodeBlocks, "--max-tokens", "" + maxTokens};
        }

        /** Tokens of request {@code id} (1..maxTokens, varied, at most what the decode pool holds). */
        int tokensOf(long id) {
            int cap = Math.min(maxTokens, decodeBlocks * layout.tokensPerBlock());
            return (int) ((id * 7919 + 13) % cap) + 1;
        }

        int blocksOf(long id) {
            return (tokensOf(id) - 1) / layout.tokensPerBlock() + 1;
        }
    }

    /** Entry point: see the class comment. */
    public static void main(String[] args) throws Exception {
        Settings s = Settings.of(args);
        String role = ExampleSupport.option(args, "--role", "");
        if (ExampleSupport.launched(System.getenv())) {
            try (TransferEngine engine = TransferEngine.fromEnvironment()) {
                System.out.println(engine.rank() == 0 ? prefill(engine, s, null) : decode(engine, s));
            }
        } else if (role.equals("decode")) {
            CommunicatorOptions options = CommunicatorOptions.fromEnvironment().withTransports(s.device())
                .withTimeout(WAIT);
            try (FileStore store = new FileStore(Path.of(ExampleSupport.option(args, "--store", ".")));
                 TransferEngine engine = TransferEngine.create(store, 1, 2, options,
                     TransferSettings.fromEnvironment())) {
                System.out.println(decode(engine, s));
            }
        } else {
            System.out.println(run(s));
        }
    }

    /**
     * Runs the example: this process is prefill (rank 0), a second JVM is decode (rank 1), joined through a file
     * store in a temporary directory. Returns the report.
     *
     * @throws IllegalStateException on any checksum mismatch or when the decode process fails
     */
    public static String run(Settings s) throws Exception {
        Path dir = Files.createTempDirectory("jccl-kv-example");
        String java = ProcessHandle.current().info().command().orElse("java");
        List<String> command = new ArrayList<>(List.of(java, "--enable-native-access=ALL-UNNAMED", "-Xmx256m",
            "-XX:+UseSerialGC", "-cp", System.getProperty("java.class.path"), KvCacheTransferExample.class.getName(),
            "--role", "decode", "--store", dir.toString()));
        command.addAll(List.of(s.toArgs()));
        Process decode = new ProcessBuilder(command).redirectErrorStream(true).start();
        List<String> decodeOutput = new java.util.concurrent.CopyOnWriteArrayList<>();
        Thread reader = Thread.ofPlatform().daemon().start(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(decode.getInputStream(),
                StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null) {
                    decodeOutput.add(line);
                }
            } catch (IOException ignored) {
                // the process is gone
            }
        });
        CommunicatorOptions options = CommunicatorOptions.fromEnvironment().withTransports(s.device())
            .withTimeout(WAIT);
        String report;
        try (FileStore store = new FileStore(dir);
             TransferEngine engine = TransferEngine.create(store, 0, 2, options, TransferSettings.fromEnvironment())) {
            Map<Long, Long> crcs = new HashMap<>();
            report = prefill(engine, s, crcs);
            if (!decode.waitFor(120, TimeUnit.SECONDS)) {
                decode.destroyForcibly();
                throw new IllegalStateException("the decode process did not finish within 120 s: " + decodeOutput);
            }
            reader.join(10_000);
            int matched = 0;
            for (String line : decodeOutput) {
                if (line.startsWith("decode: request ")) {
                    String[] f = line.split(" ");
                    long id = Long.parseLong(f[2]);
                    long crc = Long.parseLong(f[f.length - 1], 16);
                    if (crcs.get(id) == null || crcs.get(id) != crc) {
                        throw new IllegalStateException("checksum mismatch for request " + id + ": prefill "
                            + Long.toHexString(crcs.getOrDefault(id, -1L)) + ", decode " + Long.toHexString(crc));
                    }
                    matched++;
                }
            }
            if (decode.exitValue() != 0 || matched != s.requests()) {
                throw new IllegalStateException("the decode process exited with " + decode.exitValue() + " after "
                    + matched + " of " + s.requests() + " requests:\n" + String.join("\n", decodeOutput));
            }
        } finally {
            decode.destroyForcibly();
        }
        return report + "\n" + String.join("\n", decodeOutput) + "\nall " + s.requests()
            + " checksums match between the prefill and decode processes";
    }

    /** Prefill: fills, sends and frees each request's blocks; records each request's checksum in {@code crcs}. */
    static String prefill(TransferEngine engine, Settings s, Map<Long, Long> crcs) {
        KvCacheLayout layout = s.layout();
        long bytes = 0;
        long start = System.nanoTime();
        try (KvBlockPool pool = KvBlockPool.register(engine, "prefill/" + engine.rank(), layout,
            2 * s.decodeBlocks());
             KvCacheSender sender = KvCacheSender.open(engine, NAME, pool, WAIT)) {
            int[] table = new int[s.decodeBlocks()];
            for (long id = 1; id <= s.requests(); id++) {
                int tokens = s.tokensOf(id);
                int blocks = s.blocksOf(id);
                pool.allocate(blocks, table);
                for (int i = 0; i < blocks; i++) {
                    pool.block(table[i]).fill((byte) 0); // a reused block: no earlier request's tokens past the end
                    fill(pool.block(table[i]), layout, id, i, tokens);
                }
                long crc = crc(pool, table, blocks);
                // Waits for the decode side to return blocks when its pool is full (back-pressure).
                sender.send(id, table, blocks, tokens, WAIT);
                pool.free(table, blocks); // the decode side has them now: this side's blocks serve the next request
                if (crcs != null) {
                    crcs.put(id, crc);
                }
                bytes += (long) blocks * layout.blockBytes();
            }
            sender.awaitReturned(WAIT); // the decode side is done with every request: closing is safe now
        }
        double seconds = (System.nanoTime() - start) / 1e9;
        return String.format("prefill (rank %d, %s): %d requests, %d B of KV (%s) in %.3f s, %.1f MB/s",
            engine.rank(), engine.deviceFor(1), s.requests(), bytes, layout, seconds, bytes / seconds / 1e6);
    }

    /** Decode: takes each request whole, checks it against the synthetic data, prints its checksum, releases it. */
    static String decode(TransferEngine engine, Settings s) throws InterruptedException {
        KvCacheLayout layout = s.layout();
        int bad = 0;
        StringBuilder out = new StringBuilder();
        try (KvCacheReceiver receiver = KvCacheReceiver.create(engine, NAME, layout, s.decodeBlocks())) {
            MemorySegment expected = java.lang.foreign.Arena.ofAuto().allocate(layout.blockBytes());
            for (int n = 0; n < s.requests(); n++) {
                KvRequest r = receiver.poll(WAIT.toSeconds(), TimeUnit.SECONDS);
                if (r == null) {
                    throw new IllegalStateException("decode: no request within " + WAIT.toSeconds() + " s after " + n);
                }
                boolean ok = r.tokens() == s.tokensOf(r.requestId());
                for (int i = 0; i < r.blockCount(); i++) {
                    expected.fill((byte) 0);
                    fill(expected, layout, r.requestId(), i, r.tokens());
                    ok &= r.block(i).mismatch(expected) == -1;
                }
                int[] table = r.blockTable();
                long crc = crc(receiver.pool(), table, table.length);
                bad += ok ? 0 : 1;
                String line = "decode: request " + r.requestId() + " " + r.tokens() + " tokens in " + r.blockCount()
                    + " blocks " + (ok ? "ok" : "MISMATCH") + " crc " + Long.toHexString(crc);
                System.out.println(line);
                out.append(line).append('\n');
                receiver.release(r);
            }
            receiver.flushReturns();
        }
        if (bad > 0) {
            throw new IllegalStateException("decode: " + bad + " requests did not match the synthetic KV data");
        }
        return "decode (rank " + engine.rank() + "): " + s.requests() + " requests checked";
    }

    /**
     * Synthetic KV of request {@code id}'s block {@code i}: for each layer, K and V, and token of the block, the
     * token's heads × head dim elements from a generator seeded by (request, position, layer, K/V); tokens past
     * {@code tokens} stay as they are.
     */
    static void fill(MemorySegment block, KvCacheLayout layout, long id, int i, int tokens) {
        int tokenBytes = layout.tokenBytes();
        for (int layer = 0; layer < layout.layers(); layer++) {
            for (int kv = 0; kv < 2; kv++) {
                for (int t = 0; t < layout.tokensPerBlock(); t++) {
                    int position = i * layout.tokensPerBlock() + t;
                    if (position >= tokens) {
                        break;
                    }
                    long x = ((id * 31 + position) * 131 + layer) * 2 + kv;
                    x = x * 0x9E3779B97F4A7C15L + 1;
                    long offset = layout.offset(layer, kv == 1, t);
                    for (int b = 0; b < tokenBytes; b += 8) {
                        x ^= x << 13;
                        x ^= x >>> 7;
                        x ^= x << 17;
                        if (b + 8 <= tokenBytes) {
                            block.set(ValueLayout.JAVA_LONG_UNALIGNED, offset + b, x);
                        } else {
                            for (int k = b; k < tokenBytes; k++) {
                                block.set(ValueLayout.JAVA_BYTE, offset + k, (byte) (x >>> (8 * (k - b))));
                            }
                        }
                    }
                }
            }
        }
    }

    private static long crc(KvBlockPool pool, int[] table, int blocks) {
        CRC32 crc = new CRC32();
        for (int i = 0; i < blocks; i++) {
            crc.update(pool.block(table[i]).asByteBuffer());
        }
        return crc.getValue();
    }
}
