package io.jccl.verbs;

/**
 * What a device's ports are attached to ({@code ibv_port_attr.link_layer}, asked of the {@link Device} before it
 * is opened, as NCCL's transports answer {@code canConnect}): collectives choose a device per peer from this, never
 * from its name, so a new provider plugs in without an edit to them.
 */
public enum LinkLayer {
    /** Shared memory of one host: its queue pairs reach only processes of the same host (shm). */
    MEMORY("Memory"),
    /** An Ethernet/IP network (tcp, RoCE): reaches other hosts. */
    ETHERNET("Ethernet"),
    /** An InfiniBand fabric: reaches other hosts. */
    INFINIBAND("InfiniBand");

    private final String displayName;

    LinkLayer(String displayName) {
        this.displayName = displayName;
    }

    /** The name ibv_devinfo prints ({@link PortAttributes#linkLayer()}). */
    public String displayName() {
        return displayName;
    }

    /** Whether queue pairs of such a device can reach other hosts (false: this host only). */
    public boolean reachesOtherHosts() {
        return this != MEMORY;
    }
}
