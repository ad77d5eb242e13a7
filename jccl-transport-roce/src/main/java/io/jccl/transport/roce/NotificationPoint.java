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
 * field, or with FECN set in its BTH (InfiniBand's own congestion mark, which the ICRC leaves out so that a switch
 * may set it), is counted (np_ecn_marked_roce_packets) and answered with a congestion notification packet to the
 * sending queue pair, at most one per queue pair per interval (the paper's N, 50 µs; np_cnp_sent).
 *
 * <p>A CNP is laid out as ConnectX NICs and rxe's opcode table have it: a BTH with opcode 0x81, BECN set, the
 * queue pair's P_Key, the peer's queue pair number, PSN 0, no AckReq, migration state 0; then 16 reserved zero
 * bytes and the ICRC (28 + 4 bytes). Receive thread only: it owns the buffer, and {@link RoceQueuePair#lastCnpNs}.
 */
final class NotificationPoint {
    private final RoceContext context;
    private final ByteBuffer tx = ByteBuffer.allocateDirect(64);
    private final BthFlyweight bth = new BthFlyweight();
    private final Icrc icrc = new Icrc();

    /** The notification point of {@code context} (the interval is its {@link RoceContext#congestion()}'s). */
    NotificationPoint(RoceContext context) {
        this.context = context;
    }

    /**
     * A datagram with IP TOS byte {@code tos} ({@link EcnSource#UNKNOWN} when the socket did not say) and BTH
     * FECN bit {@code fecn} from {@code from} reached {@code qp}, which has checked it; {@code nowNs} is the time
     * of arrival.
     */
    void onArrival(int tos, boolean fecn, RoceQueuePair qp, InetSocketAddress from, long nowNs) {
        if (!fecn && !EcnSource.congestionExperienced(tos)) {
            return;
        }
        context.counterSet().increment(Counter.NP_ECN_MARKED_ROCE_PACKETS);
        InetSocketAddress peer = qp.remoteSocket();
        if (peer == null || !peer.equals(from)) {
            return; // not from the QP's peer: the QP dropped it too, and a CNP would go to a stranger
        }
        long last = qp.lastCnpNs;
        if (last != 0 && nowNs - last < context.congestion().cnpIntervalNs()) {
            return;
        }
        int length = RoceOpcode.packetLength(RoceOpcode.CNP, 0);
        bth.wrap(tx, 0).init(RoceOpcode.CNP, 0, qp.pKey(), qp.peerQpNumber(), 0).migrationRequest(false)
            .becn(true);
        for (int i = BthFlyweight.LENGTH; i < BthFlyweight.LENGTH + RoceOpcode.CNP_RESERVED_LENGTH; i++) {
            tx.put(i, (byte) 0);
        }
        int value = icrc.computeIpv4(context.localIpv4(), qp.remoteIpv4(), 0, RoceContext.DONT_FRAGMENT,
            context.localPort(), peer.getPort(), tx, 0, length);
        Icrc.put(tx, 0, length, value);
        try {
            context.send(tx, length, peer);
        } catch (IOException e) {
            Log.get().warn(-1, Log.Subsys.NET, "roce0: CNP to " + peer + " failed: " + e);
            return;
        }
        qp.lastCnpNs = nowNs == 0 ? 1 : nowNs;
        context.counterSet().increment(Counter.NP_CNP_SENT);
    }
}
