/**
 * Rendezvous notifications on WRITE_WITH_IMM: a readiness primitive (publish "ready" on a topic, wait for N ranks,
 * with a timeout that names the missing ranks) and small control messages between the ranks of a job, for the
 * services and for users. Entry point: {@link io.jccl.services.rendezvous.Rendezvous}. See docs/services.md,
 * "Rendezvous notifications".
 */
package io.jccl.services.rendezvous;
