package io.jccl.transport.roce;

import io.jccl.verbs.Context;
import io.jccl.verbs.Device;
import io.jccl.verbs.LinkLayer;
import io.jccl.verbs.Reach;
import io.jccl.verbs.VerbsException;

import java.nio.file.Files;
import java.nio.file.Path;

/**
 * The {@code roce0} device: a RoCEv2 endpoint on UDP ({@link RoceSettings#port()}, 4791 by default). Its wire format
 * is complete ({@link io.jccl.transport.roce.wire}); its data path (contexts, queue pairs, the progress engine) is
 * not written yet, so {@link #open()} validates the settings and then refuses with {@link
 * VerbsException.Reason#UNSUPPORTED} and a message that says so, rather than handing out a context that would
 * drop work requests.
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
     * Reads and validates the settings ({@code JCCL_ROCE_PORT}, {@code JCCL_ROCE_MTU}), then refuses: the data path
     * does not exist yet.
     *
     * @throws IllegalArgumentException for a malformed setting
     * @throws VerbsException with reason {@link VerbsException.Reason#UNSUPPORTED}
     */
    @Override
    public Context open() {
        RoceSettings settings = RoceSettings.fromConfig();
        throw new VerbsException(VerbsException.Reason.UNSUPPORTED, NAME + " (UDP port " + settings.port()
            + ", path MTU " + settings.pathMtuBytes() + "): the RoCEv2 wire format is implemented but the data path"
            + " (queue pairs over UDP) is not yet; use tcp0 or shm0 (see docs/transport-roce.md)");
    }
}
