package io.jccl.transport.tcp;

import io.jccl.verbs.Device;
import io.jccl.verbs.spi.VerbsProvider;

import java.util.List;

/**
 * The {@code tcp} provider: verbs semantics between hosts over plain TCP, as iWARP does in hardware. It offers one
 * device, {@code tcp0}; each opened context listens on one socket, and each connected queue pair gets its own TCP
 * connection. Registered through {@code META-INF/services/io.jccl.verbs.spi.VerbsProvider}.
 */
public final class TcpProvider implements VerbsProvider {
    /** The provider name. */
    public static final String NAME = "tcp";

    private static final TcpDevice DEVICE = new TcpDevice();

    /** Used by ServiceLoader. */
    public TcpProvider() {
    }

    @Override
    public String name() {
        return NAME;
    }

    @Override
    public List<Device> devices() {
        return List.of(DEVICE);
    }

    @Override
    public int order() {
        return 20;
    }

    /** The {@code tcp0} device. */
    public static TcpDevice device() {
        return DEVICE;
    }
}
