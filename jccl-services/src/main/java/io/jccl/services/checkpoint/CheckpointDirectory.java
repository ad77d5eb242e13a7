package io.jccl.services.checkpoint;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.zip.CRC32C;

/**
 * The on-disk format of checkpoints, and the only code that writes or reads it:
 *
 * <pre>
 * ROOT/step-0000000000000012/shard-00000-of-00004.bin …   shard files, fsynced, then the directory fsynced
 * ROOT/step-0000000000000012/MANIFEST                     written as MANIFEST.tmp, fsynced, renamed, dir fsynced
 * ROOT/latest                                             "step-0000000000000012": latest.tmp, fsync, rename, fsync
 * </pre>
 *
 * A checkpoint counts only once its MANIFEST exists (the rename is the commit point: every shard file was durable
 * before it), and {@code latest} moves only after that, so a crash at any moment leaves the previous checkpoint
 * loadable and the partial one, a step directory without MANIFEST, ignored (and removed by
 * {@link #removePartial()}). Older checkpoints are deleted only after the new one is durable.
 */
public final class CheckpointDirectory {
    /** Name of the manifest in a step's directory. */
    public static final String MANIFEST = "MANIFEST";
    /** Name of the file that names the newest durable checkpoint. */
    public static final String LATEST = "latest";
    private static final int CHUNK_BYTES = 4 << 20;

    private final Path root;

    /** The checkpoints under {@code root} (created when missing). */
    public CheckpointDirectory(Path root) {
        this.root = root.toAbsolutePath();
        try {
            Files.createDirectories(this.root);
        } catch (IOException e) {
            throw new CheckpointException("cannot create checkpoint directory " + this.root + ": " + e, e);
        }
    }

    /** The root directory. */
    public Path root() {
        return root;
    }

    /** The directory of step {@code step}'s checkpoint. */
    public Path stepDirectory(long step) {
        return root.resolve(String.format("step-%016d", step));
    }

    /** The steps that have a complete checkpoint (a readable MANIFEST), ascending. */
    public List<Long> steps() {
        List<Long> steps = new ArrayList<>();
        for (long step : stepDirectories()) {
            if (Files.isRegularFile(stepDirectory(step).resolve(MANIFEST))) {
                steps.add(step);
            }
        }
        return steps;
    }

    /**
     * The newest durable checkpoint: the one {@code latest} names, or when that file is missing (a crash between the
     * manifest's rename and latest's) the newest step with a valid manifest; empty when there is none. Partial
     * checkpoints (no MANIFEST) are never returned.
     *
     * @throws CheckpointException when the manifest {@code latest} names is unreadable or corrupt (naming the file)
     */
    public Optional<CheckpointManifest> latest() {
        Path latest = root.resolve(LATEST);
        if (Files.exists(latest)) {
            try {
                String name = Files.readString(latest, StandardCharsets.UTF_8).trim();
                if (!name.matches("step-[0-9]{16}")) {
                    throw new CheckpointException("checkpoint pointer " + latest + " holds '" + name + "'");
                }
                long fromLatest = Long.parseLong(name.substring(5));
                List<Long> steps = steps();
                // A newer manifest than latest names is durable too (crash before latest moved).
                long newest = steps.isEmpty() ? fromLatest : Math.max(fromLatest, steps.getLast());
                return Optional.of(manifest(newest));
            } catch (IOException e) {
                throw new CheckpointException("cannot read checkpoint pointer " + latest + ": " + e, e);
            }
        }
        List<Long> steps = steps();
        return steps.isEmpty() ? Optional.empty() : Optional.of(manifest(steps.getLast()));
    }

    /**
     * The manifest of step {@code step}.
     *
     * @throws CheckpointException naming the file when it is missing, unreadable or corrupt
     */
    public CheckpointManifest manifest(long step) {
        Path file = stepDirectory(step).resolve(MANIFEST);
        try {
            CheckpointManifest m = CheckpointManifest.decode(Files.readAllBytes(file));
            if (m.step() != step) {
                throw new IllegalArgumentException("it names step " + m.step());
            }
            return m;
        } catch (NoSuchFileException e) {
            throw new CheckpointException("checkpoint step " + step + " has no manifest " + file
                + " (never completed)", e);
        } catch (IOException | RuntimeException e) {
            throw new CheckpointException("checkpoint manifest " + file + " is corrupt: " + e.getMessage(), e);
        }
    }

    /**
     * Reads bytes [{@code offset}, offset + {@code length}) of {@code manifest}'s flat state into {@code dst}. Every
     * shard file the range touches is read whole and its CRC32C checked against the manifest, so a corrupt or
     * truncated file is detected even when only part of it is wanted.
     *
     * @throws CheckpointException naming the file when a shard file is missing, of the wrong size or corrupt
     */
    public void read(CheckpointManifest manifest, long offset, MemorySegment dst, long length) {
        ShardLayout layout = manifest.layout();
        if (offset < 0 || length < 0 || offset + length > layout.totalBytes() || length > dst.byteSize()) {
            throw new IllegalArgumentException("range [" + offset + ", " + (offset + length) + ") outside the "
                + layout.totalBytes() + " B of " + manifest + " or the " + dst.byteSize() + " B destination");
        }
        ByteBuffer chunk = ByteBuffer.allocateDirect((int) Math.min(CHUNK_BYTES, Math.max(1, layout.totalBytes())));
        MemorySegment chunkSegment = MemorySegment.ofBuffer(chunk);
        for (int r = 0; r < layout.shards(); r++) {
            long start = layout.offset(r);
            long shardLength = layout.length(r);
            if (start + shardLength <= offset || start >= offset + length || shardLength == 0) {
                continue;
            }
            Path file = stepDirectory(manifest.step()).resolve(manifest.file(r));
            CRC32C crc = new CRC32C();
            try (FileChannel ch = FileChannel.open(file, StandardOpenOption.READ)) {
                if (ch.size() != shardLength) {
                    throw new CheckpointException("checkpoint step " + manifest.step() + ": shard file " + file
                        + " is corrupt: " + ch.size() + " B, the manifest says " + shardLength + " B");
                }
                long pos = 0;
                while (pos < shardLength) {
                    chunk.clear().limit((int) Math.min(chunk.capacity(), shardLength - pos));
                    while (chunk.hasRemaining()) {
                        if (ch.read(chunk, pos + chunk.position()) < 0) {
                            throw new CheckpointException("checkpoint step " + manifest.step() + ": shard file "
                                + file + " ended early at " + (pos + chunk.position()) + " B");
                        }
                    }
                    int n = chunk.limit();
                    chunk.flip();
                    crc.update(chunk);
                    // The part of this chunk inside the wanted range.
                    long from = Math.max(start + pos, offset);
                    long to = Math.min(start + pos + n, offset + length);
                    if (from < to) {
                        MemorySegment.copy(chunkSegment, from - start - pos, dst, from - offset, to - from);
                    }
                    pos += n;
                }
            } catch (NoSuchFileException e) {
                throw new CheckpointException("checkpoint step " + manifest.step() + ": shard file " + file
                    + " is missing", e);
            } catch (IOException e) {
                throw new CheckpointException("checkpoint step " + manifest.step() + ": cannot read shard file "
                    + file + ": " + e, e);
            }
            if ((int) crc.getValue() != manifest.crc(r)) {
                throw new CheckpointException(String.format("checkpoint step %d: shard file %s is corrupt: CRC32C "
                    + "%08x, the manifest says %08x", manifest.step(), file, (int) crc.getValue(), manifest.crc(r)));
            }
        }
    }

    /**
     * Writes a checkpoint durably and publishes it: every shard file written from {@code state} and fsynced, the
     * step directory fsynced, the manifest written to a temporary file, fsynced and renamed, the directory fsynced,
     * then {@code latest} replaced the same way. On failure the step's directory is removed and the exception
     * thrown: {@code latest} still names the previous checkpoint.
     *
     * @param bytesPerSecond most bytes per second written (0: no limit), to leave the disk to training I/O
     */
    CheckpointManifest persist(long step, ShardLayout layout, MemorySegment state, int[] crcs, long bytesPerSecond)
        throws IOException {
        Path dir = stepDirectory(step);
        try {
            deleteTree(dir); // a partial directory of an earlier attempt
            Files.createDirectories(dir);
            String[] files = new String[layout.shards()];
            long startNs = System.nanoTime();
            long written = 0;
            // Each chunk is copied out of the state, checksummed and written from the copy: the file then holds
            // exactly the bytes its CRC32C describes, even if the state changed meanwhile (a rank staging without
            // waiting for the release), and such a change fails the persist instead of publishing a bad checkpoint.
            ByteBuffer chunk = ByteBuffer.allocateDirect((int) Math.min(CHUNK_BYTES, Math.max(1,
                layout.totalBytes())));
            MemorySegment chunkSegment = MemorySegment.ofBuffer(chunk);
            CRC32C crc = new CRC32C();
            for (int r = 0; r < layout.shards(); r++) {
                files[r] = String.format("shard-%05d-of-%05d.bin", r, layout.shards());
                MemorySegment shard = state.asSlice(layout.offset(r), layout.length(r));
                crc.reset();
                try (FileChannel ch = FileChannel.open(dir.resolve(files[r]), StandardOpenOption.CREATE_NEW,
                    StandardOpenOption.WRITE)) {
                    long pos = 0;
                    while (pos < shard.byteSize()) {
                        int n = (int) Math.min(chunk.capacity(), shard.byteSize() - pos);
                        MemorySegment.copy(shard, pos, chunkSegment, 0, n);
                        chunk.clear().limit(n);
                        crc.update(chunk);
                        chunk.flip();
                        while (chunk.hasRemaining()) {
                            ch.write(chunk, pos + chunk.position());
                        }
                        pos += n;
                        written += n;
                        throttle(startNs, written, bytesPerSecond);
                    }
                    ch.force(true);
                }
                if ((int) crc.getValue() != crcs[r]) {
                    throw new CheckpointException(String.format("checkpoint step %d: shard %d changed in staging while "
                        + "it was persisted (CRC32C %08x written, %08x verified with the rank): not published", step,
                        r, (int) crc.getValue(), crcs[r]));
                }
            }
            forceDirectory(dir);
            CheckpointManifest manifest = new CheckpointManifest(step, layout, crcs, files);
            replaceDurably(dir.resolve(MANIFEST), manifest.encode());
            replaceDurably(root.resolve(LATEST),
                (dir.getFileName() + "\n").getBytes(StandardCharsets.UTF_8));
            return manifest;
        } catch (IOException | RuntimeException e) {
            try {
                deleteTree(dir);
                forceDirectory(root);
            } catch (IOException | RuntimeException suppressed) {
                e.addSuppressed(suppressed);
            }
            throw e;
        }
    }

    private static void throttle(long startNs, long written, long bytesPerSecond) throws IOException {
        if (bytesPerSecond <= 0) {
            return;
        }
        long dueNs = startNs + (long) (written * 1e9 / bytesPerSecond);
        long waitNs;
        while ((waitNs = dueNs - System.nanoTime()) > 0) {
            try {
                Thread.sleep(waitNs / 1_000_000, (int) (waitNs % 1_000_000));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IOException("interrupted while persisting", e);
            }
        }
    }

    /** Writes {@code file} as file.tmp, fsyncs it, renames it over {@code file} atomically, fsyncs the directory. */
    static void replaceDurably(Path file, byte[] contents) throws IOException {
        Path tmp = file.resolveSibling(file.getFileName() + ".tmp");
        try (FileChannel ch = FileChannel.open(tmp, StandardOpenOption.CREATE, StandardOpenOption.WRITE,
            StandardOpenOption.TRUNCATE_EXISTING)) {
            ByteBuffer b = ByteBuffer.wrap(contents);
            while (b.hasRemaining()) {
                ch.write(b);
            }
            ch.force(true);
        }
        try {
            Files.move(tmp, file, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
        } catch (AtomicMoveNotSupportedException e) {
            throw new IOException("the file system of " + file + " cannot rename atomically", e);
        }
        forceDirectory(file.getParent());
    }

    /** fsync of a directory: makes the names in it (new files, renames, deletions) durable. */
    static void forceDirectory(Path dir) throws IOException {
        try (FileChannel ch = FileChannel.open(dir, StandardOpenOption.READ)) {
            ch.force(true);
        }
    }

    /**
     * Deletes the checkpoints older than the newest {@code keep} complete ones, and partial ones older than the
     * newest complete one; called only after a new checkpoint is durable.
     *
     * @return the steps deleted
     */
    List<Long> prune(int keep) throws IOException {
        List<Long> complete = steps();
        List<Long> deleted = new ArrayList<>();
        if (complete.isEmpty()) {
            return deleted;
        }
        long newest = complete.getLast();
        long oldestKept = complete.get(Math.max(0, complete.size() - keep));
        for (long step : stepDirectories()) {
            if (step < oldestKept || (step < newest && !complete.contains(step))) {
                deleteTree(stepDirectory(step));
                deleted.add(step);
            }
        }
        if (!deleted.isEmpty()) {
            forceDirectory(root);
        }
        return deleted;
    }

    /**
     * Removes step directories without a MANIFEST (left by a crash mid-persist) and stray temporary files.
     *
     * @return the steps removed
     */
    public List<Long> removePartial() {
        List<Long> removed = new ArrayList<>();
        try {
            for (long step : stepDirectories()) {
                if (!Files.isRegularFile(stepDirectory(step).resolve(MANIFEST))) {
                    deleteTree(stepDirectory(step));
                    removed.add(step);
                }
            }
            Files.deleteIfExists(root.resolve(LATEST + ".tmp"));
            forceDirectory(root);
        } catch (IOException e) {
            throw new CheckpointException("cannot clean checkpoint directory " + root + ": " + e, e);
        }
        return removed;
    }

    private List<Long> stepDirectories() {
        List<Long> steps = new ArrayList<>();
        try (DirectoryStream<Path> ds = Files.newDirectoryStream(root, "step-*")) {
            for (Path p : ds) {
                String n = p.getFileName().toString();
                if (n.matches("step-[0-9]{16}") && Files.isDirectory(p)) {
                    steps.add(Long.parseLong(n.substring(5)));
                }
            }
        } catch (IOException e) {
            throw new CheckpointException("cannot list checkpoint directory " + root + ": " + e, e);
        }
        steps.sort(null);
        return steps;
    }

    private static void deleteTree(Path dir) throws IOException {
        if (!Files.exists(dir)) {
            return;
        }
        try (DirectoryStream<Path> ds = Files.newDirectoryStream(dir)) {
            for (Path p : ds) {
                Files.deleteIfExists(p);
            }
        }
        Files.deleteIfExists(dir);
    }
}
