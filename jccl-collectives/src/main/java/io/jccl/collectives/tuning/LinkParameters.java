package io.jccl.collectives.tuning;

/**
 * α-β parameters of one path, as NCCL's per-protocol latency and bandwidth tables.
 *
 * @param latencyUs cost of one algorithm step (message or flag hand-off) in microseconds
 * @param bandwidthGBps bytes moved per nanosecond (GB/s, 1e9 B/s) by one step's transfer
 */
public record LinkParameters(double latencyUs, double bandwidthGBps) {
    /** Validates. */
    public LinkParameters {
        if (!(latencyUs >= 0) || !(bandwidthGBps > 0)) {
            throw new IllegalArgumentException("latency must be >= 0 and bandwidth > 0");
        }
    }

    /** Microseconds to move {@code bytes}. */
    public double transferUs(double bytes) {
        return bytes / (bandwidthGBps * 1e3);
    }
}
