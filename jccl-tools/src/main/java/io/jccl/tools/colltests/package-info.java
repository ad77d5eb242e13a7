/**
 * {@code jccl tests}: nccl-tests-compatible collective benchmarks; {@link io.jccl.tools.colltests.BusBandwidth}
 * holds nccl-tests' algbw/busbw definitions.
 */
package io.jccl.tools.colltests;
