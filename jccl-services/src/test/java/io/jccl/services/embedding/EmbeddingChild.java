package io.jccl.services.embedding;

import io.jccl.collectives.CommunicatorOptions;
import io.jccl.collectives.store.FileStore;
import io.jccl.services.transfer.TransferEngine;
import io.jccl.services.transfer.TransferSettings;

import java.nio.file.Path;
import java.time.Duration;

/**
 * Rank 1 of a two-process job for {@link EmbeddingMultiProcessTest}: args {@code storeDir transport}. Serves table
 * "remote" (64 rows × 128 floats), prints READY, then rewrites rows 0..7 with content derived from (row, version) as
 * fast as it can, until it is killed.
 */
public final class EmbeddingChild {
    private EmbeddingChild() {
    }

    /** Entry point. */
    public static void main(String[] args) throws Exception {
        CommunicatorOptions options = CommunicatorOptions.defaults().withTransports(args[1])
            .withTimeout(Duration.ofSeconds(20));
        try (FileStore store = new FileStore(Path.of(args[0]));
             TransferEngine engine = TransferEngine.create(store, 1, 2, options, TransferSettings.defaults());
             EmbeddingServer s = EmbeddingServer.create(engine, "remote", 64, 128, (r, out) -> {
                 for (int j = 0; j < out.length; j++) {
                     out[j] = Tables.value(r, TableLayout.INITIAL_VERSION, j);
                 }
             })) {
            System.out.println("READY");
            System.out.flush();
            long until = System.nanoTime() + 120_000_000_000L;
            for (long n = 0; System.nanoTime() < until; n++) {
                int row = (int) (n & 7);
                long next = s.version(row) + 2;
                s.update(row, Tables.row(row, next, 128));
                if ((n & 1023) == 0) {
                    Thread.yield();
                }
            }
        }
    }
}
