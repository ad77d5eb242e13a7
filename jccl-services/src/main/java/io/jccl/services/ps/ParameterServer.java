package io.jccl.services.ps;

import io.jccl.common.Log;
import io.jccl.services.transfer.LocalSegment;
import io.jccl.services.transfer.Notification;
import io.jccl.services.transfer.TransferEngine;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;
import java.util.concurrent.TimeUnit;

/**
 * One server rank of a parameter-server job: it holds its shard of the parameters in registered memory that workers
 * READ without this process's CPU, receives the workers' gradients by WRITE into one slot per worker (each push ends
 * with a WRITE_WITH_IMM whose immediate data is the worker's push number), sums them and applies the
 * {@link Optimizer}.
 *
 * <p>Memory it registers (names from {@link ParameterServerSpec}):
 * <pre>
 * ps/NAME/weights/S   [ sequence (8 B) | applied gradients per worker (8 B each) | pad to 64 B ][ shard, float32 ]
 * ps/NAME/gradients/S [ worker 0's slot | worker 1's slot | ... ]  each slot: the shard's length in float32
 * </pre>
 *
 * <p><b>The sequence word</b> (a seqlock): even when the weights are stable, odd while this server rewrites them;
 * {@code sequence / 2 − 1} is the number of updates applied (the weights' version); 0 until the initial weights are
 * in place (the segment is published, zeroed, before this server copies them). A worker reads the header, then the
 * weights, then (asynchronous mode) the sequence again, and uses the weights only when both sequence reads are the
 * same even value; a worker therefore never trains on half-updated weights. In the synchronous mode the second read is
 * not needed: version v + 1 is written only after every worker pushed its gradient of step v, which a worker does
 * only after it finished reading version v.
 *
 * <p><b>Summation order</b> (synchronous mode): {@code sum[i] = g0[i] + g1[i] + ... + g(W−1)[i]}, left to right in
 * worker order, in float32 (the first term is worker 0's value itself, not 0 + g0, so a −0.0 stays −0.0); then the
 * optimizer applies {@code sum × gradientScale}. jccl-collectives' direct all-reduce over shm reduces its sources
 * in rank order the same way, which is what makes the two bit-identical (ParameterServerTest).
 */
public final class ParameterServer implements AutoCloseable {
    /** The immediate data of a worker's goodbye (after its last gradient was applied). */
    static final int BYE = -1;

    private final Log log = Log.get();
    private final TransferEngine engine;
    private final ParameterServerSpec spec;
    private final int server;
    private final int shardLength;
    private final long headerBytes;
    private final LocalSegment weights;
    private final LocalSegment gradients;
    private final MemorySegment weightsMemory;
    private final MemorySegment gradientsMemory;
    private final Optimizer optimizer;
    private final float[] sum;
    private final long[] applied;
    private final boolean[] arrived;
    private final boolean[] left;
    private long sequence;
    private volatile long version;

    private ParameterServer(TransferEngine engine, ParameterServerSpec spec, float[] initialParameters) {
        if (engine.size() != spec.ranks()) {
            throw new ParameterServerException("the transfer engine's job has " + engine.size() + " ranks; the spec "
                + "wants " + spec.servers() + " servers + " + spec.workers() + " workers = " + spec.ranks());
        }
        if (engine.rank() >= spec.servers()) {
            throw new ParameterServerException("rank " + engine.rank() + " is a worker (servers are ranks 0.."
                + (spec.servers() - 1) + ")");
        }
        if (initialParameters.length != spec.parameterCount()) {
            throw new IllegalArgumentException(initialParameters.length + " initial parameters, the spec says "
                + spec.parameterCount());
        }
        this.engine = engine;
        this.spec = spec;
        this.server = engine.rank();
        this.shardLength = spec.shardLength(server);
        this.headerBytes = spec.headerBytes();
        this.optimizer = new Optimizer(spec.optimizer(), shardLength);
        this.sum = new float[shardLength];
        this.applied = new long[spec.workers()];
        this.arrived = new boolean[spec.workers()];
        this.left = new boolean[spec.workers()];
        this.weights = engine.registerSegment(spec.weightsName(server), headerBytes + (long) shardLength * Float.BYTES);
        try {
            this.gradients = engine.registerSegment(spec.gradientsName(server),
                (long) spec.workers() * shardLength * Float.BYTES);
        } catch (RuntimeException e) {
            weights.close();
            throw e;
        }
        this.weightsMemory = weights.memory();
        this.gradientsMemory = gradients.memory();
        MemorySegment.copy(initialParameters, spec.shardStart(server), weightsMemory, ValueLayout.JAVA_FLOAT,
            headerBytes, shardLength);
        // The segment was published (zeroed) before the copy: sequence 0 tells workers it is not initialized yet.
        VarHandle.releaseFence();
        sequence = 2;
        weightsMemory.set(ValueLayout.JAVA_LONG, 0, sequence);
    }

    /**
     * Starts server {@code engine.rank()} of {@code spec}: registers its weights (its shard of
     * {@code initialParameters}, version 0) and its gradient slots. Workers may pull as soon as this returns.
     *
     * @throws ParameterServerException when the engine's rank is not a server or its job has another size
     */
    public static ParameterServer start(TransferEngine engine, ParameterServerSpec spec, float[] initialParameters) {
        return new ParameterServer(engine, spec, initialParameters);
    }

    /** This server's index (its rank). */
    public int server() {
        return server;
    }

    /** Updates applied so far (the weights' version). */
    public long version() {
        return version;
    }

    /** Gradients of worker {@code worker} applied so far. */
    public synchronized long applied(int worker) {
        return applied[worker];
    }

    /** A copy of this server's shard as it is now. */
    public synchronized float[] shard() {
        float[] out = new float[shardLength];
        MemorySegment.copy(weightsMemory, ValueLayout.JAVA_FLOAT, headerBytes, out, 0, shardLength);
        return out;
    }

    /**
     * Serves until every worker said goodbye ({@link ParameterWorker#close()}): waits for gradients (notifications),
     * sums and applies them. The caller's thread does the work; the pulls need none of it.
     *
     * @throws ParameterServerException when no gradient arrives within the spec's timeout (naming the workers
     *     waited for), or a worker breaks the protocol (a synchronous worker leaving before the others)
     */
    public void serve() {
        int remaining = spec.workers();
        int arrivedCount = 0;
        while (remaining > 0) {
            Notification n;
            try {
                n = engine.pollNotification(spec.timeoutNs(), TimeUnit.NANOSECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new ParameterServerException("server " + server + " interrupted", e);
            }
            if (n == null) {
                throw new ParameterServerException("server " + server + ": no gradient within "
                    + spec.timeout().toMillis() + " ms; waiting for " + waitingFor() + " (exited or stalled?)");
            }
            int worker = n.fromRank() - spec.servers();
            if (worker < 0 || worker >= spec.workers() || n.message().length != Integer.BYTES) {
                log.warn(server, Log.Subsys.INIT, "parameter server " + server + ": ignoring a notification from rank "
                    + n.fromRank() + " (not a worker's push)");
                continue;
            }
            int push = n.immediateData();
            if (push == BYE) {
                if (left[worker]) {
                    continue;
                }
                if (spec.isSynchronous() && (arrivedCount > 0 || anyLeftBehind(worker))) {
                    throw new ParameterServerException("server " + server + ": worker " + worker + " left after "
                        + applied[worker] + " steps while others pushed more: synchronous workers must run the same "
                        + "number of steps");
                }
                left[worker] = true;
                remaining--;
                continue;
            }
            if (left[worker] || arrived[worker] || push != applied[worker] + 1) {
                throw new ParameterServerException("server " + server + ": worker " + worker + " pushed gradient #"
                    + push + " but " + applied[worker] + " of its gradients were applied" + (arrived[worker]
                    ? " and one waits" : "") + (left[worker] ? " and it said goodbye" : ""));
            }
            if (spec.isSynchronous()) {
                if (anyLeft()) {
                    throw new ParameterServerException("server " + server + ": worker " + worker + " pushed step "
                        + push + " but another worker already left: synchronous workers must run the same number of "
                        + "steps");
                }
                arrived[worker] = true;
                if (++arrivedCount == spec.workers()) {
                    applySum();
                    java.util.Arrays.fill(arrived, false);
                    arrivedCount = 0;
                }
            } else {
                applyOne(worker);
            }
        }
    }

    private boolean anyLeft() {
        for (boolean l : left) {
            if (l) {
                return true;
            }
        }
        return false;
    }

    private boolean anyLeftBehind(int worker) {
        for (int w = 0; w < applied.length; w++) {
            if (applied[w] != applied[worker]) {
                return true;
            }
        }
        return false;
    }

    private String waitingFor() {
        StringBuilder sb = new StringBuilder();
        for (int w = 0; w < spec.workers(); w++) {
            if (!left[w] && !arrived[w]) {
                sb.append(sb.isEmpty() ? "" : ", ").append("worker ").append(w).append(" (rank ")
                    .append(spec.servers() + w).append(", gradient #").append(applied[w] + 1).append(')');
            }
        }
        return sb.toString();
    }

    /** Synchronous step: sum of every worker's slot in worker order, then the optimizer. */
    private void applySum() {
        long slotBytes = (long) shardLength * Float.BYTES;
        MemorySegment.copy(gradientsMemory, ValueLayout.JAVA_FLOAT, 0, sum, 0, shardLength);
        for (int w = 1; w < spec.workers(); w++) {
            long base = w * slotBytes;
            for (int i = 0; i < shardLength; i++) {
                sum[i] += gradientsMemory.get(ValueLayout.JAVA_FLOAT, base + (long) i * Float.BYTES);
            }
        }
        publish(-1);
    }

    /** Asynchronous step: one worker's gradient, applied as it comes. */
    private void applyOne(int worker) {
        MemorySegment.copy(gradientsMemory, ValueLayout.JAVA_FLOAT, (long) worker * shardLength * Float.BYTES, sum, 0,
            shardLength);
        publish(worker);
    }

    /** Applies {@link #sum} under the sequence word; {@code worker} -1: every worker's gradient was in it. */
    private synchronized void publish(int worker) {
        weightsMemory.set(ValueLayout.JAVA_LONG, 0, sequence + 1);
        // Odd before any weight changes: a reader that sees the old even value after its READ knows it raced.
        VarHandle.fullFence();
        optimizer.step(weightsMemory, headerBytes, sum, spec.gradientScale());
        for (int w = 0; w < applied.length; w++) {
            if (worker < 0 || w == worker) {
                applied[w]++;
                weightsMemory.set(ValueLayout.JAVA_LONG, 8 + 8L * w, applied[w]);
            }
        }
        VarHandle.releaseFence();
        sequence += 2;
        weightsMemory.set(ValueLayout.JAVA_LONG, 0, sequence);
        version = (sequence >>> 1) - 1;
    }

    /** Unregisters the weights and gradient slots (workers' later transfers fail with the segment named). */
    @Override
    public void close() {
        gradients.close();
        weights.close();
    }
}
