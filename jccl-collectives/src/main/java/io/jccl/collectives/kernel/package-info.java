/**
 * Element-wise reductions over memory segments ({@link io.jccl.collectives.kernel.ReduceKernels}): scalar loops,
 * the reference, and Vector API kernels that match them bit for bit, chosen at run time by
 * {@link io.jccl.collectives.kernel.Kernels}.
 */
package io.jccl.collectives.kernel;
