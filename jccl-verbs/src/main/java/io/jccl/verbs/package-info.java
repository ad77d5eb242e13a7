/**
 * The verbs API, shaped like libibverbs: {@link io.jccl.verbs.Verbs} lists devices; a
 * {@link io.jccl.verbs.Context} (an open device) is the root of protection domains, memory regions (lkey/rkey),
 * completion queues and reliable-connected {@link io.jccl.verbs.QueuePair}s with ibv semantics (state machine,
 * SEND/RECV, RDMA WRITE/READ, atomics, completions in order, errors flush). Work requests and completion arrays are
 * reusable, so the data path allocates nothing. {@link io.jccl.verbs.ConnectionManager} connects queue pairs the
 * way librdmacm does. Providers implement it through {@code io.jccl.verbs.spi}.
 */
package io.jccl.verbs;
