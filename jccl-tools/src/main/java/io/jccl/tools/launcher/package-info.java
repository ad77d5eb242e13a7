/**
 * {@code jccl run}: a local launcher that starts N ranks with the JCCL and torchrun environment variables and
 * supervises them ({@link io.jccl.tools.launcher.Launcher} is the Java API).
 */
package io.jccl.tools.launcher;
