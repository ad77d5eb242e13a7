package io.jccl.verbs;

/**
 * Per-context counters, named as the Linux RDMA port counters and rxe hw_counters are, so dashboards and
 * {@code jccl devinfo -v} read the same names. Data counters are in bytes (not the 4-byte words of the PMA).
 */
public enum Counter {
    /** Payload bytes sent. */
    PORT_XMIT_DATA("port_xmit_data"),
    /** Payload bytes received. */
    PORT_RCV_DATA("port_rcv_data"),
    /** Messages (frames) sent. */
    PORT_XMIT_PACKETS("port_xmit_packets"),
    /** Messages (frames) received. */
    PORT_RCV_PACKETS("port_rcv_packets"),
    /** Malformed or unexpected input dropped (connection closed). */
    PORT_RCV_ERRORS("port_rcv_errors"),
    /** Requests that arrived out of sequence. */
    OUT_OF_SEQUENCE("out_of_sequence"),
    /** PSN sequence errors reported by the peer. */
    PACKET_SEQ_ERR("packet_seq_err"),
    /** Requests that timed out waiting for an acknowledgement. */
    LOCAL_ACK_TIMEOUT_ERR("local_ack_timeout_err"),
    /** Requests that ran out of RNR retries. */
    RNR_NAK_RETRY_ERR("rnr_nak_retry_err"),
    /** RNR NAKs received (the peer had no receive posted). */
    RCVD_RNR_ERR("rcvd_rnr_err"),
    /** RNR NAKs sent (we had no receive posted). */
    SEND_RNR_ERR("send_rnr_err"),
    /** Remote access errors detected as responder (bad key, range or permission). */
    REMOTE_ACCESS_ERRORS("remote_access_errors"),
    /** Remote access errors reported by the peer to us as requester. */
    REQ_REMOTE_ACCESS_ERRORS("req_remote_access_errors"),
    /** Connections or peers lost. */
    LINK_DOWNED("link_downed"),
    /** SEND/RECV messages delivered. */
    RDMA_RECVS("rdma_recvs"),
    /** SEND messages sent. */
    RDMA_SENDS("rdma_sends"),
    /** Duplicate requests received. */
    DUPLICATE_REQUEST("duplicate_request"),
    /** RoCE packets sent (rxe's sent_pkts: requests, responses and ACKs). */
    SENT_PKTS("sent_pkts"),
    /** RoCE packets received that passed the port checks and reached a queue pair (rxe's rcvd_pkts). */
    RCVD_PKTS("rcvd_pkts"),
    /** Requests received beyond the expected PSN (rxe's out_of_seq_request; a PSN sequence NAK goes out once). */
    OUT_OF_SEQ_REQUEST("out_of_seq_request"),
    /** PSN sequence error NAKs received, and responses received beyond the expected PSN (rxe's rcvd_seq_err). */
    RCVD_SEQ_ERR("rcvd_seq_err"),
    /** Requests executed without an ACK because the requester did not ask for one (rxe's ack_deferred). */
    ACK_DEFERRED("ack_deferred"),
    /** Sends completed with RETRY_EXC_ERR (rxe's retry_exceeded_err). */
    RETRY_EXCEEDED_ERR("retry_exceeded_err"),
    /** Sends completed with RNR_RETRY_EXC_ERR (rxe's rnr_retry_exceeded_err). */
    RNR_RETRY_EXCEEDED_ERR("rnr_retry_exceeded_err"),
    /** Go-back-N retransmissions started, by a NAK, a lost response or the ACK timeout (rxe's completer_retry_err). */
    COMPLETER_RETRY_ERR("completer_retry_err"),
    /** Packets dropped because their P_Key is not in the port's table (bad_pkey_cntr of the IB port counters). */
    BAD_PKEY_CNTR("bad_pkey_cntr"),
    /** RoCE packets received with Congestion Experienced in their IP ECN field (mlx5's np_ecn_marked_roce_packets). */
    NP_ECN_MARKED_ROCE_PACKETS("np_ecn_marked_roce_packets"),
    /** Congestion notification packets sent as DCQCN's notification point (mlx5's np_cnp_sent). */
    NP_CNP_SENT("np_cnp_sent"),
    /** Congestion notification packets that cut a queue pair's rate, DCQCN's reaction point (mlx5's rp_cnp_handled). */
    RP_CNP_HANDLED("rp_cnp_handled"),
    /** Congestion notification packets received while no rate controller reacts to them (mlx5's rp_cnp_ignored). */
    RP_CNP_IGNORED("rp_cnp_ignored"),
    /** Packets the host refused to send, e.g. dropped by a firewall rule on the way out (rxe's send_err). */
    SEND_ERR("send_err"),
    /**
     * Queue pairs of a RoCEv2 device that send from the device's own UDP port because their flow-label source port
     * could not be bound (another program holds it).
     */
    UDP_SPORT_FALLBACK("udp_sport_fallback");

    private final String linuxName;

    Counter(String linuxName) {
        this.linuxName = linuxName;
    }

    /** The Linux counter name. */
    public String linuxName() {
        return linuxName;
    }
}
