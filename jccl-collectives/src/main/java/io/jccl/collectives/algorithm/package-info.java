/**
 * Internal: the message-path algorithms, one class each, written against the
 * {@link io.jccl.collectives.message.Exchange} loop (they see only the peers of their group and buffers, as Gloo's
 * algorithms see pairs). To add one: a class with a static {@code run(Exchange, Signature, ...)}, a constant in
 * {@link io.jccl.collectives.tuning.Algorithm} with its cost in {@link io.jccl.collectives.tuning.CostModel}, and a
 * case in the communicator's dispatch. Not API; may change without notice.
 */
package io.jccl.collectives.algorithm;
