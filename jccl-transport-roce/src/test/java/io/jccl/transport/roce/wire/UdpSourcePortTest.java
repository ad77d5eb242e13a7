package io.jccl.transport.roce.wire;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The source port as {@code rdma_get_udp_sport} computes it; expected values worked out with the kernel's
 * arithmetic ({@code rdma_calc_flow_label}: u64 product, fold by 20 and 40 bits, 20-bit mask;
 * {@code rdma_flow_label_to_udp_sport}: low 14 bits XOR top 6, OR 0xC000).
 */
class UdpSourcePortTest {
    @Test
    void shouldDeriveTheFlowLabelFromBothQpNumbers() {
        assertEquals(0x132, UdpSourcePort.calcFlowLabel(0x11, 0x12));
        assertEquals(0xE5B0, UdpSourcePort.calcFlowLabel(0xD2, 0x118));
        assertEquals(0xFFF2D, UdpSourcePort.calcFlowLabel(0xFFFFFF, 0xFFFFFE), "uses all 48 product bits");
    }

    @Test
    void shouldFoldTheFlowLabelIntoTheDynamicPortRange() {
        assertEquals(49458, UdpSourcePort.of(0, 0x11, 0x12));
        assertEquals(58803, UdpSourcePort.of(0, 0xD2, 0x118));
        assertEquals(65298, UdpSourcePort.of(0, 0xFFFFFF, 0xFFFFFE));
        assertEquals(0xC000 | (0x3FFF ^ 0x3F), UdpSourcePort.fromFlowLabel(0xFFFFF));
        assertEquals(UdpSourcePort.fromFlowLabel(0x12345), UdpSourcePort.of(0x12345, 1, 2), "a given label wins");
        for (int l = 0; l < 1 << 20; l += 977) {
            int port = UdpSourcePort.fromFlowLabel(l);
            assertTrue(port >= 0xC000 && port <= 0xFFFF, "label " + l);
        }
    }

    @Test
    void shouldBeTheSameInBothDirections() {
        assertEquals(UdpSourcePort.of(0, 0x1234, 0x5678), UdpSourcePort.of(0, 0x5678, 0x1234));
    }
}
