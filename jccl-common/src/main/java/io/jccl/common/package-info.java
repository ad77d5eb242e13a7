/**
 * What every JCCL layer uses, and nothing layer-specific: settings read the NCCL way ({@link io.jccl.common.Config}:
 * {@code JCCL_*} variables and {@code jccl.*} properties), NCCL-style logging ({@link io.jccl.common.Log},
 * {@code JCCL_DEBUG}), unpredictable ids ({@link io.jccl.common.SecureIds}), this process's id, CPU affinity and the
 * delayed linking of native calls. Depends on the JDK only.
 */
package io.jccl.common;
