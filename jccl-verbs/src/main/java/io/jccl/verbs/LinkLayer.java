package io.jccl.verbs;

/**
 * What a device's ports are attached to ({@code ibv_port_attr.link_layer}), asked of the {@link Device} before it is
 * opened: memory moves at memory speed, a network at network speed, and collectives size their chunks, rendezvous
 * thresholds and cost-model defaults from it (and reach from {@link Reach}), never from the device's name.
 */
public enum LinkLayer {
    /** Memory (shm between the processes of a host, or an in-process provider). */
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

    /** Whether this is a network (Ethernet, InfiniBand), not memory. */
    public boolean isNetwork() {
        return this != MEMORY;
    }
}
