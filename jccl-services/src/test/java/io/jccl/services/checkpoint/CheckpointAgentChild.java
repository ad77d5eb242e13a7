package io.jccl.services.checkpoint;

import io.jccl.collectives.CommunicatorOptions;
import io.jccl.collectives.store.FileStore;
import io.jccl.services.transfer.TransferEngine;
import io.jccl.services.transfer.TransferSettings;

import java.nio.file.Path;

/**
 * The checkpoint agent as rank 1 of a two-process job for {@link CheckpointFailureTest}: args
 * {@code storeDir transport checkpointDir persistBytesPerSecond}. Prints READY once its segments are registered, then
 * serves until killed.
 */
public final class CheckpointAgentChild {
    private CheckpointAgentChild() {
    }

    /** Entry point. */
    public static void main(String[] args) throws Exception {
        CommunicatorOptions options = CommunicatorOptions.defaults().withTransports(args[1])
            .withTimeout(Jobs.TIMEOUT);
        try (FileStore store = new FileStore(Path.of(args[0]));
             TransferEngine engine = TransferEngine.create(store, 1, 2, options, TransferSettings.defaults());
             CheckpointAgent agent = CheckpointAgent.start(engine, CheckpointSettings.defaults(Path.of(args[2]))
                 .withStagingBytes(4 << 20).withPersistBytesPerSecond(Long.parseLong(args[3])))) {
            System.out.println("READY durable=" + agent.durableStep());
            System.out.flush();
            Thread.sleep(120_000);
        }
    }
}
