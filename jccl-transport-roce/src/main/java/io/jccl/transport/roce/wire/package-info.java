/**
 * RoCEv2 wire format, bit-compatible with the Linux kernel's SoftRoCE (rxe): flyweights over a {@link
 * java.nio.ByteBuffer} for the InfiniBand base transport header ({@link io.jccl.transport.roce.wire.BthFlyweight})
 * and its extension headers (RETH, AETH, AtomicETH, AtomicAckETH, ImmDt), the RC opcode table with each opcode's
 * header layout ({@link io.jccl.transport.roce.wire.RoceOpcode}), segmentation of a message by the path MTU
 * ({@link io.jccl.transport.roce.wire.MessageSegmenter}), 24-bit PSN arithmetic ({@link
 * io.jccl.transport.roce.wire.Psn}), the invariant CRC ({@link io.jccl.transport.roce.wire.Icrc}) and the UDP
 * source port derived from the flow label ({@link io.jccl.transport.roce.wire.UdpSourcePort}). Nothing here
 * allocates per packet: a flyweight is wrapped around a buffer and reused. See {@code docs/transport-roce.md}.
 */
package io.jccl.transport.roce.wire;
