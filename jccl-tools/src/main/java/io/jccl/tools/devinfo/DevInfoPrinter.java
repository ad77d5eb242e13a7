package io.jccl.tools.devinfo;

import io.jccl.verbs.Counter;
import io.jccl.verbs.DeviceAttributes;
import io.jccl.verbs.PathMtu;
import io.jccl.verbs.PortAttributes;
import io.jccl.verbs.PortState;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * Formats device attributes the way rdma-core's {@code ibv_devinfo} and {@code ibv_devices} print them (same labels,
 * same tab layout), plus JSON forms with the same key names.
 */
public final class DevInfoPrinter {
    private DevInfoPrinter() {
    }

    /** ibv_devices' header and one line per device: name and node GUID. */
    public static String devices(List<DeviceRow> rows) {
        StringBuilder out = new StringBuilder();
        out.append(String.format(Locale.ROOT, "    %-16s\t   node GUID%n", "device"));
        out.append(String.format(Locale.ROOT, "    %-16s\t----------------%n", "------"));
        for (DeviceRow row : rows) {
            out.append(String.format(Locale.ROOT, "    %-16s\t%016x%n", row.name(), row.guid()));
        }
        return out.toString();
    }

    /** A device name and GUID, for {@link #devices}. */
    public record DeviceRow(String name, String provider, long guid) {
    }

    /** ibv_devinfo's {@code xxxx:xxxx:xxxx:xxxx} GUID form. */
    public static String guid(long guid) {
        return String.format(Locale.ROOT, "%04x:%04x:%04x:%04x", (guid >>> 48) & 0xFFFF, (guid >>> 32) & 0xFFFF,
            (guid >>> 16) & 0xFFFF, guid & 0xFFFF);
    }

    /** {@code PORT_ACTIVE (4)}. */
    public static String portState(PortState state) {
        return "PORT_" + state.name() + " (" + state.code() + ")";
    }

    /** {@code 4096 (5)}. */
    public static String mtu(PathMtu mtu) {
        return mtu.bytes() + " (" + mtu.code() + ")";
    }

    /** The transport text with its ibv_transport_type code, as ibv_devinfo shows it ({@code InfiniBand (0)}). */
    public static String transport(String transport) {
        if (transport.contains("(")) {
            return transport;
        }
        int code = switch (transport) {
            case "InfiniBand" -> 0;
            case "iWARP" -> 1;
            case "usNIC" -> 2;
            case "usNIC UDP" -> 3;
            case "unspecified" -> 4;
            default -> -1;
        };
        return code < 0 ? transport : transport + " (" + code + ")";
    }

    /**
     * One device in ibv_devinfo's text form.
     *
     * @param port 0 for every port, else only that port
     * @param counters the opened context's counters, printed with {@code verbose}; may be null
     */
    public static String devinfo(DeviceAttributes a, boolean verbose, int port, Map<Counter, Long> counters) {
        return devinfo(a, verbose, port, counters, "this process's context");
    }

    /**
     * As {@link #devinfo(DeviceAttributes, boolean, int, Map)}, with {@code whose} naming whose counters they are
     * ({@code "process 1234's context"}).
     */
    public static String devinfo(DeviceAttributes a, boolean verbose, int port, Map<Counter, Long> counters,
                                 String whose) {
        StringBuilder out = new StringBuilder();
        line(out, "hca_id:\t%s", a.deviceName());
        line(out, "\ttransport:\t\t\t%s", transport(a.transport()));
        if (a.firmwareVersion() != null && !a.firmwareVersion().isEmpty()) {
            line(out, "\tfw_ver:\t\t\t\t%s", a.firmwareVersion());
        }
        line(out, "\tnode_guid:\t\t\t%s", guid(a.nodeGuid()));
        line(out, "\tsys_image_guid:\t\t\t%s", guid(a.nodeGuid()));
        line(out, "\tvendor_id:\t\t\t0x%04x", a.vendorId());
        line(out, "\tvendor_part_id:\t\t\t%d", a.vendorPartId());
        line(out, "\thw_ver:\t\t\t\t0x%X", a.hardwareVersion());
        line(out, "\tboard_id:\t\t\tJCCL_%s", a.providerName().toUpperCase(Locale.ROOT));
        line(out, "\tphys_port_cnt:\t\t\t%d", a.ports().size());
        if (verbose) {
            line(out, "\tmax_mr_size:\t\t\t0x%x", a.maxMemoryRegionSize());
            line(out, "\tpage_size_cap:\t\t\t0x%x", a.pageSizeCapability());
            line(out, "\tmax_qp:\t\t\t\t%d", a.maxQueuePairs());
            line(out, "\tmax_qp_wr:\t\t\t%d", a.maxQueuePairWorkRequests());
            line(out, "\tmax_sge:\t\t\t%d", a.maxSge());
            line(out, "\tmax_cq:\t\t\t\t%d", a.maxCompletionQueues());
            line(out, "\tmax_cqe:\t\t\t%d", a.maxCompletionQueueEntries());
            line(out, "\tmax_mr:\t\t\t\t%d", a.maxMemoryRegions());
            line(out, "\tmax_pd:\t\t\t\t%d", a.maxProtectionDomains());
            line(out, "\tmax_qp_rd_atom:\t\t\t%d", a.maxQueuePairReadAtomic());
            line(out, "\tmax_qp_init_rd_atom:\t\t%d", a.maxQueuePairInitiatorReadAtomic());
            line(out, "\tatomic_cap:\t\t\t%s (%d)", a.atomicCapability().name(), a.atomicCapability().ordinal());
            line(out, "\tmax_inline_data:\t\t%d", a.maxInlineData());
            line(out, "\tprovider:\t\t\t%s", a.providerName());
        }
        for (PortAttributes p : a.ports()) {
            if (port != 0 && p.portNumber() != port) {
                continue;
            }
            line(out, "\t\tport:\t%d", p.portNumber());
            line(out, "\t\t\tstate:\t\t\t%s", portState(p.state()));
            line(out, "\t\t\tmax_mtu:\t\t%s", mtu(p.maxMtu()));
            line(out, "\t\t\tactive_mtu:\t\t%s", mtu(p.activeMtu()));
            line(out, "\t\t\tsm_lid:\t\t\t%d", 0);
            line(out, "\t\t\tport_lid:\t\t%d", 0);
            line(out, "\t\t\tport_lmc:\t\t0x%02x", 0);
            line(out, "\t\t\tlink_layer:\t\t%s", p.linkLayer());
            if (verbose) {
                line(out, "\t\t\tmax_msg_sz:\t\t0x%x", p.maxMessageSize());
                line(out, "\t\t\tGID[  0]:\t\t%s", p.gid());
            }
            out.append(System.lineSeparator());
        }
        if (verbose && counters != null) {
            line(out, "\tcounters (%s; bytes, not 4-byte words):", whose);
            for (Map.Entry<Counter, Long> e : counters.entrySet()) {
                String name = e.getKey().linuxName() + ":";
                // Values line up at column 48 (tab stops every 8), as ibv_devinfo's fields do.
                int column = 16 + name.length();
                int tabs = Math.max(1, (48 - column + 7) / 8);
                line(out, "\t\t%s%s%d", name, "\t".repeat(tabs), e.getValue());
            }
            out.append(System.lineSeparator());
        }
        return out.toString();
    }

    /** One device as a JSON-ready map with ibv_devinfo's key names. */
    public static Map<String, Object> devinfoJson(DeviceAttributes a, boolean verbose, int port,
                                                 Map<Counter, Long> counters) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("hca_id", a.deviceName());
        m.put("provider", a.providerName());
        m.put("transport", transport(a.transport()));
        m.put("fw_ver", a.firmwareVersion());
        m.put("node_guid", guid(a.nodeGuid()));
        m.put("sys_image_guid", guid(a.nodeGuid()));
        m.put("vendor_id", String.format(Locale.ROOT, "0x%04x", a.vendorId()));
        m.put("vendor_part_id", a.vendorPartId());
        m.put("hw_ver", String.format(Locale.ROOT, "0x%X", a.hardwareVersion()));
        m.put("phys_port_cnt", a.ports().size());
        if (verbose) {
            m.put("max_mr_size", a.maxMemoryRegionSize());
            m.put("page_size_cap", a.pageSizeCapability());
            m.put("max_qp", a.maxQueuePairs());
            m.put("max_qp_wr", a.maxQueuePairWorkRequests());
            m.put("max_sge", a.maxSge());
            m.put("max_cq", a.maxCompletionQueues());
            m.put("max_cqe", a.maxCompletionQueueEntries());
            m.put("max_mr", a.maxMemoryRegions());
            m.put("max_pd", a.maxProtectionDomains());
            m.put("max_qp_rd_atom", a.maxQueuePairReadAtomic());
            m.put("max_qp_init_rd_atom", a.maxQueuePairInitiatorReadAtomic());
            m.put("atomic_cap", a.atomicCapability().name());
            m.put("max_inline_data", a.maxInlineData());
        }
        List<Object> ports = new ArrayList<>();
        for (PortAttributes p : a.ports()) {
            if (port != 0 && p.portNumber() != port) {
                continue;
            }
            Map<String, Object> pm = new LinkedHashMap<>();
            pm.put("port", p.portNumber());
            pm.put("state", portState(p.state()));
            pm.put("max_mtu", mtu(p.maxMtu()));
            pm.put("active_mtu", mtu(p.activeMtu()));
            pm.put("link_layer", p.linkLayer());
            if (verbose) {
                pm.put("max_msg_sz", p.maxMessageSize());
                pm.put("gid", p.gid());
            }
            ports.add(pm);
        }
        m.put("ports", ports);
        if (verbose && counters != null) {
            Map<String, Object> cm = new LinkedHashMap<>();
            counters.forEach((k, v) -> cm.put(k.linuxName(), v));
            m.put("counters", cm);
        }
        return m;
    }

    private static void line(StringBuilder out, String format, Object... args) {
        out.append(String.format(Locale.ROOT, format, args)).append(System.lineSeparator());
    }
}
