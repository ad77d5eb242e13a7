package io.jccl.services.kvcache;

import io.jccl.collectives.CommunicatorOptions;
import io.jccl.collectives.store.FileStore;
import io.jccl.services.transfer.TransferEngine;
import io.jccl.services.transfer.TransferSettings;

import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.TimeUnit;

/**
 * Rank 1 of a two-process job for {@link KvCacheMultiProcessTest}: args {@code storeDir transport role}. Role
 * {@code decode}: a receiver "mp" of 8 blocks; prints READY, then for each request that arrives OK id (checksums
 * match) or BAD id, and releases it, until none comes for 30 s. Role {@code prefill}: sends request 1 (3 blocks) to
 * receiver "mp", prints SENT 1 and waits to be killed.
 */
public final class KvCacheChild {
    private KvCacheChild() {
    }

    /** Entry point. */
    public static void main(String[] args) throws Exception {
        CommunicatorOptions options = CommunicatorOptions.defaults().withTransports(args[1])
            .withTimeout(Duration.ofSeconds(20));
        try (FileStore store = new FileStore(Path.of(args[0]));
             TransferEngine engine = TransferEngine.create(store, 1, 2, options, TransferSettings.defaults())) {
            if (args[2].equals("prefill")) {
                try (KvBlockPool pool = KvBlockPool.register(engine, "child", KvPair.LAYOUT, 8);
                     KvCacheSender sender = KvCacheSender.open(engine, "mp", pool, Duration.ofSeconds(20))) {
                    int[] table = {5, 6, 2};
                    for (int i = 0; i < table.length; i++) {
                        KvData.fill(pool.block(table[i]), 1, i);
                    }
                    sender.send(1, table, 3, 5, Duration.ofSeconds(20));
                    System.out.println("SENT 1");
                    System.out.flush();
                    Thread.sleep(120_000);
                }
                return;
            }
            try (KvCacheReceiver receiver = KvCacheReceiver.create(engine, "mp", KvPair.LAYOUT, 8)) {
                System.out.println("READY");
                System.out.flush();
                while (true) {
                    KvRequest r = receiver.poll(30, TimeUnit.SECONDS);
                    if (r == null) {
                        return;
                    }
                    boolean ok = KvData.verify(r, KvPair.LAYOUT.blockBytes());
                    receiver.release(r);
                    System.out.println((ok ? "OK " : "BAD ") + r.requestId());
                    System.out.flush();
                }
            }
        }
    }
}
