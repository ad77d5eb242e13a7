package io.jccl.services.transfer;

import io.jccl.collectives.CommunicatorOptions;
import io.jccl.collectives.store.InMemoryStore;
import io.jccl.collectives.store.Store;
import io.jccl.common.testing.RankFutures;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;
import java.util.zip.CRC32;

/** Runs n ranks as threads of this JVM, each with its own transfer engine (own devices) over one InMemoryStore. */
final class Engines {
    interface Body {
        void run(TransferEngine engine, CyclicBarrier barrier) throws Exception;
    }

    private Engines() {
    }

    static CommunicatorOptions options(String transport) {
        return CommunicatorOptions.defaults().withTransports(transport).withTimeout(Duration.ofSeconds(20));
    }

    static void run(int n, CommunicatorOptions options, TransferSettings settings, Body body) {
        run(n, rank -> options, settings, body);
    }

    /** As above, with options per rank (host identities, to fake several hosts). */
    static void run(int n, java.util.function.IntFunction<CommunicatorOptions> optionsOf, TransferSettings settings,
                    Body body) {
        Store store = new InMemoryStore();
        CyclicBarrier barrier = new CyclicBarrier(n);
        List<CompletableFuture<Void>> futures = new ArrayList<>();
        for (int r = 0; r < n; r++) {
            int rank = r;
            CompletableFuture<Void> f = new CompletableFuture<>();
            Thread.ofPlatform().name("rank-" + r).daemon().start(() -> {
                try (TransferEngine e = TransferEngine.create(store, rank, n, optionsOf.apply(rank), settings)) {
                    body.run(e, barrier);
                    barrier.await(30, TimeUnit.SECONDS); // nobody closes while a peer still transfers
                    f.complete(null);
                } catch (Throwable e) {
                    barrier.reset();
                    f.completeExceptionally(e);
                }
            });
            futures.add(f);
        }
        RankFutures.awaitAll(futures, 100);
    }

    /** Fills {@code length} bytes at {@code offset} with a pattern derived from {@code seed}. */
    static void fill(MemorySegment m, long offset, long length, long seed) {
        long x = seed * 0x9E3779B97F4A7C15L + 1;
        long i = 0;
        for (; i + 8 <= length; i += 8) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
            m.set(ValueLayout.JAVA_LONG_UNALIGNED, offset + i, x);
        }
        for (; i < length; i++) {
            m.set(ValueLayout.JAVA_BYTE, offset + i, (byte) (seed + i));
        }
    }

    /** CRC32 of {@code length} bytes at {@code offset}. */
    static long crc(MemorySegment m, long offset, long length) {
        CRC32 crc = new CRC32();
        crc.update(m.asSlice(offset, length).asByteBuffer());
        return crc.getValue();
    }
}
