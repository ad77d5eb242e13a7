/**
 * The inference batching ring: producers ({@link io.jccl.services.batching.InferenceClient}) WRITE requests into
 * their lane of a ring in the consumer's registered memory and signal each with WRITE_WITH_IMM; the consumer
 * ({@link io.jccl.services.batching.InferenceServer}) forms batches with the rules of Triton's dynamic batcher
 * (maximum batch size, preferred batch sizes, maximum queue delay, per-request timeouts rejected with a status),
 * runs a {@link io.jccl.services.batching.BatchModel}, and WRITEs each result (with WRITE_WITH_IMM) into the
 * requester's registered response slot. See docs/services.md, "Inference batching ring".
 */
package io.jccl.services.batching;
