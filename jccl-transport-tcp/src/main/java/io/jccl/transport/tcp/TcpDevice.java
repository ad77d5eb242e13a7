package io.jccl.transport.tcp;

import io.jccl.verbs.Context;
import io.jccl.verbs.Device;
import io.jccl.verbs.LinkLayer;
import io.jccl.verbs.Reach;

import java.nio.file.Files;
import java.nio.file.Path;

/**
 * The {@code tcp0} device. Opening it selects an interface ({@code JCCL_SOCKET_IFNAME}, {@code JCCL_TCP_ADDRESS}),
 * binds the context's listener and starts its progress threads.
 */
public final class TcpDevice implements Device {
    /** The device name. */
    public static final String NAME = "tcp0";

    private final long guid;

    TcpDevice() {
        long g;
        try {
            // Not InetAddress.getLocalHost(): listing devices must never wait for a DNS lookup.
            g = Files.readString(Path.of("/proc/sys/kernel/hostname")).trim().hashCode();
        } catch (Exception e) {
            g = 0x74637030;
        }
        // A stable, host-specific GUID in the locally administered range (no vendor OUI).
        guid = 0x0200_0000_0000_0000L | ((g & 0xFFFF_FFFFL) << 16) | 0x7430;
    }

    @Override
    public String name() {
        return NAME;
    }

    @Override
    public String providerName() {
        return TcpProvider.NAME;
    }

    @Override
    public long guid() {
        return guid;
    }

    @Override
    public LinkLayer linkLayer() {
        return LinkLayer.ETHERNET;
    }

    @Override
    public Reach reach() {
        return Reach.NETWORK;
    }

    @Override
    public Context open() {
        return open(TcpSettings.fromConfig());
    }

    /**
     * Opens a context for peers within {@code peers}: for peers of this host only ({@link Reach#HOST},
     * {@link Reach#PROCESS}) the listener binds loopback, so a job whose ranks share one host is not reachable from
     * the network, unless {@code JCCL_TCP_ADDRESS} or {@code JCCL_SOCKET_IFNAME} says where to listen.
     */
    @Override
    public Context open(Reach peers) {
        TcpSettings settings = TcpSettings.fromConfig();
        if (peers != Reach.NETWORK && settings.address() == null && settings.interfaces() == null) {
            settings = settings.withAddress("AF_INET6".equals(settings.family()) ? "::1" : "127.0.0.1");
        }
        return open(settings);
    }

    /** Opens a context with explicit settings instead of the environment's. */
    public Context open(TcpSettings settings) {
        return new TcpContext(this, settings);
    }

    @Override
    public String toString() {
        return NAME;
    }
}
