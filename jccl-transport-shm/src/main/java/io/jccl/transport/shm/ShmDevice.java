package io.jccl.transport.shm;

import io.jccl.verbs.Context;
import io.jccl.verbs.Device;
import io.jccl.verbs.LinkLayer;
import io.jccl.verbs.Reach;

/** The shm provider's single device, {@code shm0}: processes of this host, through shared memory. */
public final class ShmDevice implements Device {
    /** The device name. */
    public static final String NAME = "shm0";

    /** The device; {@link ShmProvider} holds the single instance. */
    public ShmDevice() {
    }

    @Override
    public String name() {
        return NAME;
    }

    @Override
    public String providerName() {
        return ShmProvider.NAME;
    }

    @Override
    public long guid() {
        // Stable per host and boot, so tools show the same GUID in every process of the host.
        return ShmFiles.bootId().hashCode() & 0xFFFF_FFFFL | 0x4A43_434C_0000_0000L;
    }

    @Override
    public LinkLayer linkLayer() {
        return LinkLayer.MEMORY;
    }

    @Override
    public Reach reach() {
        return Reach.HOST;
    }

    @Override
    public Context open() {
        return new ShmContext(this);
    }

    @Override
    public String toString() {
        return NAME + " (shm)";
    }
}
