package io.jccl.services.ps;

import io.jccl.collectives.store.FileStore;
import io.jccl.services.transfer.TransferEngine;
import io.jccl.services.transfer.TransferSettings;

import java.nio.file.Path;

/**
 * Server 0 (rank 0) of a job of 1 server and 2 workers for {@link ParameterServerMultiProcessTest}: args
 * {@code storeDir transport}. Prints READY once serving, then serves until it is killed.
 */
public final class ParameterServerChild {
    private ParameterServerChild() {
    }

    /** Entry point. */
    public static void main(String[] args) throws Exception {
        try (FileStore store = new FileStore(Path.of(args[0]));
             TransferEngine engine = TransferEngine.create(store, 0, 3, Jobs.options(args[1]),
                 TransferSettings.defaults());
             ParameterServer server = ParameterServer.start(engine, ParameterServerMultiProcessTest.SPEC,
                 Jobs.initial(ParameterServerMultiProcessTest.SPEC.parameterCount()))) {
            System.out.println("READY");
            System.out.flush();
            server.serve();
        }
    }
}
