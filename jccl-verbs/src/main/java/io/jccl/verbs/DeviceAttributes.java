package io.jccl.verbs;

import java.util.List;

/**
 * Device attributes ({@code struct ibv_device_attr}) with its ports, as {@code ibv_devinfo -v} reports them.
 *
 * @param deviceName device name (hca_id)
 * @param providerName provider that serves it
 * @param transport transport text as ibv_devinfo prints it
 * @param firmwareVersion fw_ver
 * @param nodeGuid node GUID (64 bits)
 * @param vendorId vendor_id
 * @param vendorPartId vendor_part_id
 * @param hardwareVersion hw_ver
 * @param maxMemoryRegionSize max_mr_size in bytes
 * @param pageSizeCapability page_size_cap
 * @param maxQueuePairs max_qp
 * @param maxQueuePairWorkRequests max_qp_wr
 * @param maxSge max_sge
 * @param maxCompletionQueues max_cq
 * @param maxCompletionQueueEntries max_cqe
 * @param maxMemoryRegions max_mr
 * @param maxProtectionDomains max_pd
 * @param maxQueuePairReadAtomic max_qp_rd_atom
 * @param maxQueuePairInitiatorReadAtomic max_qp_init_rd_atom
 * @param maxInlineData largest inline payload
 * @param atomicCapability atomic_cap
 * @param ports the ports
 */
public record DeviceAttributes(String deviceName, String providerName, String transport, String firmwareVersion,
                               long nodeGuid, int vendorId, int vendorPartId, int hardwareVersion,
                               long maxMemoryRegionSize, long pageSizeCapability, int maxQueuePairs,
                               int maxQueuePairWorkRequests, int maxSge, int maxCompletionQueues,
                               int maxCompletionQueueEntries, int maxMemoryRegions, int maxProtectionDomains,
                               int maxQueuePairReadAtomic, int maxQueuePairInitiatorReadAtomic, int maxInlineData,
                               AtomicCapability atomicCapability, List<PortAttributes> ports) {
    /** Copies the port list. */
    public DeviceAttributes {
        ports = List.copyOf(ports);
    }

    /** The largest message the first port accepts. */
    public long maxMessageSize() {
        return ports.getFirst().maxMessageSize();
    }
}
