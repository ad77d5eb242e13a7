/**
 * Benchmarks: JMH benchmarks of the reduction kernels and copies, the collective benchmark that {@code bench/compare}
 * runs beside Open MPI and Gloo ({@link io.jccl.benchmarks.CollectiveBench}, the method and CSV of the peers'
 * {@code mpi_coll.c}), and the start-up probe.
 */
package io.jccl.benchmarks;
