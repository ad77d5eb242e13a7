package io.jccl.transport.roce;

import io.jccl.common.Config;
import io.jccl.transport.roce.wire.Icrc;
import io.jccl.transport.roce.wire.MessageSegmenter;

/**
 * Settings of a roce context, read from {@code JCCL_*} environment variables (or their {@code jccl.*} system
 * properties) by {@link #fromConfig()}.
 *
 * @param port UDP port the context receives on and sends to ({@code JCCL_ROCE_PORT}, default 4791, RoCEv2's IANA
 *     port). A setting so that several endpoints (and several engineers' tests) share one host, and so that a JCCL
 *     endpoint can run beside the kernel's rxe, which holds 4791 in its network namespace
 * @param pathMtuBytes largest payload per packet ({@code JCCL_ROCE_MTU}: 256, 512, 1024, 2048 or 4096; default
 *     1024, what rxe picks on a 1500-byte Ethernet MTU)
 */
public record RoceSettings(int port, int pathMtuBytes) {
    /** Variable that sets {@link #port()}. */
    public static final String PORT_ENV = "JCCL_ROCE_PORT";
    /** Variable that sets {@link #pathMtuBytes()}. */
    public static final String MTU_ENV = "JCCL_ROCE_MTU";
    /** Default path MTU. */
    public static final int DEFAULT_PATH_MTU_BYTES = 1024;

    /** Validates the values. */
    public RoceSettings {
        if (port < 1 || port > 65535) {
            throw new IllegalArgumentException(PORT_ENV + "=" + port + " outside 1..65535");
        }
        try {
            MessageSegmenter.checkedMtu(pathMtuBytes);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException(MTU_ENV + "=" + pathMtuBytes + ": use 256, 512, 1024, 2048 or 4096",
                e);
        }
    }

    /** The settings from the environment (system properties first). */
    public static RoceSettings fromConfig() {
        return new RoceSettings(intValue(PORT_ENV, Icrc.ROCE_V2_UDP_PORT),
            intValue(MTU_ENV, DEFAULT_PATH_MTU_BYTES));
    }

    private static int intValue(String env, int fallback) {
        long value = Config.longValue(env, fallback);
        if (value < Integer.MIN_VALUE || value > Integer.MAX_VALUE) {
            throw new IllegalArgumentException(env + "=" + value + " is out of range");
        }
        return (int) value;
    }
}
