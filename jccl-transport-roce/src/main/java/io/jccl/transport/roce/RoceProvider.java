package io.jccl.transport.roce;

import io.jccl.verbs.Device;
import io.jccl.verbs.spi.VerbsProvider;

import java.util.List;

/**
 * The {@code roce} provider: one device, {@code roce0}. Registered through
 * {@code META-INF/services/io.jccl.verbs.spi.VerbsProvider} only; it is not one of the devices a communicator uses
 * when none is named ({@link io.jccl.verbs.Verbs#defaultDeviceNames()}): a program selects it with
 * {@code JCCL_TRANSPORT=roce0}.
 */
public final class RoceProvider implements VerbsProvider {
    /** The provider name. */
    public static final String NAME = "roce";

    private static final RoceDevice DEVICE = new RoceDevice();

    /** Used by ServiceLoader. */
    public RoceProvider() {
    }

    @Override
    public String name() {
        return NAME;
    }

    @Override
    public List<Device> devices() {
        return List.of(DEVICE);
    }

    /** After shm (10) and tcp (20): listing order only, roce0 is never picked by default. */
    @Override
    public int order() {
        return 30;
    }

    /** The {@code roce0} device. */
    public static RoceDevice device() {
        return DEVICE;
    }
}
