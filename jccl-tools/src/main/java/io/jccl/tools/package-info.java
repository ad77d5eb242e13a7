/**
 * The {@code jccl} command-line tools: {@link io.jccl.tools.Main} dispatches to {@code devices} and
 * {@code devinfo} ({@link io.jccl.tools.devinfo}), {@code perf} ({@link io.jccl.tools.perftest}), {@code run}
 * ({@link io.jccl.tools.launcher}) and {@code tests} ({@link io.jccl.tools.colltests}). The {@code ./jccl} script
 * at the repository root builds the project when needed and starts {@code Main} with the JCCL JVM flags.
 */
package io.jccl.tools;
