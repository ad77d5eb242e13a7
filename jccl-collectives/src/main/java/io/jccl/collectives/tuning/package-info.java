/**
 * How a communicator picks an algorithm: a cost model (NCCL's {@code tuning.cc}: latency × steps + bytes /
 * bandwidth per path) that only prices candidates ({@link io.jccl.collectives.tuning.CostModel}), its inputs
 * ({@link io.jccl.collectives.tuning.TuningParameters}), and the {@code JCCL_ALGO} filter.
 */
package io.jccl.collectives.tuning;
