package io.jccl.verbs;

/**
 * Port attributes ({@code struct ibv_port_attr}), as ibv_devinfo prints them.
 *
 * @param portNumber 1-based port number
 * @param state port state
 * @param maxMtu largest MTU the port supports
 * @param activeMtu MTU in use
 * @param linkLayer {@code Ethernet}, {@code InfiniBand} or, for the host-local shm provider, {@code Memory}
 * @param maxMessageSize largest message in bytes
 * @param gid the port's address as text (an IP address, or a host identity for shm)
 */
public record PortAttributes(int portNumber, PortState state, PathMtu maxMtu, PathMtu activeMtu, String linkLayer,
                             long maxMessageSize, String gid) {
}
