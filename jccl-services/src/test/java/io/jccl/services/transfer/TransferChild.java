package io.jccl.services.transfer;

import io.jccl.collectives.CommunicatorOptions;
import io.jccl.collectives.store.FileStore;

import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.TimeUnit;

/**
 * Rank 1 of a two-process job for {@link TransferMultiProcessTest}: args {@code storeDir transport mode}. Registers
 * segment "child" (16 MiB) and prints READY; mode {@code verify} then checks each notification ("length offset crc")
 * against its memory and prints VERIFIED, until "bye"; mode {@code idle} waits to be killed.
 */
public final class TransferChild {
    private TransferChild() {
    }

    /** Entry point. */
    public static void main(String[] args) throws Exception {
        CommunicatorOptions options = CommunicatorOptions.defaults().withTransports(args[1])
            .withTimeout(Duration.ofSeconds(20));
        try (FileStore store = new FileStore(Path.of(args[0]));
             TransferEngine engine = TransferEngine.create(store, 1, 2, options, TransferSettings.defaults())) {
            LocalSegment child = engine.registerSegment("child", 16 << 20);
            System.out.println("READY");
            System.out.flush();
            if (args[2].equals("idle")) {
                Thread.sleep(120_000);
                return;
            }
            while (true) {
                Notification n = engine.pollNotification(30, TimeUnit.SECONDS);
                if (n == null || n.text().equals("bye")) {
                    System.out.println(n == null ? "TIMEOUT" : "BYE");
                    return;
                }
                String[] f = n.text().split(" ");
                long length = Long.parseLong(f[0]);
                long offset = Long.parseLong(f[1]);
                long crc = Engines.crc(child.memory(), offset, length);
                System.out.println((crc == Long.parseLong(f[2]) ? "VERIFIED " : "MISMATCH ") + length);
                System.out.flush();
            }
        }
    }
}
