package io.jccl.services.kvcache;

import io.jccl.services.transfer.LocalSegment;
import io.jccl.services.transfer.Notification;
import io.jccl.services.transfer.RemoteSegment;
import io.jccl.services.transfer.TransferBatch;
import io.jccl.services.transfer.TransferEngine;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.TimeUnit;

/**
 * One rank of {@link KvCacheNetnsSystemTest}, in its own network namespace, joined through the launcher's
 * environment (JCCL_RANK, JCCL_WORLD_SIZE, JCCL_STORE_ADDR): rank 0 WRITEs 8 MiB to rank 1's segment with a
 * notification and READs 1 MiB back (the transfer engine), then sends 6 KV requests (the KV-cache transfer); rank 1
 * checks both. Prints DEVICE, ENGINE OK, KV OK id, DONE; FAIL and a non-zero exit on anything else.
 */
public final class KvNetnsPeer {
    private static final Duration WAIT = Duration.ofSeconds(60);
    private static final int BYTES = 8 << 20;
    private static final KvCacheLayout LAYOUT = new KvCacheLayout(16, 2, 2, 64, 2);

    private KvNetnsPeer() {
    }

    /** Entry point. */
    public static void main(String[] args) throws Exception {
        try (TransferEngine engine = TransferEngine.fromEnvironment()) {
            int peer = 1 - engine.rank();
            System.out.println("DEVICE " + engine.deviceFor(peer));
            if (engine.rank() == 0) {
                prefill(engine);
            } else {
                decode(engine);
            }
            System.out.println("DONE");
        } catch (Throwable t) {
            System.out.println("FAIL " + t);
            t.printStackTrace(System.out);
            System.exit(1);
        }
    }

    private static void prefill(TransferEngine engine) throws Exception {
        LocalSegment source = engine.registerSegment("netns/source", BYTES);
        KvData.fill(source.memory(), 7, 0);
        RemoteSegment target = engine.openSegment("netns/target", WAIT);
        try (TransferBatch b = engine.newBatch(2)) {
            b.write(source, 0, target, 0, BYTES);
            b.notify(("crc " + KvData.crc(source.memory())).getBytes(StandardCharsets.UTF_8));
            if (!b.submit().await()) {
                throw new IllegalStateException(b.toString());
            }
            b.clear();
            LocalSegment back = engine.registerSegment("netns/back", 1 << 20);
            b.read(back, 0, target, 3 << 20, 1 << 20);
            if (!b.submit().await()) {
                throw new IllegalStateException(b.toString());
            }
            if (KvData.crc(back.memory()) != KvData.crc(source.memory().asSlice(3 << 20, 1 << 20))) {
                throw new IllegalStateException("READ back differs");
            }
        }
        System.out.println("ENGINE OK");
        try (KvBlockPool pool = KvBlockPool.register(engine, "netns/prefill", LAYOUT, 32);
             KvCacheSender sender = KvCacheSender.open(engine, "netns", pool, WAIT)) {
            for (int id = 1; id <= 6; id++) {
                int[] table = {id, 31 - id, id + 10, id + 11};
                for (int i = 0; i < table.length; i++) {
                    KvData.fill(pool.block(table[i]), id, i);
                }
                // The receiver holds 8 blocks: from request 3 on, blocks come back before they are reused.
                sender.send(id, table, 4, 60, WAIT);
                System.out.println("KV SENT " + id);
            }
            sender.awaitReturned(WAIT);
        }
    }

    private static void decode(TransferEngine engine) throws Exception {
        LocalSegment target = engine.registerSegment("netns/target", BYTES);
        try (KvCacheReceiver receiver = KvCacheReceiver.create(engine, "netns", LAYOUT, 8)) {
            Notification n = engine.pollNotification(60, TimeUnit.SECONDS);
            if (n == null) {
                throw new IllegalStateException("no notification within 60 s");
            }
            long crc = KvData.crc(target.memory());
            if (!n.text().equals("crc " + crc)) {
                throw new IllegalStateException("engine: notification '" + n.text() + "', memory crc " + crc);
            }
            System.out.println("ENGINE OK");
            for (int id = 1; id <= 6; id++) {
                KvRequest r = receiver.await(id, WAIT);
                if (!KvData.verify(r, LAYOUT.blockBytes()) || r.tokens() != 60 || r.blockCount() != 4) {
                    throw new IllegalStateException("KV request " + id + " differs: " + r);
                }
                receiver.release(r);
                System.out.println("KV OK " + id);
            }
            receiver.flushReturns();
        }
    }
}
