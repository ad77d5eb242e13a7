package io.jccl.services.rendezvous;

import io.jccl.collectives.store.FileStore;

import java.nio.file.Path;
import java.util.concurrent.TimeUnit;

/** The last rank in its own JVM for {@link RendezvousMultiProcessTest}: ready on topic 1, then idle until killed. */
public final class RendezvousChild {
    private RendezvousChild() {
    }

    /** Arguments: store directory, device, rank, size. */
    public static void main(String[] args) throws Exception {
        FileStore store = new FileStore(Path.of(args[0]));
        Rendezvous r = Rendezvous.join(store, Integer.parseInt(args[2]), Integer.parseInt(args[3]),
            Ranks.options(args[1]));
        r.publish(1);
        System.out.println("READY");
        Thread.sleep(TimeUnit.MINUTES.toMillis(2));
    }
}
