/**
 * The roce provider: RDMA's own wire protocol, RoCEv2 (InfiniBand transport headers in UDP datagrams to port 4791),
 * implemented in userspace Java so that it runs on any IP network without RDMA hardware or kernel modules. Device
 * {@code roce0}, registered through {@link java.util.ServiceLoader} only. The wire format lives in {@link
 * io.jccl.transport.roce.wire}; {@code RoceContext} (one UDP socket, a receive and a timer thread) and
 * {@code RoceQueuePair} (requester, completer and responder of a reliable connection, after rxe) the data path.
 * Status and plan: {@code docs/transport-roce.md}.
 */
package io.jccl.transport.roce;
