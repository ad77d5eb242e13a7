/**
 * {@code jccl perf}: the perftest benchmarks ({@code ib_write_bw} … {@code ib_atomic_lat}) over JCCL devices, with
 * perftest's flags, banner, table columns and JSON keys. {@link io.jccl.tools.perftest.PerfCommand} parses,
 * {@link io.jccl.tools.perftest.OutOfBand} is the TCP side channel, {@link io.jccl.tools.perftest.PerfReport}
 * formats, and the package-private {@code PerfSession} owns the verbs resources and the measurement loops.
 */
package io.jccl.tools.perftest;
