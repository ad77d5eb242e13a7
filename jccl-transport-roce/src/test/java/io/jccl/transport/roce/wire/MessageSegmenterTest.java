package io.jccl.transport.roce.wire;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;

/** Segmentation by path MTU, as rxe's next_opcode_rc: opcode sequence, payload per packet, PSN count. */
class MessageSegmenterTest {
    private final MessageSegmenter segmenter = new MessageSegmenter();

    private List<String> cut(int operation, long length, int mtu) {
        List<String> packets = new ArrayList<>();
        segmenter.reset(operation, length, mtu);
        long expectedOffset = 0;
        while (segmenter.hasNext()) {
            int opcode = segmenter.next();
            assertEquals(expectedOffset, segmenter.payloadOffset());
            expectedOffset += segmenter.payloadLength();
            packets.add(RoceOpcode.name(opcode) + ":" + segmenter.payloadLength());
        }
        assertEquals(length, expectedOffset, "every byte once");
        assertEquals(packets.size(), MessageSegmenter.packetCount(length, mtu));
        return packets;
    }

    @Test
    void shouldSendOneOnlyPacketUpToTheMtu() {
        assertEquals(List.of("SEND_ONLY:0"), cut(MessageSegmenter.SEND, 0, 256));
        assertEquals(List.of("SEND_ONLY:256"), cut(MessageSegmenter.SEND, 256, 256));
        assertEquals(List.of("RDMA_WRITE_ONLY_WITH_IMMEDIATE:4096"),
            cut(MessageSegmenter.RDMA_WRITE_WITH_IMMEDIATE, 4096, 4096));
    }

    @Test
    void shouldCutLongerMessagesIntoFirstMiddleLast() {
        assertEquals(List.of("SEND_FIRST:256", "SEND_LAST:1"), cut(MessageSegmenter.SEND, 257, 256));
        assertEquals(List.of("RDMA_WRITE_FIRST:1024", "RDMA_WRITE_MIDDLE:1024", "RDMA_WRITE_LAST:952"),
            cut(MessageSegmenter.RDMA_WRITE, 3000, 1024));
        assertEquals(List.of("SEND_FIRST:512", "SEND_MIDDLE:512", "SEND_LAST_WITH_IMMEDIATE:512"),
            cut(MessageSegmenter.SEND_WITH_IMMEDIATE, 1536, 512));
        assertEquals(List.of("RDMA_READ_RESPONSE_FIRST:2048", "RDMA_READ_RESPONSE_LAST:2048"),
            cut(MessageSegmenter.RDMA_READ_RESPONSE, 4096, 2048));
    }

    @Test
    void shouldCountPacketsForTheLargestMessage() {
        assertEquals(1 << 20, MessageSegmenter.packetCount(0xFFFFFFFFL, 4096));
        assertEquals(8 << 20 >> 8, MessageSegmenter.packetCount(8 << 20, 256), "8 MiB at 256 B (rxe max_msg_sz)");
    }

    @Test
    void shouldRejectBadMtusLengthsAndOverruns() {
        for (int mtu : new int[] {0, 128, 1500, 8192, -256}) {
            assertThrows(IllegalArgumentException.class, () -> segmenter.reset(MessageSegmenter.SEND, 1, mtu),
                "MTU " + mtu);
        }
        assertThrows(IllegalArgumentException.class, () -> segmenter.reset(MessageSegmenter.SEND, -1, 256));
        assertThrows(IllegalArgumentException.class, () -> segmenter.reset(MessageSegmenter.SEND, 1L << 32, 256));
        assertThrows(IllegalArgumentException.class, () -> segmenter.reset(5, 1, 256));
        segmenter.reset(MessageSegmenter.SEND, 1, 256);
        segmenter.next();
        assertFalse(segmenter.hasNext());
        assertThrows(IllegalStateException.class, segmenter::next);
    }
}
