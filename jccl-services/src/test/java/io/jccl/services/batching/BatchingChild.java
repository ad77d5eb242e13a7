package io.jccl.services.batching;

import io.jccl.collectives.store.FileStore;

import java.nio.file.Path;
import java.util.concurrent.TimeUnit;

/** A consumer in its own JVM for {@link InferenceBatchingMultiProcessTest}: serves until killed. */
public final class BatchingChild {
    private BatchingChild() {
    }

    /** Arguments: store directory, device. */
    public static void main(String[] args) throws Exception {
        FileStore store = new FileStore(Path.of(args[0]));
        String device = args[1];
        // A long delay: requests stay queued, so the parent has requests in flight when this process dies.
        InferenceServer server = InferenceServer.create(store, "child", InferenceBatchingTest.config(device)
            .withMaxBatchSize(8).withMaxQueueDelayNs(TimeUnit.SECONDS.toNanos(60)), InferenceBatchingTest.DOUBLER,
            InferenceBatchingTest.options(device));
        System.out.println("READY " + server.device());
        Thread.sleep(TimeUnit.MINUTES.toMillis(2));
    }
}
