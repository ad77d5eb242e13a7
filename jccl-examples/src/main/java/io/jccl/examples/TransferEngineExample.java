package io.jccl.examples;

import io.jccl.collectives.CommunicatorOptions;
import io.jccl.collectives.store.InMemoryStore;
import io.jccl.collectives.store.Store;
import io.jccl.services.transfer.LocalSegment;
import io.jccl.services.transfer.Notification;
import io.jccl.services.transfer.RemoteSegment;
import io.jccl.services.transfer.TransferBatch;
import io.jccl.services.transfer.TransferEngine;
import io.jccl.services.transfer.TransferSettings;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.zip.CRC32;

/**
 * The transfer engine (jccl-services) in the shape of disaggregated inference's KV-cache hand-off: the producer
 * (rank 0, "prefill") registers its blocks, opens the consumer's segment by name and WRITEs every block into it in
 * one batch, sliced over several queue pairs, with a notification attached; the consumer (rank 1, "decode") takes the
 * notification, which arrives only once every block has landed, checks the blocks' checksum in its own memory, and
 * READs the producer's first block back one-sided.
 *
 * <pre>
 * ./jccl example TransferEngineExample [--device shm0|tcp0] [--blocks 64] [--block-kib 256]
 *     two ranks as threads of this process, each with its own engine and devices;
 * ./jccl run -np 2 ... io.jccl.examples.TransferEngineExample [--blocks 64] [--block-kib 256]
 *     one rank per process, joined through the launcher's store (JCCL_TRANSPORT picks the device).
 * </pre>
 */
public final class TransferEngineExample {
    private TransferEngineExample() {
    }

    /** Entry point. */
    public static void main(String[] args) throws Exception {
        int blocks = Integer.parseInt(ExampleSupport.option(args, "--blocks", "64"));
        int blockBytes = Integer.parseInt(ExampleSupport.option(args, "--block-kib", "256")) * 1024;
        if (ExampleSupport.launched(System.getenv())) {
            try (TransferEngine engine = TransferEngine.fromEnvironment()) {
                System.out.println(runRank(engine, blocks, blockBytes));
            }
        } else {
            System.out.println(runBoth(ExampleSupport.option(args, "--device", "shm0"), blocks, blockBytes));
        }
    }

    /** Runs both ranks in this process over {@code device} and returns their reports. */
    public static String runBoth(String device, int blocks, int blockBytes) throws Exception {
        Store store = new InMemoryStore();
        CommunicatorOptions options = CommunicatorOptions.fromEnvironment().withTransports(device)
            .withTimeout(Duration.ofSeconds(60));
        List<CompletableFuture<String>> ranks = new ArrayList<>();
        for (int r = 0; r < 2; r++) {
            int rank = r;
            CompletableFuture<String> result = new CompletableFuture<>();
            // A thread per rank (not a pool: with one core the common pool would run the ranks one after the other).
            Thread.ofPlatform().daemon().name("rank-" + r).start(() -> {
                try (TransferEngine engine = TransferEngine.create(store, rank, 2, options,
                    TransferSettings.fromEnvironment())) {
                    result.complete(runRank(engine, blocks, blockBytes));
                } catch (Exception e) {
                    result.completeExceptionally(new IllegalStateException("rank " + rank + ": " + e.getMessage(), e));
                }
            });
            ranks.add(result);
        }
        return ranks.get(0).get(120, TimeUnit.SECONDS) + "\n" + ranks.get(1).get(120, TimeUnit.SECONDS);
    }

    /** One rank's part: rank 0 produces, rank 1 consumes, other ranks only register. */
    static String runRank(TransferEngine engine, int blocks, int blockBytes) throws Exception {
        long total = (long) blocks * blockBytes;
        if (engine.rank() == 1) {
            LocalSegment kv = engine.registerSegment("decode/kv", total);
            LocalSegment scratch = engine.registerSegment("decode/scratch", blockBytes);
            Notification n = engine.pollNotification(60, TimeUnit.SECONDS);
            if (n == null) {
                throw new IllegalStateException("no notification from the producer within 60 s");
            }
            String[] f = n.text().split(" ");
            long crc = crc(kv.memory(), 0, total);
            boolean same = crc == Long.parseLong(f[1]);
            // One-sided READ of the producer's first block: no CPU of the producer takes part.
            RemoteSegment prefill = engine.openSegment("prefill/kv", Duration.ofSeconds(60));
            String readBack;
            try (TransferBatch b = engine.newBatch(1)) {
                b.read(scratch, 0, prefill, 0, blockBytes);
                readBack = b.submit().await() && crc(scratch.memory(), 0, blockBytes) == crc(kv.memory(), 0, blockBytes)
                    ? "first block READ back identical" : "READ back failed: " + b;
            }
            engine.openSegment("prefill/done", Duration.ofSeconds(60)); // the producer may leave now
            return "decode (rank 1): notification '" + n.text() + "' from rank " + n.fromRank() + " after " + blocks
                + " blocks landed; checksum " + (same ? "matches" : "DIFFERS") + "; " + readBack;
        }
        if (engine.rank() != 0) {
            return "rank " + engine.rank() + ": idle";
        }
        LocalSegment kv = engine.registerSegment("prefill/kv", total);
        for (long i = 0; i < total / 8; i++) {
            kv.memory().setAtIndex(ValueLayout.JAVA_LONG, i, i * 0x9E3779B97F4A7C15L);
        }
        RemoteSegment decode = engine.openSegment("decode/kv", Duration.ofSeconds(60));
        long start = System.nanoTime();
        try (TransferBatch b = engine.newBatch(blocks)) {
            for (int i = 0; i < blocks; i++) {
                b.write(kv, (long) i * blockBytes, decode, (long) i * blockBytes, blockBytes);
            }
            b.notify(("request-1 " + crc(kv.memory(), 0, total)).getBytes(StandardCharsets.UTF_8));
            boolean ok = b.submit().await();
            double seconds = (System.nanoTime() - start) / 1e9;
            engine.openSegment("decode/scratch", Duration.ofSeconds(60));
            String report = String.format("prefill (rank 0): %d blocks of %d KiB to rank 1 over %s, %d queue pairs: "
                    + "%s in %.2f ms (%.2f GB/s, one cold batch: bench/transfer measures bandwidth)", blocks,
                blockBytes / 1024, engine.deviceFor(1),
                engine.settings().queuePairsPerPeer(), ok ? "all landed" : "FAILED " + b, seconds * 1e3,
                total / seconds / 1e9);
            // Stay registered until the consumer has read its block back.
            try (LocalSegment done = engine.registerSegment("prefill/done", 1)) {
                waitUntilGone(engine, "decode/kv");
            }
            return report;
        }
    }

    /** Waits (at most 60 s) until the consumer has closed its engine (its segment left the store). */
    private static void waitUntilGone(TransferEngine engine, String name) throws InterruptedException {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (System.nanoTime() < until) {
            try {
                engine.openSegment(name);
            } catch (RuntimeException gone) {
                return;
            }
            Thread.sleep(5);
        }
    }

    private static long crc(MemorySegment m, long offset, long length) {
        CRC32 crc = new CRC32();
        crc.update(m.asSlice(offset, length).asByteBuffer());
        return crc.getValue();
    }
}
