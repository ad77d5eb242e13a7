package io.jccl.services.embedding;

import io.jccl.services.ps.Optimizer;
import io.jccl.services.ps.OptimizerSpec;
import io.jccl.services.ps.ParameterServer;
import io.jccl.services.ps.ParameterServerSpec;
import io.jccl.services.ps.ParameterWorker;
import io.jccl.services.transfer.LocalSegment;
import io.jccl.services.transfer.Notification;
import io.jccl.services.transfer.RemoteSegment;
import io.jccl.services.transfer.TransferBatch;
import io.jccl.services.transfer.TransferEngine;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;

/**
 * One rank of {@link ServicesNetnsSystemTest}, in its own network namespace, joined through the launcher's
 * environment (JCCL_RANK, JCCL_WORLD_SIZE, JCCL_STORE_ADDR). First the parameter server: rank 0 serves, rank 1
 * trains 8 synchronous SGD steps and checks the pulled weights bit for bit against the same steps done locally. Then
 * the embedding cache: rank 0 serves a table of 4096 rows × 64 floats, rank 1 looks up 40 batches of 256 random rows
 * (READs over tcp0, every value checked), updates a row remotely and reads its new version back, and tells rank 0,
 * which checks the row in its memory. Prints DEVICE, PS OK, EMB OK, DONE; FAIL and a non-zero exit on anything else.
 */
public final class ServicesNetnsPeer {
    private static final Duration WAIT = Duration.ofSeconds(60);
    private static final int COUNT = 4097;
    private static final int STEPS = 8;
    private static final float SCALE = 1f / 8;
    private static final OptimizerSpec SGD = OptimizerSpec.sgd(0.05f, 0.9f);
    private static final long ROWS = 4096;
    private static final int DIM = 64;
    private static final long UPDATED_ROW = 1234;

    private ServicesNetnsPeer() {
    }

    /** Entry point. */
    public static void main(String[] args) throws Exception {
        try (TransferEngine engine = TransferEngine.fromEnvironment()) {
            System.out.println("DEVICE " + engine.deviceFor(1 - engine.rank()));
            ParameterServerSpec spec = ParameterServerSpec.synchronous("netns-ps", 1, 1, COUNT, SGD, SCALE)
                .withTimeout(WAIT);
            if (engine.rank() == 0) {
                try (ParameterServer server = ParameterServer.start(engine, spec, initial())) {
                    server.serve();
                    check(server.version() == STEPS, "server applied " + server.version() + " steps");
                }
                System.out.println("PS OK");
                serveTable(engine);
            } else {
                train(engine, spec);
                System.out.println("PS OK");
                lookUp(engine);
            }
            System.out.println("DONE");
        } catch (Throwable t) {
            System.out.println("FAIL " + t);
            t.printStackTrace(System.out);
            System.exit(1);
        }
    }

    private static void train(TransferEngine engine, ParameterServerSpec spec) {
        float[] p = new float[COUNT];
        float[] g = new float[COUNT];
        float[] reference = initial();
        Optimizer optimizer = new Optimizer(SGD, COUNT);
        try (ParameterWorker worker = ParameterWorker.connect(engine, spec)) {
            for (int step = 0; step < STEPS; step++) {
                worker.pull(p);
                gradient(p, step, g);
                worker.push(g);
                gradient(reference, step, g);
                optimizer.step(reference, g, SCALE);
            }
            worker.pull(p);
        }
        for (int i = 0; i < COUNT; i++) {
            check(Float.floatToRawIntBits(p[i]) == Float.floatToRawIntBits(reference[i]),
                "weight " + i + ": pulled " + p[i] + ", trained locally " + reference[i]);
        }
    }

    private static void serveTable(TransferEngine engine) throws Exception {
        LocalSegment done = engine.registerSegment("netns/emb-done", 64);
        try (EmbeddingServer table = EmbeddingServer.create(engine, "netns-emb", ROWS, DIM,
            ServicesNetnsPeer::fill)) {
            Notification n = engine.pollNotification(60, TimeUnit.SECONDS);
            check(n != null && n.text().equals("emb done"), "no 'emb done' from rank 1 within 60 s: " + n);
            float[] row = new float[DIM];
            table.read(UPDATED_ROW, row);
            check(row[5] == -5f && table.version(UPDATED_ROW) > 0, "row " + UPDATED_ROW + " not updated: "
                + row[5]);
        }
        done.close();
        System.out.println("EMB OK");
    }

    private static void lookUp(TransferEngine engine) {
        float[] expected = new float[DIM];
        SplittableRandom random = new SplittableRandom(18);
        try (EmbeddingClient items = EmbeddingClient.open(engine, "netns-emb", WAIT, 0);
             EmbeddingLookup lookup = items.newLookup(256)) {
            check(!items.isDirect(), "tcp0 offers no direct access");
            for (int b = 0; b < 40; b++) {
                lookup.clear();
                for (int k = 0; k < 256; k++) {
                    lookup.add(random.nextLong(ROWS));
                }
                check(lookup.execute(), "lookup failed: " + lookup.error(0));
                for (int k = 0; k < 256; k++) {
                    fill(lookup.row(k), expected);
                    for (int j = 0; j < DIM; j++) {
                        check(lookup.get(k, j) == expected[j], "row " + lookup.row(k) + "[" + j + "]");
                    }
                }
            }
            float[] values = new float[DIM];
            for (int j = 0; j < DIM; j++) {
                values[j] = -j;
            }
            long version = items.update(UPDATED_ROW, values);
            lookup.clear();
            lookup.add(UPDATED_ROW);
            check(lookup.execute() && lookup.version(0) == version && lookup.get(0, 5) == -5f,
                "the update did not read back: version " + lookup.version(0) + " vs " + version);
        }
        RemoteSegment done = engine.openSegment("netns/emb-done", WAIT);
        LocalSegment word = engine.registerSegment("netns/emb-word", 64);
        try (TransferBatch b = engine.newBatch(1)) {
            b.write(word, 0, done, 0, 8);
            b.notify("emb done".getBytes(StandardCharsets.UTF_8));
            check(b.submit().await(), b.toString());
        }
        System.out.println("EMB OK");
    }

    private static void fill(long row, float[] out) {
        for (int j = 0; j < out.length; j++) {
            out[j] = row * 0.5f + j;
        }
    }

    private static float[] initial() {
        float[] p = new float[COUNT];
        for (int i = 0; i < COUNT; i++) {
            p[i] = (float) StrictMath.cos(i * 0.7) * 0.5f;
        }
        return p;
    }

    private static void gradient(float[] p, long step, float[] out) {
        for (int i = 0; i < p.length; i++) {
            out[i] = (float) StrictMath.sin(p[i] + step * 0.37f + i * 0.01f);
        }
    }

    private static void check(boolean ok, String what) {
        if (!ok) {
            throw new IllegalStateException(what);
        }
    }
}
