package io.jccl.transport.roce;

import io.jccl.verbs.Context;
import io.jccl.verbs.Device;
import io.jccl.verbs.LinkLayer;
import io.jccl.verbs.Reach;
import io.jccl.verbs.VerbsException;

import java.nio.file.Files;
import java.nio.file.Path;

/**
 * The {@code roce0} device: a RoCEv2 endpoint on UDP. Opening it binds one datagram socket
 * ({@code JCCL_ROCE_ADDRESS}:{@code JCCL_ROCE_PORT}) and starts its receive and timer threads. Reliable connected
 * queue pairs as rxe: SEND/RECV, RDMA WRITE and READ, atomics, go-back-N loss recovery, RNR retry, P_Keys: see
 * {@code docs/transport-roce.md}.
 */
public final class RoceDevice implements Device {
    /** The device name. */
    public static final String NAME = "roce0";

    private final long guid;

    RoceDevice() {
        long g;
        try {
            // Not InetAddress.getLocalHost(): listing devices must never wait for a DNS lookup.
            g = Files.readString(Path.of("/proc/sys/kernel/hostname")).trim().hashCode();
        } catch (Exception e) {
            g = 0x726f6365;
        }
        // A stable, host-specific GUID in the locally administered range (no vendor OUI), distinct from tcp0's.
        guid = 0x0200_0000_0000_0000L | ((g & 0xFFFF_FFFFL) << 16) | 0x7230;
    }

    @Override
    public String name() {
        return NAME;
    }

    @Override
    public String providerName() {
        return RoceProvider.NAME;
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

    /**
     * Opens a context with the settings of the environment ({@link RoceSettings#fromConfig()}).
     *
     * @throws IllegalArgumentException for a malformed setting
     * @throws io.jccl.verbs.VerbsException when the socket cannot be bound
     */
    @Override
    public Context open() {
        return open(RoceSettings.fromConfig());
    }

    /**
     * Opens a context on a free port (the environment's other settings): what {@code jccl devinfo} shows does not
     * depend on the port, and the configured one (4791 by default) may be held by a running job or by rxe.
     */
    @Override
    public Context openToQuery() {
        return open(RoceSettings.fromConfig().withPort(0));
    }

    /**
     * Opens a context for peers within {@code peers}. For peers on other hosts ({@link Reach#NETWORK}: a collective
     * whose ranks span hosts) a loopback {@code JCCL_ROCE_ADDRESS} (the default, 127.0.0.1) is refused with the
     * reason instead of opened: every packet a peer sent to it would go to the peer's own loopback and the job would
     * hang until its timeout. The caller records the reason (a communicator logs it at INFO and uses its next device).
     *
     * @throws VerbsException (CONNECTION) for a loopback address with peers on other hosts
     */
    @Override
    public Context open(Reach peers) {
        RoceSettings settings = RoceSettings.fromConfig();
        if (peers == Reach.NETWORK && settings.inetAddress().isLoopbackAddress()) {
            throw new VerbsException(VerbsException.Reason.CONNECTION, NAME
                + " is bound to " + settings.address() + " (" + RoceSettings.ADDRESS_ENV + "), which peers on other"
                + " hosts cannot reach: set " + RoceSettings.ADDRESS_ENV + " to this host's address on their network");
        }
        return open(settings);
    }

    /** Opens a context with {@code settings}. */
    public Context open(RoceSettings settings) {
        return new RoceContext(this, settings);
    }
}
