package io.jccl.services.ps;

import io.jccl.common.idle.BackoffIdleStrategy;
import io.jccl.common.idle.IdleStrategy;
import io.jccl.services.transfer.LocalSegment;
import io.jccl.services.transfer.RemoteSegment;
import io.jccl.services.transfer.TransferBatch;
import io.jccl.services.transfer.TransferEngine;
import io.jccl.services.transfer.TransferException;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * One worker rank of a parameter-server job: {@link #pull(float[])} READs every server's weights (no server CPU),
 * {@link #push(float[])} WRITEs its gradient into its slot on every server and notifies each with a WRITE_WITH_IMM.
 * A training step is {@code pull → compute the gradient → push}.
 *
 * <ul>
 *   <li>Synchronous mode: before step c ({@code c} = gradients pushed so far) {@code pull} waits until every server
 *       published version c, which includes every worker's gradient of step c − 1.</li>
 *   <li>Asynchronous mode with bound S: {@code pull} waits until every worker's gradients of the steps before
 *       c − S are applied on every server (so no worker runs more than S steps ahead of the slowest), then reads
 *       the latest weights, checking the sequence word before and after (re-reading when a server updated them in
 *       between).</li>
 * </ul>
 *
 * A server that died or stopped answering fails the call with a {@link ParameterServerException} naming it (the
 * transfer engine's error says whether the process exited or the link broke); no call waits longer than the spec's
 * timeout. {@code pull} and {@code push} allocate nothing. Not thread-safe: one training thread per worker.
 */
public final class ParameterWorker implements AutoCloseable {
    private final ParameterServerSpec spec;
    private final int worker;
    private final int servers;
    private final long headerBytes;
    private final LocalSegment pullSegment;
    private final LocalSegment pushSegment;
    private final MemorySegment pullMemory;
    private final MemorySegment pushMemory;
    private final RemoteSegment[] weights;
    private final RemoteSegment[] gradients;
    /** Where server s's header and weights land in the pull segment; its second header read goes to checkOffset. */
    private final long[] pullOffset;
    private final long[] checkOffset;
    private final TransferBatch headers;
    private final TransferBatch reads;
    private final TransferBatch checks;
    private final TransferBatch[] pushes;
    private final IdleStrategy idle = new BackoffIdleStrategy();
    private long steps;
    private long slowestApplied;
    private long tornReads;
    private boolean failed;
    private boolean closed;

    private ParameterWorker(TransferEngine engine, ParameterServerSpec spec) {
        if (engine.size() != spec.ranks()) {
            throw new ParameterServerException("the transfer engine's job has " + engine.size() + " ranks; the spec "
                + "wants " + spec.servers() + " servers + " + spec.workers() + " workers = " + spec.ranks());
        }
        if (engine.rank() < spec.servers()) {
            throw new ParameterServerException("rank " + engine.rank() + " is a server (workers are ranks "
                + spec.servers() + ".." + (spec.ranks() - 1) + ")");
        }
        this.spec = spec;
        this.worker = engine.rank() - spec.servers();
        this.servers = spec.servers();
        this.headerBytes = spec.headerBytes();
        this.pullOffset = new long[servers];
        this.checkOffset = new long[servers];
        long at = 0;
        for (int s = 0; s < servers; s++) {
            pullOffset[s] = at;
            // Headers hold longs: each shard's region starts on a cache line whatever the shard lengths.
            at = (at + headerBytes + (long) spec.shardLength(s) * Float.BYTES + 63) & ~63L;
        }
        for (int s = 0; s < servers; s++) {
            checkOffset[s] = at;
            at += headerBytes;
        }
        this.weights = new RemoteSegment[servers];
        this.gradients = new RemoteSegment[servers];
        LocalSegment pulled = null;
        LocalSegment pushed = null;
        TransferBatch h = null;
        TransferBatch r = null;
        TransferBatch c = null;
        TransferBatch[] p = new TransferBatch[servers];
        try {
            pulled = engine.registerSegment(spec.pullName(worker), at);
            pushed = engine.registerSegment(spec.pushName(worker), (long) spec.parameterCount() * Float.BYTES);
            for (int s = 0; s < servers; s++) {
                weights[s] = open(engine, spec.weightsName(s), s);
                gradients[s] = open(engine, spec.gradientsName(s), s);
            }
            h = engine.newBatch(servers);
            r = engine.newBatch(servers);
            c = engine.newBatch(servers);
            for (int s = 0; s < servers; s++) {
                p[s] = engine.newBatch(1);
            }
        } catch (RuntimeException e) {
            for (TransferBatch b : new TransferBatch[] {h, r, c}) {
                if (b != null) {
                    b.close();
                }
            }
            for (TransferBatch b : p) {
                if (b != null) {
                    b.close();
                }
            }
            if (pulled != null) {
                pulled.close();
            }
            if (pushed != null) {
                pushed.close();
            }
            throw e;
        }
        this.pullSegment = pulled;
        this.pushSegment = pushed;
        this.pullMemory = pulled.memory();
        this.pushMemory = pushed.memory();
        this.headers = h;
        this.reads = r;
        this.checks = c;
        this.pushes = p;
    }

    private RemoteSegment open(TransferEngine engine, String name, int server) {
        try {
            return engine.openSegment(name, spec.timeout());
        } catch (TransferException e) {
            throw new ParameterServerException("worker " + worker + ": server " + server + " (rank " + server
                + ") is not serving '" + spec.name() + "': " + e.getMessage(), e);
        }
    }

    /**
     * Connects worker {@code engine.rank() − servers} of {@code spec} to every server (waiting up to the spec's
     * timeout for each to start).
     *
     * @throws ParameterServerException when the engine's rank is not a worker, its job has another size, or a server
     *     did not start in time
     */
    public static ParameterWorker connect(TransferEngine engine, ParameterServerSpec spec) {
        return new ParameterWorker(engine, spec);
    }

    /** This worker's index (rank − servers). */
    public int worker() {
        return worker;
    }

    /** Gradients pushed so far (the step this worker is at). */
    public long steps() {
        return steps;
    }

    /**
     * The fewest gradients any worker had applied on any server when the last {@link #pull(float[])} went ahead
     * (asynchronous mode: {@code steps() − slowestApplied() ≤ S} then held).
     */
    public long slowestApplied() {
        return slowestApplied;
    }

    /** Weight reads that raced with a server's update and were repeated (asynchronous mode). */
    public long tornReads() {
        return tornReads;
    }

    /**
     * Reads the weights of this worker's current step into {@code parameters} (every server's shard), waiting as the
     * mode requires (class comment).
     *
     * @throws ParameterServerException when a server died, or the wait passed the spec's timeout
     */
    public void pull(float[] parameters) {
        checkUsable();
        if (parameters.length != spec.parameterCount()) {
            throw new IllegalArgumentException(parameters.length + " parameters, the spec says "
                + spec.parameterCount());
        }
        long deadlineNs = System.nanoTime() + spec.timeoutNs();
        idle.reset();
        while (true) {
            waitUntilReady(deadlineNs);
            reads.clear();
            for (int s = 0; s < servers; s++) {
                reads.read(pullSegment, pullOffset[s] + headerBytes, weights[s], headerBytes,
                    (long) spec.shardLength(s) * Float.BYTES);
            }
            await(reads.submit(), "reading the weights");
            if (!spec.isSynchronous() && !unchangedSinceHeaders()) {
                tornReads++;
                continue;
            }
            break;
        }
        for (int s = 0; s < servers; s++) {
            MemorySegment.copy(pullMemory, ValueLayout.JAVA_FLOAT, pullOffset[s] + headerBytes, parameters,
                spec.shardStart(s), spec.shardLength(s));
        }
    }

    /** READs every server's header until the mode's condition holds (class comment). */
    private void waitUntilReady(long deadlineNs) {
        while (true) {
            readHeaders(headers, pullOffset);
            int notReady = -1;
            long slowest = Long.MAX_VALUE;
            for (int s = 0; s < servers && notReady < 0; s++) {
                long sequence = pullMemory.get(ValueLayout.JAVA_LONG, pullOffset[s]);
                if ((sequence & 1) != 0 || sequence == 0) {
                    notReady = s; // being rewritten right now, or not initialized yet
                } else if (spec.isSynchronous()) {
                    long version = (sequence >>> 1) - 1;
                    if (version > steps) {
                        throw fail("server " + s + " is at version " + version + " but this worker pushed only "
                            + steps + " gradients: another job with the name '" + spec.name() + "'?");
                    }
                    notReady = version < steps ? s : -1;
                } else {
                    for (int w = 0; w < spec.workers(); w++) {
                        slowest = Math.min(slowest, applied(pullOffset[s], w));
                    }
                    // Step c = steps may start when every worker's steps before c − S were applied everywhere; the
                    // slot this worker writes next must be free too (its previous gradient applied).
                    if (slowest < steps - spec.staleness() || applied(pullOffset[s], worker) < steps) {
                        notReady = s;
                    }
                }
            }
            if (notReady < 0) {
                slowestApplied = spec.isSynchronous() ? steps : slowest;
                return;
            }
            if (System.nanoTime() - deadlineNs > 0) {
                throw fail("server " + notReady + " (rank " + notReady + ") did not get to "
                    + (spec.isSynchronous() ? "version " + steps : "the gradients step " + steps + " waits for "
                    + "(staleness " + spec.staleness() + ")") + " within " + spec.timeout().toMillis()
                    + " ms; a worker exited or stalled?");
            }
            idle.idle(0);
        }
    }

    private long applied(long headerOffset, int w) {
        return pullMemory.get(ValueLayout.JAVA_LONG, headerOffset + 8 + 8L * w);
    }

    /** Reads the sequence words again: true when every one equals what the headers said before the weights. */
    private boolean unchangedSinceHeaders() {
        readHeaders(checks, checkOffset);
        for (int s = 0; s < servers; s++) {
            if (pullMemory.get(ValueLayout.JAVA_LONG, checkOffset[s]) != pullMemory.get(ValueLayout.JAVA_LONG,
                pullOffset[s])) {
                return false;
            }
        }
        return true;
    }

    private void readHeaders(TransferBatch batch, long[] offsets) {
        batch.clear();
        for (int s = 0; s < servers; s++) {
            batch.read(pullSegment, offsets[s], weights[s], 0, headerBytes);
        }
        await(batch.submit(), "reading the weights' header");
    }

    /**
     * Pushes this worker's gradient for its current step: WRITE of each shard's part into this worker's slot on its
     * server, then a WRITE_WITH_IMM carrying the push number. Returns once every server has it.
     *
     * @throws ParameterServerException when a server died (its transfers failed)
     */
    public void push(float[] gradient) {
        checkUsable();
        if (gradient.length != spec.parameterCount()) {
            throw new IllegalArgumentException(gradient.length + " gradient values, the spec says "
                + spec.parameterCount());
        }
        if (!spec.isSynchronous()) {
            waitForOwnSlot();
        }
        MemorySegment.copy(gradient, 0, pushMemory, ValueLayout.JAVA_FLOAT, 0, gradient.length);
        int push = (int) (steps + 1);
        for (int s = 0; s < servers; s++) {
            long length = (long) spec.shardLength(s) * Float.BYTES;
            pushes[s].clear();
            pushes[s].write(pushSegment, (long) spec.shardStart(s) * Float.BYTES, gradients[s], worker * length,
                length);
            pushes[s].notifyImmediate(push).submit();
        }
        for (int s = 0; s < servers; s++) {
            await(pushes[s], "pushing a gradient"); // a constant: no string per push
        }
        steps++;
    }

    /** Asynchronous mode: this worker's previous gradient must be applied before its slot is rewritten. */
    private void waitForOwnSlot() {
        long deadlineNs = System.nanoTime() + spec.timeoutNs();
        idle.reset();
        while (true) {
            boolean free = true;
            for (int s = 0; s < servers; s++) {
                free &= applied(pullOffset[s], worker) >= steps;
            }
            if (free) {
                return;
            }
            if (System.nanoTime() - deadlineNs > 0) {
                throw fail("the servers did not apply this worker's gradient #" + steps + " within "
                    + spec.timeout().toMillis() + " ms");
            }
            idle.idle(0);
            readHeaders(headers, pullOffset);
        }
    }

    private void await(TransferBatch batch, String what) {
        if (batch.await() && batch.succeeded()) {
            return;
        }
        for (int t = 0; t < batch.size(); t++) {
            String why = batch.error(t);
            if (why != null) {
                int s = serverOf(batch, t);
                throw fail("server " + s + " (rank " + s + ") failed while " + what + ": " + why);
            }
        }
        throw fail("a server failed while " + what + ": " + (batch.notificationError() != null
            ? batch.notificationError() : batch.toString()));
    }

    private int serverOf(TransferBatch batch, int transfer) {
        if (batch == headers || batch == reads || batch == checks) {
            return transfer;
        }
        for (int s = 0; s < servers; s++) {
            if (pushes[s] == batch) {
                return s;
            }
        }
        return -1;
    }

    private ParameterServerException fail(String message) {
        failed = true;
        return new ParameterServerException("worker " + worker + " (step " + steps + "): " + message);
    }

    private void checkUsable() {
        if (closed) {
            throw new IllegalStateException("worker is closed");
        }
        if (failed) {
            throw new ParameterServerException("worker " + worker + ": an earlier call failed (a server is gone)");
        }
    }

    /**
     * Waits until every server applied this worker's gradients, says goodbye to each (a server's
     * {@link ParameterServer#serve()} returns once every worker did), and unregisters this worker's memory. After a
     * failure it only releases the memory.
     *
     * @throws ParameterServerException when a server died meanwhile
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        try {
            if (!failed) {
                long deadlineNs = System.nanoTime() + spec.timeoutNs();
                idle.reset();
                while (true) {
                    readHeaders(headers, pullOffset);
                    boolean all = true;
                    for (int s = 0; s < servers; s++) {
                        all &= applied(pullOffset[s], worker) >= steps;
                    }
                    if (all) {
                        break;
                    }
                    if (System.nanoTime() - deadlineNs > 0) {
                        throw fail("the servers did not apply this worker's last gradients within "
                            + spec.timeout().toMillis() + " ms");
                    }
                    idle.idle(0);
                }
                // The goodbye rides on a 4-byte WRITE into this worker's own slot (a notification needs a transfer):
                // the slot's gradient was applied, nobody reads it any more.
                for (int s = 0; s < servers; s++) {
                    pushes[s].clear();
                    pushes[s].write(pushSegment, 0, gradients[s], (long) worker * spec.shardLength(s) * Float.BYTES,
                        Float.BYTES);
                    pushes[s].notifyImmediate(ParameterServer.BYE).submit();
                }
                for (int s = 0; s < servers; s++) {
                    await(pushes[s], "saying goodbye");
                }
            }
        } finally {
            closed = true;
            headers.close();
            reads.close();
            checks.close();
            for (TransferBatch b : pushes) {
                b.close();
            }
            pullSegment.close();
            pushSegment.close();
        }
    }
}
