package io.jccl.transport.roce;

import io.jccl.transport.roce.wire.BthFlyweight;
import io.jccl.transport.roce.wire.Icrc;
import io.jccl.transport.roce.wire.RoceOpcode;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * How {@link TxBatch} groups packets into UDP GSO messages and which IPv4 identification each packet's ICRC is for
 * (no socket: the batch's bookkeeping; {@code RoceBatchedIoTest} and the capture tests check the wire).
 */
class TxBatchTest {
    private static final int SOURCE = 0x7F000001;
    private static final int DESTINATION = 0x7F000001;
    private final Icrc icrc = new Icrc();

    /** Builds a packet of {@code length} bytes with opcode {@code opcode} and its identification-0 ICRC. */
    private void add(TxBatch batch, int opcode, int length, boolean gso) {
        ByteBuffer b = batch.buffer();
        new BthFlyweight().wrap(b, 0).init(opcode, 0, BthFlyweight.DEFAULT_PKEY, 5, batch.count());
        for (int i = BthFlyweight.LENGTH; i < length - 4; i++) {
            b.put(i, (byte) (i * 31 + length));
        }
        Icrc.put(b, 0, length, icrc.computeIpv4(SOURCE, DESTINATION, 0, 0x4000, 1000, 4791, b, 0, length));
        batch.commit(length, gso);
    }

    /** Whether packet {@code index} carries the ICRC for identification {@code id}. */
    private boolean icrcFor(TxBatch batch, int index, int id) {
        ByteBuffer b = batch.buffer(index);
        int length = batch.length(index);
        return Icrc.get(b, 0, length) == icrc.computeIpv4(SOURCE, DESTINATION, id, 0x4000, 1000, 4791, b, 0, length);
    }

    @Test
    void shouldGroupEqualPacketsAndAShorterLastIntoOneMessageWithEachSegmentsIcrc() {
        TxBatch batch = new TxBatch(64, 4096);
        add(batch, RoceOpcode.RDMA_WRITE_FIRST, 28 + 4096 + 4, true); // longer than the MIDDLEs
        for (int i = 0; i < 20; i++) {
            add(batch, RoceOpcode.RDMA_WRITE_MIDDLE, 12 + 4096 + 4, true);
        }
        add(batch, RoceOpcode.RDMA_WRITE_LAST, 12 + 100 + 4, true);
        // FIRST and a (shorter) MIDDLE, which closes it | 15 MIDDLEs (65507 bytes at most) | 4 MIDDLEs and the LAST
        assertEquals(3, batch.messageCount());
        assertEquals(2, batch.messagePackets(0));
        assertEquals(15, batch.messagePackets(1));
        assertEquals(5, batch.messagePackets(2));
        for (int i = 0; i < batch.count(); i++) {
            int expected = i < 2 ? i : i < 17 ? i - 2 : i - 17;
            assertEquals(expected, batch.identification(i), "packet " + i);
            assertTrue(icrcFor(batch, i, expected), "packet " + i + "'s ICRC is for identification " + expected);
        }
        batch.ungroup(1); // the kernel refused GSO after the first message went out: the rest one by one
        assertEquals(1 + 20, batch.messageCount());
        assertTrue(icrcFor(batch, 1, 1), "the message that went out is left alone");
        for (int i = 2; i < batch.count(); i++) {
            assertTrue(icrcFor(batch, i, 0), "packet " + i + " back to identification 0");
        }
        batch.ungroup(0);
        assertFalse(batch.grouped());
        assertTrue(icrcFor(batch, 1, 0));
        batch.clear();
        assertEquals(0, batch.messageCount());
    }

    @Test
    void shouldPutALoneAckBehindTheNextLongerPacket() {
        TxBatch batch = new TxBatch(64, 4096);
        int ack = RoceOpcode.packetLength(RoceOpcode.ACKNOWLEDGE, 0);
        int write = RoceOpcode.packetLength(RoceOpcode.RDMA_WRITE_ONLY, 8);
        add(batch, RoceOpcode.ACKNOWLEDGE, ack, true);
        add(batch, RoceOpcode.RDMA_WRITE_ONLY, write, true);
        assertEquals(1, batch.messageCount(), "the WRITE first, the ACK as the shorter last segment");
        assertEquals(1, batch.identification(0));
        assertEquals(0, batch.identification(1));
        assertTrue(icrcFor(batch, 0, 1) && icrcFor(batch, 1, 0));
        assertEquals(batch.slotAddress(1), batch.iovecAddress(0), "the WRITE's slot is the message's first iovec");
        assertEquals(batch.slotAddress(0), batch.iovecAddress(1));
        batch.clear();
        // the next batch's packets in those entries point at their own slots again (a stale swap sent the wrong
        // bytes at the segment size: a 1 MiB WRITE after a ping-pong lost one packet per message)
        add(batch, RoceOpcode.RDMA_WRITE_MIDDLE, 12 + 256 + 4, true);
        add(batch, RoceOpcode.RDMA_WRITE_MIDDLE, 12 + 256 + 4, true);
        assertEquals(1, batch.messageCount());
        assertEquals(batch.slotAddress(0), batch.iovecAddress(0));
        assertEquals(batch.slotAddress(1), batch.iovecAddress(1));
        batch.clear();
        // a request never moves behind another: PSN order
        add(batch, RoceOpcode.RDMA_WRITE_ONLY, write, true);
        add(batch, RoceOpcode.RDMA_WRITE_ONLY, write + 4, true);
        assertEquals(2, batch.messageCount());
        batch.clear();
        // without GSO every packet is a message of its own, identification 0
        add(batch, RoceOpcode.ACKNOWLEDGE, ack, false);
        add(batch, RoceOpcode.RDMA_WRITE_ONLY, write, false);
        add(batch, RoceOpcode.RDMA_WRITE_ONLY, write, false);
        assertEquals(3, batch.messageCount());
        for (int i = 0; i < 3; i++) {
            assertTrue(icrcFor(batch, i, 0));
        }
    }
}
