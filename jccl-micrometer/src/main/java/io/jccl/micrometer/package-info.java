/**
 * Optional Micrometer binding: {@link io.jccl.micrometer.JcclMetrics#bind} registers a communicator's counters (per
 * collective and per device) with a {@code MeterRegistry}, from where Micrometer's registries take them to
 * Prometheus, OpenTelemetry and the rest. See docs/observability.md.
 */
package io.jccl.micrometer;
