/**
 * How JCCL's threads wait: one {@link io.jccl.common.idle.IdleStrategy} interface (Agrona's), used by every wait
 * loop (completion-queue polls, the tcp progress thread, the collectives' exchanges and flag barriers), with a
 * backoff (spin, yield, sleep on a pluggable {@link io.jccl.common.idle.Sleeper}) and an adaptive spin.
 */
package io.jccl.common.idle;
