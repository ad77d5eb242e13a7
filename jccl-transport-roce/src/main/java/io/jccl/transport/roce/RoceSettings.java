package io.jccl.transport.roce;

import io.jccl.common.Config;
import io.jccl.transport.roce.wire.Icrc;
import io.jccl.transport.roce.wire.MessageSegmenter;

import java.net.Inet4Address;
import java.net.InetAddress;

/**
 * Settings of a roce context, read from {@code JCCL_*} environment variables (or their {@code jccl.*} system
 * properties) by {@link #fromConfig()}, or built directly for {@link RoceDevice#open(RoceSettings)}.
 *
 * @param address IPv4 address the context binds and advertises ({@code JCCL_ROCE_ADDRESS}, default 127.0.0.1).
 *     A specific address, not the wildcard: the receiver verifies each packet's ICRC, which covers the
 *     destination address, so it must know which one the packet was sent to
 * @param port UDP port the context receives on ({@code JCCL_ROCE_PORT}, default 4791, RoCEv2's IANA port; 0 picks
 *     a free port, as tests do so that several endpoints and several engineers' test runs share one host). Peers
 *     learn it from the endpoint record, so both sides need not use the same
 * @param pathMtuBytes the port's MTU, the largest payload per packet ({@code JCCL_ROCE_MTU}: 256, 512, 1024, 2048
 *     or 4096; default 1024, what rxe picks on a 1500-byte Ethernet MTU). A queue pair uses the smaller of this and
 *     its path MTU attribute
 */
public record RoceSettings(String address, int port, int pathMtuBytes) {
    /** Variable that sets {@link #address()}. */
    public static final String ADDRESS_ENV = "JCCL_ROCE_ADDRESS";
    /** Variable that sets {@link #port()}. */
    public static final String PORT_ENV = "JCCL_ROCE_PORT";
    /** Variable that sets {@link #pathMtuBytes()}. */
    public static final String MTU_ENV = "JCCL_ROCE_MTU";
    /** Default address. */
    public static final String DEFAULT_ADDRESS = "127.0.0.1";
    /** Default path MTU. */
    public static final int DEFAULT_PATH_MTU_BYTES = 1024;

    /** Validates the values. */
    public RoceSettings {
        if (address == null || !(literal(address) instanceof Inet4Address)) {
            throw new IllegalArgumentException(ADDRESS_ENV + "=" + address + ": give an IPv4 address literal"
                + " (IPv6 and the wildcard address are not supported yet)");
        }
        if (literal(address).isAnyLocalAddress()) {
            throw new IllegalArgumentException(ADDRESS_ENV + "=" + address + ": the wildcard address cannot be used"
                + " (the ICRC covers the destination address)");
        }
        if (port < 0 || port > 65535) {
            throw new IllegalArgumentException(PORT_ENV + "=" + port + " outside 0..65535");
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
        return new RoceSettings(Config.value(ADDRESS_ENV, DEFAULT_ADDRESS), intValue(PORT_ENV,
            Icrc.ROCE_V2_UDP_PORT), intValue(MTU_ENV, DEFAULT_PATH_MTU_BYTES));
    }

    /** These settings with another port. */
    public RoceSettings withPort(int newPort) {
        return new RoceSettings(address, newPort, pathMtuBytes);
    }

    /** These settings with another port MTU. */
    public RoceSettings withPathMtuBytes(int newPathMtuBytes) {
        return new RoceSettings(address, port, newPathMtuBytes);
    }

    /** The address as an {@link InetAddress} (a literal: never a DNS lookup). */
    InetAddress inetAddress() {
        return literal(address);
    }

    private static InetAddress literal(String text) {
        try {
            return InetAddress.ofLiteral(text);
        } catch (IllegalArgumentException e) {
            return null;
        }
    }

    private static int intValue(String env, int fallback) {
        long value = Config.longValue(env, fallback);
        if (value < Integer.MIN_VALUE || value > Integer.MAX_VALUE) {
            throw new IllegalArgumentException(env + "=" + value + " is out of range");
        }
        return (int) value;
    }
}
