package io.jccl.transport.roce.wire;

/**
 * The UDP source port of a RoCEv2 queue pair, as every kernel RoCEv2 driver (rxe, mlx5, irdma, hns, mana) derives
 * it from the GRH flow label ({@code rdma_get_udp_sport} in {@code ib_verbs.h}): when the address vector has no
 * flow label, one is made from the two QP numbers ({@code rdma_calc_flow_label}); the 20-bit label is then folded
 * into the dynamic port range 0xC000..0xFFFF ({@code rdma_flow_label_to_udp_sport}). The port is a fabric's ECMP
 * entropy: one flow per QP pair keeps its packets in order, different QP pairs spread over paths.
 */
public final class UdpSourcePort {
    /** Lowest source port a RoCEv2 sender uses ({@code IB_ROCE_UDP_ENCAP_VALID_PORT_MIN}). */
    public static final int MIN = 0xC000;
    /** Mask of a GRH flow label's 20 bits. */
    public static final int FLOW_LABEL_MASK = 0xF_FFFF;

    private UdpSourcePort() {
    }

    /** {@code rdma_calc_flow_label}: a 20-bit flow label from the local and remote QP numbers. */
    public static int calcFlowLabel(int localQpn, int remoteQpn) {
        long v = (localQpn & 0xFFFF_FFFFL) * (remoteQpn & 0xFFFF_FFFFL);
        v ^= v >>> 20;
        v ^= v >>> 40;
        return (int) (v & FLOW_LABEL_MASK);
    }

    /** {@code rdma_flow_label_to_udp_sport}: the flow label's top 6 bits folded into its low 14, in 0xC000... */
    public static int fromFlowLabel(int flowLabel) {
        int low = flowLabel & 0x03FFF;
        int high = flowLabel & 0xFC000;
        low ^= high >>> 14;
        return low | MIN;
    }

    /** {@code rdma_get_udp_sport}: from {@code flowLabel}, or from the QP numbers when it is 0. */
    public static int of(int flowLabel, int localQpn, int remoteQpn) {
        int label = flowLabel & FLOW_LABEL_MASK;
        if (label == 0) {
            label = calcFlowLabel(localQpn, remoteQpn);
        }
        return fromFlowLabel(label);
    }
}
