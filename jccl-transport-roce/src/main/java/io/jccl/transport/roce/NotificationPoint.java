package io.jccl.transport.roce;

import io.jccl.common.Log;
import io.jccl.transport.roce.wire.BthFlyweight;
import io.jccl.transport.roce.wire.Icrc;
import io.jccl.transport.roce.wire.RoceOpcode;
import io.jccl.verbs.Counter;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;

/**
 * DCQCN's notification point of one context: a datagram that arrives with Congestion Experienced in its IP ECN
 * field (the TOS byte the FFM socket reports with each packet through {@code IP_RECVTOS}), or with FECN set in its
 * BTH (InfiniBand's own congestion mark, which the ICRC leaves out so that a switch may set it), is counted
 * (np_ecn_marked_roce_packets) and answered with a congestion notification packet to the sending queue pair, at
 * most one per queue pair per interval (the paper's N, 50 µs; np_cnp_sent).
 *
 * <p>A CNP is laid out as ConnectX NICs and rxe's opcode table have it: a BTH with opcode 0x81, BECN set, the
 * queue pair's P_Key, the peer's queue pair number, PSN 0, no AckReq, migration state 0; then 16 reserved zero
 * bytes and the ICRC (28 + 4 bytes). It goes out through a one-slot {@link TxBatch} of its own (the queue pairs'
 * send path: no allocation). Used by whoever holds the context's receive lock: it owns the batch and
 * {@link RoceQueuePair#lastCnpNs}.
 */
final class NotificationPoint {
    private final RoceContext context;
    /** One CNP at a time; slots of 64 bytes (MTU 0 plus the header room) hold its 32. */
    private final TxBatch tx = new TxBatch(1, 0);
    private final BthFlyweight bth = new BthFlyweight();
    private final Icrc icrc = new Icrc();

    /** The notification point of {@code context} (the interval is its {@link RoceContext#congestion()}'s). */
    NotificationPoint(RoceContext context) {
        this.context = context;
    }

    /**
     * A datagram with IP TOS byte {@code tos} ({@link EcnSource#UNKNOWN} when the socket did not say) and BTH
     * FECN bit {@code fecn} from {@code sourceIpv4:sourcePort} reached {@code qp}; {@code nowNs} is the time of
     * arrival.
     */
    void onArrival(int tos, boolean fecn, RoceQueuePair qp, int sourceIpv4, int sourcePort, long nowNs) {
        if (!fecn && !EcnSource.congestionExperienced(tos)) {
            return;
        }
        context.counterSet().increment(Counter.NP_ECN_MARKED_ROCE_PACKETS);
        InetSocketAddress peer = qp.remoteSocket();
        if (peer == null || !qp.fromPeer(sourceIpv4, sourcePort)) {
            return; // not from the QP's peer: the QP drops it too, and a CNP would go to a stranger
        }
        long last = qp.lastCnpNs;
        if (last != 0 && nowNs - last < context.congestion().cnpIntervalNs()) {
            return;
        }
        int length = RoceOpcode.packetLength(RoceOpcode.CNP, 0);
        ByteBuffer packet = tx.buffer();
        bth.wrap(packet, 0).init(RoceOpcode.CNP, 0, qp.pKey(), qp.peerQpNumber(), 0).migrationRequest(false)
            .becn(true);
        for (int i = BthFlyweight.LENGTH; i < BthFlyweight.LENGTH + RoceOpcode.CNP_RESERVED_LENGTH; i++) {
            packet.put(i, (byte) 0);
        }
        // to the peer's context port (where it receives), from the QP's own source port, as its other packets
        int value = icrc.computeIpv4(context.localIpv4(), qp.remoteIpv4(), 0, RoceContext.DONT_FRAGMENT,
            qp.txSourcePort(), qp.remotePort(), packet, 0, length);
        Icrc.put(packet, 0, length, value);
        context.queue(tx, qp.txSocket(), length);
        try {
            context.flush(tx, qp.txSocket(), peer, qp.remoteIpv4(), qp.remotePort());
        } catch (IOException e) {
            Log.get().warn(-1, Log.Subsys.NET, "roce0: CNP to " + peer + " failed: " + e);
            return;
        }
        qp.lastCnpNs = nowNs == 0 ? 1 : nowNs;
        context.counterSet().increment(Counter.NP_CNP_SENT);
    }
}
