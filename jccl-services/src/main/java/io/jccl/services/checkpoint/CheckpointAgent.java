package io.jccl.services.checkpoint;

import io.jccl.common.Log;
import io.jccl.services.transfer.LocalSegment;
import io.jccl.services.transfer.Notification;
import io.jccl.services.transfer.TransferEngine;

import java.lang.foreign.MemorySegment;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.zip.CRC32C;

/**
 * The checkpoint agent: a process (a rank of the job's transfer engine) that owns staging memory for a whole
 * checkpoint, verifies what training ranks WRITE into it, and persists it in the background so that training stalls
 * only for the copy into staging, never for the disk.
 *
 * <p>Protocol (the ranks' side is {@link CheckpointClient}): a rank WRITEs its shard into segment
 * {@code ckpt/NAME/staging} at the shard's offset in the flat state ({@link ShardLayout}) with a notification "STAGE
 * step shard layout"; the agent computes the shard's CRC32C and writes it into the rank's reply slot of segment
 * {@code ckpt/NAME/control}, which the rank READs and compares with its own. Once every shard of a step has arrived,
 * the agent persists it ({@link CheckpointDirectory}: shard files fsynced, manifest renamed atomically, then
 * {@code latest}), deletes checkpoints beyond the newest {@code keep}, and marks staging released and the step
 * durable in the control header. Until then staging holds the step, so a rank's next checkpoint waits for the
 * release (back-pressure when checkpoints come faster than the disk takes them). A failed persist (a full disk)
 * removes the partial directory, leaves {@code latest} on the previous checkpoint and publishes the error.
 *
 * <p>Restore: a rank asks for the newest durable checkpoint; if staging does not hold it (the agent restarted, or a
 * newer step was staged since), the agent loads it from disk into staging, checking every shard file's CRC32C, then
 * answers with the CRC32C of the rank's range, which the rank READs and checks. The rank's layout may have another
 * shard count than the checkpoint's: shards are byte ranges of one flat state.
 *
 * <p>The agent consumes its engine's notifications: run it on an engine of its own (its own rank of the job).
 */
public final class CheckpointAgent implements AutoCloseable {
    private final Log log = Log.get();
    private final TransferEngine engine;
    private final CheckpointSettings settings;
    private final CheckpointDirectory directory;
    private final LocalSegment staging;
    private final LocalSegment control;
    /** A shard's CRC32C is cut in pieces of at least this many bytes, computed in parallel and combined. */
    private static final long PIECE_BYTES = 8 << 20;
    /** CRC32C of staged shards, several pieces at a time. */
    private final ExecutorService digests;
    private final int digestThreads;
    /** Persisting and loading from disk, one at a time. */
    private final ExecutorService disk;
    private final Thread listener;
    private volatile boolean closed;

    // Guarded by this.
    private long released = -1;
    private long held = -1;
    private long durable = -1;
    private long failed = -1;
    private String error = "";
    private String busy;
    private long collecting = -1;
    private ShardLayout collectingLayout;
    private boolean[] arrived;
    private int[] crcs;
    private int arrivedCount;

    private CheckpointAgent(TransferEngine engine, CheckpointSettings settings) {
        this.engine = engine;
        this.settings = settings;
        this.directory = new CheckpointDirectory(settings.directory());
        List<Long> partial = directory.removePartial();
        if (!partial.isEmpty()) {
            log.warn(engine.rank(), Log.Subsys.INIT, "checkpoint agent: removed partial checkpoints (no manifest) of"
                + " steps " + partial + " in " + directory.root());
        }
        List<Long> steps = directory.steps();
        durable = steps.isEmpty() ? -1 : steps.getLast();
        staging = engine.registerSegment(CheckpointSettings.stagingSegment(settings.name()), settings.stagingBytes());
        try {
            control = engine.registerSegment(CheckpointSettings.controlSegment(settings.name()),
                ControlBlock.length(settings.maxShards()));
        } catch (RuntimeException e) {
            staging.close();
            throw e;
        }
        writeHeader();
        digestThreads = Math.clamp(Runtime.getRuntime().availableProcessors(), 1, 4);
        digests = Executors.newFixedThreadPool(digestThreads,
            Thread.ofPlatform().daemon().name("jccl-ckpt-digest-", 0).factory());
        disk = Executors.newSingleThreadExecutor(Thread.ofPlatform().daemon().name("jccl-ckpt-persist").factory());
        listener = Thread.ofPlatform().daemon().name("jccl-ckpt-agent").unstarted(this::listen);
        listener.start();
        log.info(engine.rank(), Log.Subsys.INIT, () -> "checkpoint agent '" + settings.name() + "': "
            + settings.stagingBytes() + " B of staging, " + directory.root() + ", newest durable step "
            + durableStep() + ", keeping " + settings.keep());
    }

    /**
     * Starts an agent on {@code engine}: registers its staging and control segments (so ranks can open them),
     * removes partial checkpoints a crash left in the directory, and answers ranks until closed.
     *
     * @throws io.jccl.services.transfer.TransferException when another agent of this name runs in the job
     */
    public static CheckpointAgent start(TransferEngine engine, CheckpointSettings settings) {
        return new CheckpointAgent(engine, settings);
    }

    /** The settings. */
    public CheckpointSettings settings() {
        return settings;
    }

    /** The directory checkpoints are persisted to. */
    public CheckpointDirectory directory() {
        return directory;
    }

    /** The newest step whose checkpoint is durable and published, or -1. */
    public synchronized long durableStep() {
        return durable;
    }

    /** The step whose complete checkpoint staging holds (servable by READ), or -1. */
    public synchronized long heldStep() {
        return held;
    }

    // ------------------------------------------------------------------------------------------ requests

    private void listen() {
        while (!closed) {
            Notification n;
            try {
                n = engine.pollNotification(100, TimeUnit.MILLISECONDS);
            } catch (InterruptedException e) {
                return;
            }
            if (n == null) {
                continue;
            }
            ControlBlock.Request request;
            try {
                request = ControlBlock.parse(n.message());
            } catch (IllegalArgumentException e) {
                log.warn(engine.rank(), Log.Subsys.NET, "checkpoint agent: ignored a notification from rank "
                    + n.fromRank() + ": " + e.getMessage());
                continue;
            }
            if (request.shard() < 0 || request.shard() >= settings.maxShards()) {
                log.warn(engine.rank(), Log.Subsys.NET, "checkpoint agent: rank " + n.fromRank() + " names shard "
                    + request.shard() + ", outside 0.." + (settings.maxShards() - 1) + " (JCCL_CHECKPOINT_MAX_SHARDS)");
                continue;
            }
            try {
                if (request.kind() == ControlBlock.STAGE) {
                    onStage(request);
                } else {
                    disk.execute(() -> onRestore(request));
                }
            } catch (RuntimeException e) {
                // The agent keeps serving; the rank gets the reason instead of waiting for its deadline.
                log.warn(engine.rank(), Log.Subsys.NET, "checkpoint agent: request of rank " + n.fromRank()
                    + " failed: " + e);
                reply(request, ControlBlock.ERROR, request.step(), 0, 0, "the agent failed on the request: " + e);
            }
        }
    }

    private void onStage(ControlBlock.Request r) {
        ShardLayout layout = r.layout();
        synchronized (this) {
            String refusal = null;
            if (layout.totalBytes() > staging.length()) {
                refusal = "checkpoint of " + layout.totalBytes() + " B exceeds the agent's staging memory of "
                    + staging.length() + " B (JCCL_CHECKPOINT_STAGING_BYTES)";
            } else if (r.shard() >= layout.shards()) {
                refusal = "shard " + r.shard() + " outside the layout's " + layout.shards() + " shards";
            } else if (busy != null) {
                refusal = "staging is busy " + busy + " (stage the next step after the previous one was released)";
            } else if (r.step() <= durable || r.step() <= failed) {
                refusal = "step " + r.step() + " is not newer than the " + (r.step() <= durable ? "durable step "
                    + durable : "failed step " + failed);
            } else if (collecting >= 0 && r.step() < collecting) {
                refusal = "step " + r.step() + " is older than step " + collecting + ", being staged";
            } else if (collecting == r.step() && !layout.equals(collectingLayout)) {
                refusal = "shard " + r.shard() + " has layout " + layout + " but step " + collecting
                    + " started with " + collectingLayout;
            }
            if (refusal != null) {
                reply(r, ControlBlock.ERROR, 0, 0, "step " + r.step() + ", shard " + r.shard() + ": " + refusal);
                return;
            }
            if (collecting != r.step()) {
                if (collecting >= 0) {
                    long abandoned = collecting;
                    int missing = arrived.length - arrivedCount;
                    log.warn(engine.rank(), Log.Subsys.NET, "checkpoint agent: step " + abandoned + " abandoned with "
                        + missing + " shard(s) missing: step " + r.step() + " started");
                }
                collecting = r.step();
                collectingLayout = layout;
                arrived = new boolean[layout.shards()];
                crcs = new int[layout.shards()];
                arrivedCount = 0;
                held = -1; // ranks are overwriting staging
                writeHeader();
            }
        }
        // The shard's CRC32C in pieces on the digest threads, combined: the rank waits for it.
        long offset = layout.offset(r.shard());
        long length = layout.length(r.shard());
        int pieces = (int) Math.clamp(length / PIECE_BYTES, 1, digestThreads);
        @SuppressWarnings("unchecked")
        CompletableFuture<Integer>[] parts = new CompletableFuture[pieces];
        for (int p = 0; p < pieces; p++) {
            long from = offset + length * p / pieces;
            long to = offset + length * (p + 1) / pieces;
            parts[p] = CompletableFuture.supplyAsync(() -> crc32c(staging.memory(), from, to - from), digests);
        }
        CompletableFuture.allOf(parts).whenComplete((ignored, failure) -> {
            if (failure != null) {
                reply(r, ControlBlock.ERROR, 0, 0, "step " + r.step() + ", shard " + r.shard() + ": " + failure);
                return;
            }
            int crc = parts[0].join();
            for (int p = 1; p < pieces; p++) {
                crc = Crc32c.combine(crc, parts[p].join(), length * (p + 1) / pieces - length * p / pieces);
            }
            onDigest(r, layout, crc);
        });
    }

    private void onDigest(ControlBlock.Request r, ShardLayout layout, int crc) {
        synchronized (this) {
            if (collecting != r.step()) {
                reply(r, ControlBlock.ERROR, 0, 0, "step " + r.step() + " was superseded by step " + collecting);
                return;
            }
            if (crc != r.crc()) {
                // What landed is not what the rank has: this step is never persisted (nor published).
                String why = String.format("step %d, shard %d: the agent's CRC32C %08x of the staged shard differs "
                    + "from the rank's %08x: step %d is not persisted", r.step(), r.shard(), crc, r.crc(), r.step());
                reply(r, ControlBlock.ERROR, r.step(), crc, layout.length(r.shard()), why);
                failed = r.step();
                released = r.step();
                error = why;
                collecting = -1;
                writeHeader();
                log.warn(engine.rank(), Log.Subsys.NET, "checkpoint agent: " + why);
                return;
            }
            reply(r, ControlBlock.OK, r.step(), crc, layout.length(r.shard()), "");
            if (!arrived[r.shard()]) {
                arrived[r.shard()] = true;
                arrivedCount++;
            }
            crcs[r.shard()] = crc;
            if (arrivedCount == arrived.length) {
                long step = collecting;
                int[] all = crcs.clone();
                collecting = -1;
                held = step;
                busy = "persisting step " + step;
                writeHeader();
                disk.execute(() -> persist(step, layout, all));
            }
        }
    }

    private void persist(long step, ShardLayout layout, int[] shardCrcs) {
        long startNs = System.nanoTime();
        try {
            directory.persist(step, layout, staging.memory(), shardCrcs, settings.persistBytesPerSecond());
            List<Long> deleted = directory.prune(settings.keep());
            synchronized (this) {
                durable = step;
                released = step;
                busy = null;
                writeHeader();
            }
            log.info(engine.rank(), Log.Subsys.NET, () -> "checkpoint agent: step " + step + " durable ("
                + layout.totalBytes() + " B in " + (System.nanoTime() - startNs) / 1_000_000 + " ms)"
                + (deleted.isEmpty() ? "" : ", deleted steps " + deleted));
        } catch (Exception e) {
            synchronized (this) {
                failed = step;
                released = step;
                held = -1;
                busy = null;
                error = "checkpoint step " + step + " was not persisted to " + directory.root() + " ("
                    + (durable < 0 ? "no earlier checkpoint" : "the previous checkpoint, step " + durable + ", stays")
                    + "): " + e;
                writeHeader();
                log.warn(engine.rank(), Log.Subsys.NET, "checkpoint agent: " + error);
            }
        }
    }

    private void onRestore(ControlBlock.Request r) {
        ShardLayout layout = r.layout();
        String what = "restore of shard " + r.shard() + " of " + layout.shards() + ": ";
        if (r.shard() >= layout.shards()) {
            reply(r, ControlBlock.ERROR, 0, 0, what + "shard outside the layout");
            return;
        }
        try {
            Optional<CheckpointManifest> latest = directory.latest();
            if (latest.isEmpty()) {
                // Nothing to serve: staging is not touched, so this answer holds whatever is being staged.
                reply(r, ControlBlock.NONE, -1, 0, 0, "no durable checkpoint in " + directory.root());
                return;
            }
            CheckpointManifest m = latest.get();
            ShardLayout saved = m.layout();
            if (saved.totalBytes() != layout.totalBytes() || saved.elementBytes() != layout.elementBytes()) {
                reply(r, ControlBlock.ERROR, 0, 0, what + "checkpoint step " + m.step() + " holds "
                    + saved.totalBytes() + " B of " + saved.elementBytes() + "-byte elements, the rank's layout "
                    + layout.totalBytes() + " B of " + layout.elementBytes() + "-byte elements");
                return;
            }
            if (saved.totalBytes() > staging.length()) {
                reply(r, ControlBlock.ERROR, 0, 0, what + "checkpoint step " + m.step() + " of " + saved.totalBytes()
                    + " B exceeds the agent's staging memory of " + staging.length() + " B");
                return;
            }
            boolean load;
            synchronized (this) {
                if (busy != null || collecting >= 0) {
                    reply(r, ControlBlock.ERROR, 0, 0, what + "the agent is staging step "
                        + (collecting >= 0 ? collecting : held) + ": every rank must restore before any rank stages"
                        + " its next checkpoint");
                    return;
                }
                load = held != m.step();
                if (load) {
                    held = -1;
                    busy = "loading step " + m.step();
                    writeHeader();
                }
            }
            if (load) {
                long startNs = System.nanoTime();
                try {
                    directory.read(m, 0, staging.memory(), saved.totalBytes());
                } finally {
                    synchronized (this) {
                        busy = null;
                        writeHeader();
                    }
                }
                synchronized (this) {
                    held = m.step();
                    writeHeader();
                }
                log.info(engine.rank(), Log.Subsys.NET, () -> "checkpoint agent: loaded step " + m.step() + " ("
                    + saved.totalBytes() + " B) from disk in " + (System.nanoTime() - startNs) / 1_000_000 + " ms");
            }
            long offset = layout.offset(r.shard());
            long length = layout.length(r.shard());
            reply(r, ControlBlock.OK, m.step(), crc32c(staging.memory(), offset, length), length, "");
        } catch (RuntimeException e) {
            reply(r, ControlBlock.ERROR, 0, 0, what + e.getMessage());
        }
    }

    private void reply(ControlBlock.Request r, int status, int crc, long length, String text) {
        reply(r, status, r.step(), crc, length, text);
    }

    private void reply(ControlBlock.Request r, int status, long step, int crc, long length, String text) {
        byte[] slot = ControlBlock.slot(r.request(), step, crc, length, status, text);
        MemorySegment.copy(MemorySegment.ofArray(slot), 0, control.memory(), ControlBlock.slotOffset(r.shard()),
            slot.length);
        if (status == ControlBlock.ERROR) {
            log.info(engine.rank(), Log.Subsys.NET, () -> "checkpoint agent: refused: " + text);
        }
    }

    /** Publishes the state in the control header; the caller holds the lock. */
    private void writeHeader() {
        byte[] h = ControlBlock.header(released, held, durable, failed, error);
        MemorySegment.copy(MemorySegment.ofArray(h), 0, control.memory(), 0, h.length);
    }

    /** CRC32C of {@code length} bytes at {@code offset}, in pieces (a ByteBuffer view holds at most 2 GiB). */
    static int crc32c(MemorySegment memory, long offset, long length) {
        CRC32C crc = new CRC32C();
        for (long pos = 0; pos < length; pos += 1 << 30) {
            crc.update(memory.asSlice(offset + pos, Math.min(1 << 30, length - pos)).asByteBuffer());
        }
        return (int) crc.getValue();
    }

    /**
     * Stops answering, waits for a persist in progress to finish (its checkpoint then is durable or removed), and
     * unregisters the segments (ranks' later requests fail). The engine stays the caller's.
     */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        listener.interrupt();
        try {
            listener.join();
            digests.shutdown();
            digests.awaitTermination(1, TimeUnit.MINUTES);
            disk.shutdown();
            if (!disk.awaitTermination(10, TimeUnit.MINUTES)) {
                log.warn(engine.rank(), Log.Subsys.NET, "checkpoint agent: a persist still runs after 10 minutes");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        control.close();
        staging.close();
    }
}
