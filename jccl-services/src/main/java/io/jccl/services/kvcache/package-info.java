/**
 * KV-cache transfer for disaggregated LLM inference (prefill → decode), built on the transfer engine: a paged KV
 * layout ({@link io.jccl.services.kvcache.KvCacheLayout}), block pools with block tables per request
 * ({@link io.jccl.services.kvcache.KvBlockPool}), a {@link io.jccl.services.kvcache.KvCacheSender} on the prefill
 * side that WRITEs a request's blocks (contiguous runs coalesced) and a
 * {@link io.jccl.services.kvcache.KvCacheReceiver} on the decode side that gets one notification per whole request
 * and returns the blocks when done (vLLM's paged blocks, Mooncake's and NIXL's KV hand-off).
 */
package io.jccl.services.kvcache;
