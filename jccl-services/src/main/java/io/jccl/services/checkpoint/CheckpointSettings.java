package io.jccl.services.checkpoint;

import io.jccl.common.Config;

import java.nio.file.Path;

/**
 * A checkpoint agent's settings.
 *
 * @param name the checkpoint set's name: the agent's segments are {@code ckpt/NAME/staging} and
 *     {@code ckpt/NAME/control}, and clients open them by it (JCCL_CHECKPOINT_NAME, default "default")
 * @param directory where checkpoints are persisted (JCCL_CHECKPOINT_DIR, default ./checkpoints)
 * @param stagingBytes bytes of staging memory: the largest state a checkpoint may hold
 *     (JCCL_CHECKPOINT_STAGING_BYTES, default 256 MiB)
 * @param keep how many of the newest durable checkpoints to keep (JCCL_CHECKPOINT_KEEP, default 2, at least 1)
 * @param maxShards most shards (training ranks) one checkpoint may have: one reply slot each
 *     (JCCL_CHECKPOINT_MAX_SHARDS, default 1024)
 * @param persistBytesPerSecond most bytes per second the agent writes to disk, 0 for no limit
 *     (JCCL_CHECKPOINT_PERSIST_BYTES_PER_SEC, default 0), to leave disk bandwidth to training's own I/O
 */
public record CheckpointSettings(String name, Path directory, long stagingBytes, int keep, int maxShards,
                                 long persistBytesPerSecond) {
    /** Default staging memory: 256 MiB. */
    public static final long STAGING_BYTES_DEFAULT = 256L << 20;
    /** Default number of checkpoints kept. */
    public static final int KEEP_DEFAULT = 2;
    /** Default number of reply slots. */
    public static final int MAX_SHARDS_DEFAULT = 1024;

    /** Checks the ranges. */
    public CheckpointSettings {
        if (name == null || !name.matches("[A-Za-z0-9._-]{1,64}")) {
            throw new IllegalArgumentException("checkpoint name '" + name + "': 1 to 64 of A-Z a-z 0-9 . _ -");
        }
        if (stagingBytes < 1) {
            throw new IllegalArgumentException("JCCL_CHECKPOINT_STAGING_BYTES " + stagingBytes + " must be positive");
        }
        if (keep < 1) {
            throw new IllegalArgumentException("JCCL_CHECKPOINT_KEEP " + keep + " must be at least 1");
        }
        if (maxShards < 1 || maxShards > ShardLayout.MAX_SHARDS) {
            throw new IllegalArgumentException("JCCL_CHECKPOINT_MAX_SHARDS " + maxShards + " outside 1.."
                + ShardLayout.MAX_SHARDS);
        }
        if (persistBytesPerSecond < 0) {
            throw new IllegalArgumentException("JCCL_CHECKPOINT_PERSIST_BYTES_PER_SEC " + persistBytesPerSecond
                + " must be 0 (no limit) or positive");
        }
        directory = directory.toAbsolutePath();
    }

    /** The defaults, persisting to {@code directory}. */
    public static CheckpointSettings defaults(Path directory) {
        return new CheckpointSettings("default", directory, STAGING_BYTES_DEFAULT, KEEP_DEFAULT, MAX_SHARDS_DEFAULT,
            0);
    }

    /** The defaults overridden by the JCCL_CHECKPOINT_* variables. */
    public static CheckpointSettings fromEnvironment() {
        return new CheckpointSettings(Config.value("JCCL_CHECKPOINT_NAME", "default"),
            Path.of(Config.value("JCCL_CHECKPOINT_DIR", "checkpoints")),
            Config.longValue("JCCL_CHECKPOINT_STAGING_BYTES", STAGING_BYTES_DEFAULT),
            (int) Config.longValue("JCCL_CHECKPOINT_KEEP", KEEP_DEFAULT),
            (int) Config.longValue("JCCL_CHECKPOINT_MAX_SHARDS", MAX_SHARDS_DEFAULT),
            Config.longValue("JCCL_CHECKPOINT_PERSIST_BYTES_PER_SEC", 0));
    }

    /** These settings under another name. */
    public CheckpointSettings withName(String n) {
        return new CheckpointSettings(n, directory, stagingBytes, keep, maxShards, persistBytesPerSecond);
    }

    /** These settings with {@code bytes} of staging memory. */
    public CheckpointSettings withStagingBytes(long bytes) {
        return new CheckpointSettings(name, directory, bytes, keep, maxShards, persistBytesPerSecond);
    }

    /** These settings keeping {@code n} checkpoints. */
    public CheckpointSettings withKeep(int n) {
        return new CheckpointSettings(name, directory, stagingBytes, n, maxShards, persistBytesPerSecond);
    }

    /** These settings with {@code n} reply slots. */
    public CheckpointSettings withMaxShards(int n) {
        return new CheckpointSettings(name, directory, stagingBytes, keep, n, persistBytesPerSecond);
    }

    /** These settings writing at most {@code bytesPerSecond} (0: no limit). */
    public CheckpointSettings withPersistBytesPerSecond(long bytesPerSecond) {
        return new CheckpointSettings(name, directory, stagingBytes, keep, maxShards, bytesPerSecond);
    }

    /** Name of the staging segment of checkpoint set {@code name}. */
    static String stagingSegment(String name) {
        return "ckpt/" + name + "/staging";
    }

    /** Name of the control segment of checkpoint set {@code name}. */
    static String controlSegment(String name) {
        return "ckpt/" + name + "/control";
    }
}
