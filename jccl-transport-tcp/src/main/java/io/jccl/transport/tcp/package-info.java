/**
 * The tcp provider: RDMA verbs semantics between hosts over plain TCP, iWARP-style. One device, {@code tcp0};
 * one connection per connected queue pair; a responder in the target process executes one-sided requests
 * straight against registered memory. Protocol, threads, flow control, errors, security and the network-namespace
 * test bed are described in {@code docs/transport-tcp.md}.
 */
package io.jccl.transport.tcp;
