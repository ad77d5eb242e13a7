package io.jccl.services.transfer;

/**
 * Direction of one transfer (Mooncake's {@code TransferRequest::OpCode}, NIXL's {@code NIXL_READ}/{@code NIXL_WRITE}).
 */
public enum TransferOpcode {
    /** Copy bytes of the remote segment into the local segment (RDMA READ). */
    READ,
    /** Copy bytes of the local segment into the remote segment (RDMA WRITE). */
    WRITE
}
