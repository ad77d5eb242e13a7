/**
 * Checkpoint staging on one-sided verbs: training ranks ({@link io.jccl.services.checkpoint.CheckpointClient})
 * WRITE their shards into the staging memory of a checkpoint agent process
 * ({@link io.jccl.services.checkpoint.CheckpointAgent}), pipelined with training on a staging thread of the client
 * ({@link io.jccl.services.checkpoint.StageHandle}: awaited before the state changes), and READ back the CRC32C
 * the agent computed; the agent persists in the background (shard files fsynced, then a manifest renamed atomically, then {@code latest}) and
 * serves checkpoints back by READ, to the same or another number of ranks
 * ({@link io.jccl.services.checkpoint.ShardLayout}). {@link io.jccl.services.checkpoint.CheckpointDirectory} is the
 * on-disk format. See docs/services.md, "Checkpoint staging".
 */
package io.jccl.services.checkpoint;
