package io.jccl.verbs;

import io.jccl.verbs.spi.VerbsProvider;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.ServiceLoader;
import java.util.stream.Collectors;

/** Entry point: lists the devices of every provider on this host ({@code ibv_get_device_list}). */
public final class Verbs {
    private static volatile List<VerbsProvider> providers;

    private Verbs() {
    }

    /** Every provider found on the class path, in their {@link VerbsProvider#order()}. */
    public static List<VerbsProvider> providers() {
        List<VerbsProvider> loaded = providers;
        if (loaded == null) {
            synchronized (Verbs.class) {
                loaded = providers;
                if (loaded == null) {
                    List<VerbsProvider> found = new ArrayList<>();
                    ServiceLoader.load(VerbsProvider.class, Verbs.class.getClassLoader()).forEach(found::add);
                    found.sort(Comparator.comparingInt(VerbsProvider::order).thenComparing(VerbsProvider::name));
                    loaded = List.copyOf(found);
                    providers = loaded;
                }
            }
        }
        return loaded;
    }

    /** The devices of every provider. */
    public static List<Device> devices() {
        List<Device> devices = new ArrayList<>();
        for (VerbsProvider provider : providers()) {
            devices.addAll(provider.devices());
        }
        return devices;
    }

    /**
     * The device called {@code name}, or the first device of the provider called {@code name}.
     *
     * @throws VerbsException INVALID_ARGUMENT naming the devices that exist when there is no such device
     */
    public static Device device(String name) {
        List<Device> all = devices();
        for (Device device : all) {
            if (device.name().equals(name)) {
                return device;
            }
        }
        for (Device device : all) {
            if (device.providerName().equals(name)) {
                return device;
            }
        }
        throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT, "no device or provider called '" + name
            + "'; devices on this host: " + all.stream().map(d -> d.name() + " (" + d.providerName() + ")")
            .collect(Collectors.joining(", ")) + (all.isEmpty() ? "none (is a provider jar on the class path?)" : ""));
    }
}
