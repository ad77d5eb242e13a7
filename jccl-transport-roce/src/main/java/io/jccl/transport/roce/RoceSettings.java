package io.jccl.transport.roce;

import io.jccl.common.Config;
import io.jccl.transport.roce.wire.Icrc;
import io.jccl.transport.roce.wire.MessageSegmenter;

import java.net.Inet4Address;
import java.net.InetAddress;
import java.util.ArrayList;
import java.util.List;

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
 *     or 4096; by default the largest whose datagram fits the interface of {@code address}, as rxe derives it from
 *     its netdev: 4096 on loopback and jumbo frames, 1024 on 1500-byte Ethernet; {@link #defaultPathMtuBytes}). A
 *     queue pair uses the smaller of this and its path MTU attribute
 * @param pKeys the port's P_Key table ({@code JCCL_ROCE_PKEYS}, comma-separated, hexadecimal with 0x or decimal;
 *     default the single default P_Key 0xFFFF). A queue pair's pkey_index picks the entry it sends with; a packet
 *     whose P_Key does not match its queue pair's entry is dropped and counted in bad_pkey_cntr
 * @param ackTimeoutFloorUs the shortest local ACK timeout a queue pair uses, in microseconds
 *     ({@code JCCL_ROCE_ACK_TIMEOUT_FLOOR_US}, default 32768, about timeout code 13; 0 = exactly 4.096 µs ·
 *     2^timeout as rxe). The peer is a process that may pause for milliseconds (GC, JIT, a loaded host): a shorter
 *     timer turns such a pause into retries and, with a small retry_cnt, into RETRY_EXC_ERR
 */
public record RoceSettings(String address, int port, int pathMtuBytes, List<Integer> pKeys,
                           long ackTimeoutFloorUs) {
    /** Variable that sets {@link #address()}. */
    public static final String ADDRESS_ENV = "JCCL_ROCE_ADDRESS";
    /** Variable that sets {@link #port()}. */
    public static final String PORT_ENV = "JCCL_ROCE_PORT";
    /** Variable that sets {@link #pathMtuBytes()}. */
    public static final String MTU_ENV = "JCCL_ROCE_MTU";
    /** Default address. */
    public static final String DEFAULT_ADDRESS = "127.0.0.1";
    /** Path MTU where the interface's MTU cannot be read (what rxe picks on 1500-byte Ethernet). */
    public static final int DEFAULT_PATH_MTU_BYTES = 1024;
    /** IPv4 (20) and UDP (8) headers, and the largest RoCE headers, pad and ICRC (BTH+AtomicETH 40 + 4, rounded). */
    static final int DATAGRAM_OVERHEAD_BYTES = 20 + 8 + 64;
    /** Variable that sets {@link #pKeys()}. */
    public static final String PKEYS_ENV = "JCCL_ROCE_PKEYS";
    /** The default P_Key: full member of the default partition. */
    public static final int DEFAULT_PKEY = 0xFFFF;
    /** Most entries of a port's P_Key table (rxe's max_pkeys). */
    public static final int MAX_PKEYS = 64;

    /** Variable that sets {@link #ackTimeoutFloorUs()}. */
    public static final String ACK_TIMEOUT_FLOOR_ENV = "JCCL_ROCE_ACK_TIMEOUT_FLOOR_US";
    /** Default {@link #ackTimeoutFloorUs()}. */
    public static final long DEFAULT_ACK_TIMEOUT_FLOOR_US = 32_768;

    /** Settings with the default P_Key table (0xFFFF only) and ACK timeout floor. */
    public RoceSettings(String address, int port, int pathMtuBytes) {
        this(address, port, pathMtuBytes, List.of(DEFAULT_PKEY), DEFAULT_ACK_TIMEOUT_FLOOR_US);
    }

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
        if (pKeys == null || pKeys.isEmpty() || pKeys.size() > MAX_PKEYS) {
            throw new IllegalArgumentException(PKEYS_ENV + ": give 1 to " + MAX_PKEYS + " P_Keys");
        }
        for (Integer key : pKeys) {
            if (key == null || key < 0 || key > 0xFFFF || (key & 0x7FFF) == 0) {
                throw new IllegalArgumentException(PKEYS_ENV + ": P_Key " + key + " is not 16 bits with a non-zero"
                    + " partition (low 15 bits)");
            }
        }
        pKeys = List.copyOf(pKeys);
        if (ackTimeoutFloorUs < 0 || ackTimeoutFloorUs > 10_000_000) {
            throw new IllegalArgumentException(ACK_TIMEOUT_FLOOR_ENV + "=" + ackTimeoutFloorUs
                + " outside 0..10000000");
        }
    }

    /**
     * Whether a packet's P_Key {@code a} matches a table entry {@code b} (IBA 10.9.3): the same partition (low 15
     * bits) and at least one of the two a full member (bit 15).
     */
    static boolean pKeysMatch(int a, int b) {
        return (a & 0x7FFF) == (b & 0x7FFF) && ((a | b) & 0x8000) != 0;
    }

    /** The settings from the environment (system properties first). */
    public static RoceSettings fromConfig() {
        return new RoceSettings(Config.value(ADDRESS_ENV, DEFAULT_ADDRESS), intValue(PORT_ENV,
            Icrc.ROCE_V2_UDP_PORT), intValue(MTU_ENV, defaultPathMtuBytes(Config.value(ADDRESS_ENV,
            DEFAULT_ADDRESS))),
            parsePKeys(Config.value(PKEYS_ENV, "0xFFFF")),
            Config.longValue(ACK_TIMEOUT_FLOOR_ENV, DEFAULT_ACK_TIMEOUT_FLOOR_US));
    }

    /**
     * The largest IB MTU (256..4096) whose packets, with IPv4, UDP and RoCE headers, fit the MTU of the interface
     * that holds {@code address} (Don't Fragment is set: a larger datagram would be refused); 4096 on loopback
     * (65536) and 9000-byte jumbo frames, 1024 on 1500-byte Ethernet. {@link #DEFAULT_PATH_MTU_BYTES} where the
     * interface or its MTU cannot be found. On loopback 4096 gave more 1 MiB WRITE bandwidth than 1024 in 3 of 4
     * alternating pairs (docs/transport-roce.md, "Socket I/O").
     */
    static int defaultPathMtuBytes(String address) {
        InetAddress ip = literal(address);
        try {
            java.net.NetworkInterface nif = ip == null ? null : java.net.NetworkInterface.getByInetAddress(ip);
            int linkMtu = nif == null ? -1 : nif.getMTU();
            return linkMtu <= 0 ? DEFAULT_PATH_MTU_BYTES : ibMtuFor(linkMtu);
        } catch (java.io.IOException | RuntimeException e) {
            return DEFAULT_PATH_MTU_BYTES;
        }
    }

    /** The largest IB MTU whose datagrams fit a link MTU of {@code linkMtu} bytes (at least 256). */
    static int ibMtuFor(int linkMtu) {
        int mtu = MessageSegmenter.MAX_MTU;
        while (mtu > 256 && mtu + DATAGRAM_OVERHEAD_BYTES > linkMtu) {
            mtu >>= 1;
        }
        return mtu;
    }

    /** Parses a comma-separated P_Key list ("0xFFFF,0x8001"). */
    static List<Integer> parsePKeys(String text) {
        List<Integer> keys = new ArrayList<>();
        for (String part : text.split(",")) {
            String t = part.trim();
            try {
                keys.add(t.startsWith("0x") || t.startsWith("0X") ? Integer.parseInt(t.substring(2), 16)
                    : Integer.parseInt(t));
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException(PKEYS_ENV + "=" + text + ": '" + t + "' is not a number", e);
            }
        }
        return keys;
    }

    /** These settings with another port. */
    public RoceSettings withPort(int newPort) {
        return new RoceSettings(address, newPort, pathMtuBytes, pKeys, ackTimeoutFloorUs);
    }

    /** These settings with another port MTU. */
    public RoceSettings withPathMtuBytes(int newPathMtuBytes) {
        return new RoceSettings(address, port, newPathMtuBytes, pKeys, ackTimeoutFloorUs);
    }

    /** These settings with another P_Key table. */
    public RoceSettings withPKeys(List<Integer> newPKeys) {
        return new RoceSettings(address, port, pathMtuBytes, newPKeys, ackTimeoutFloorUs);
    }

    /** These settings with another ACK timeout floor (0 = rxe's exact timer). */
    public RoceSettings withAckTimeoutFloorUs(long newAckTimeoutFloorUs) {
        return new RoceSettings(address, port, pathMtuBytes, pKeys, newAckTimeoutFloorUs);
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
