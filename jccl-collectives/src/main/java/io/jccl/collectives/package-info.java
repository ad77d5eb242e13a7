/**
 * Collective communication for JVM programs, as NCCL and Gloo give C++ and Python: a
 * {@link io.jccl.collectives.Communicator} per rank joins the others through a rendezvous
 * {@link io.jccl.collectives.store.Store} and runs all-reduce, broadcast, reduce, all-gather, reduce-scatter,
 * all-to-all, gather, scatter, barriers, point-to-point groups and one-sided windows over any verbs provider
 * (shared memory between the processes of a host, TCP between hosts), blocking or asynchronous.
 * {@link io.jccl.collectives.CommunicatorOptions} holds the settings ({@code JCCL_*} variables); failures are
 * {@link io.jccl.collectives.CollectiveException}s that name the rank and the operation.
 *
 * <p>The subpackages {@code bootstrap}, {@code core}, {@code message}, {@code algorithm}, {@code direct} and
 * {@code memory} are internal (docs/ARCHITECTURE.md maps them); {@code store}, {@code tuning} and {@code kernel}
 * are public.
 */
package io.jccl.collectives;
