/**
 * The parameter server on the transfer engine: parameters sharded over server ranks, gradients pushed by WRITE into
 * per-worker slots of the server's registered memory with a WRITE_WITH_IMM notification, weights pulled by READ
 * (no server CPU on the pull; a sequence word keeps a worker from using half-updated weights), SGD with momentum and
 * Adam as torch.optim defines them, a synchronous mode bit-identical to all-reduce training and a bounded-staleness
 * asynchronous mode. Entry points: {@link io.jccl.services.ps.ParameterServer} (a server rank) and
 * {@link io.jccl.services.ps.ParameterWorker} (a worker rank); docs/services.md, "Parameter server".
 */
package io.jccl.services.ps;
