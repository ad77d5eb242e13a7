package io.jccl.tools.devinfo;

import io.jccl.verbs.AtomicCapability;
import io.jccl.verbs.Counter;
import io.jccl.verbs.DeviceAttributes;
import io.jccl.verbs.PathMtu;
import io.jccl.verbs.PortAttributes;
import io.jccl.verbs.PortState;
import org.junit.jupiter.api.Test;

import java.util.EnumMap;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

class DevInfoPrinterTest {
    private static DeviceAttributes attributes() {
        return new DeviceAttributes("tcp0", "tcp", "InfiniBand", "1.0", 0x0c42a10300c52f3aL, 0x4a43, 2, 1,
            1L << 32, 4096, 1024, 4096, 4, 1024, 65536, 4096, 1024, 16, 16, 64, AtomicCapability.ATOMIC_HCA,
            List.of(new PortAttributes(1, PortState.ACTIVE, PathMtu.MTU_4096, PathMtu.MTU_1024, "Ethernet",
                1L << 30, "127.0.0.1")));
    }

    @Test
    void shouldPrintIbvDevinfoLines() {
        List<String> lines = DevInfoPrinter.devinfo(attributes(), false, 0, null).lines().toList();
        assertEquals("hca_id:\ttcp0", lines.get(0));
        assertEquals("\ttransport:\t\t\tInfiniBand (0)", lines.get(1));
        assertEquals("\tfw_ver:\t\t\t\t1.0", lines.get(2));
        assertEquals("\tnode_guid:\t\t\t0c42:a103:00c5:2f3a", lines.get(3));
        assertEquals("\tsys_image_guid:\t\t\t0c42:a103:00c5:2f3a", lines.get(4));
        assertEquals("\tvendor_id:\t\t\t0x4a43", lines.get(5));
        assertEquals("\tvendor_part_id:\t\t\t2", lines.get(6));
        assertEquals("\thw_ver:\t\t\t\t0x1", lines.get(7));
        assertTrue(lines.contains("\tphys_port_cnt:\t\t\t1"));
        assertTrue(lines.contains("\t\tport:\t1"));
        assertTrue(lines.contains("\t\t\tstate:\t\t\tPORT_ACTIVE (4)"));
        assertTrue(lines.contains("\t\t\tmax_mtu:\t\t4096 (5)"));
        assertTrue(lines.contains("\t\t\tactive_mtu:\t\t1024 (3)"));
        assertTrue(lines.contains("\t\t\tlink_layer:\t\tEthernet"));
        assertFalse(lines.contains("\tmax_qp:\t\t\t\t1024"));
    }

    @Test
    void shouldAddExtendedAttributesAndCountersWhenVerbose() {
        Map<Counter, Long> counters = new EnumMap<>(Counter.class);
        counters.put(Counter.PORT_XMIT_DATA, 4096L);
        counters.put(Counter.PORT_RCV_DATA, 8L);
        String text = DevInfoPrinter.devinfo(attributes(), true, 0, counters);
        assertTrue(text.contains("\tmax_mr_size:\t\t\t0x100000000\n"));
        assertTrue(text.contains("\tmax_qp:\t\t\t\t1024\n"));
        assertTrue(text.contains("\tatomic_cap:\t\t\tATOMIC_HCA (1)\n"));
        assertTrue(text.contains("\t\t\tmax_msg_sz:\t\t0x40000000\n"));
        assertTrue(text.contains("port_xmit_data:\t\t\t4096"), text);
        assertTrue(text.contains("port_rcv_data:\t\t\t8"), text);
        Map<String, Object> json = DevInfoPrinter.devinfoJson(attributes(), true, 0, counters);
        assertEquals("tcp0", json.get("hca_id"));
        assertEquals(Map.of("port_xmit_data", 4096L, "port_rcv_data", 8L), json.get("counters"));
    }

    @Test
    void shouldPrintIbvDevicesColumns() {
        String text = DevInfoPrinter.devices(List.of(new DevInfoPrinter.DeviceRow("shm0", "shm", 0x4a43434c1L)));
        List<String> lines = text.lines().toList();
        assertEquals("    device          \t   node GUID", lines.get(0));
        assertEquals("    ------          \t----------------", lines.get(1));
        assertEquals("    shm0            \t00000004a43434c1", lines.get(2));
        assertEquals("PORT_DOWN (1)", DevInfoPrinter.portState(PortState.DOWN));
    }
}
