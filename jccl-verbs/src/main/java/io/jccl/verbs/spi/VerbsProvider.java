package io.jccl.verbs.spi;

import io.jccl.verbs.Device;

import java.util.List;

/**
 * A provider of devices, found with {@link java.util.ServiceLoader} (register the implementation in
 * {@code META-INF/services/io.jccl.verbs.spi.VerbsProvider}). Providers depend on the verbs API only.
 */
public interface VerbsProvider {
    /** Short provider name, for example {@code shm}. */
    String name();

    /** The devices this provider offers on this host (may be empty when it cannot run here). */
    List<Device> devices();

    /** Order among providers when listing devices: lower first. */
    default int order() {
        return 100;
    }
}
