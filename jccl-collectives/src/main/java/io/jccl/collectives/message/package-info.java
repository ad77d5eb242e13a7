/**
 * Internal: the message path. {@link io.jccl.collectives.message.MessagePath} holds the verbs plumbing (devices,
 * one RC queue pair per peer, inboxes written with RDMA WRITE WITH IMM, credits, rendezvous) and the peers' health;
 * {@link io.jccl.collectives.message.Exchange} is the loop every message-path algorithm runs its transfers with.
 * Sees only the verbs API: a device is chosen by what it can do, never by its provider's name. Not API; may change
 * without notice.
 */
package io.jccl.collectives.message;
