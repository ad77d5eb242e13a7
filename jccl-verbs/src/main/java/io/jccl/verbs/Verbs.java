package io.jccl.verbs;

import io.jccl.common.BackgroundLinking;
import io.jccl.verbs.spi.VerbsProvider;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.ServiceLoader;
import java.util.concurrent.ConcurrentHashMap;
import java.util.stream.Collectors;

/**
 * Entry point: lists the devices of every provider on this host ({@code ibv_get_device_list}).
 *
 * <p>Providers are found with {@link ServiceLoader}. That scan reads the service file of every jar on the class
 * path (opening jars nothing else needs) and costs tens of milliseconds at start-up, so {@link #device(String)}
 * first tries the provider JCCL ships under the device's name prefix ({@code shm0} → the shm provider), loaded by
 * class name, and scans only when that does not find the device. One instance per provider class either way.
 */
public final class Verbs {
    /** Provider name prefix → class of the providers in this project (tried before a scan). */
    private static final Map<String, String> BUILT_IN = Map.of(
        "shm", "io.jccl.transport.shm.ShmProvider",
        "tcp", "io.jccl.transport.tcp.TcpProvider");
    /** The first devices of the providers this project ships, in their provider order (shm before tcp). */
    private static final List<String> DEFAULT_DEVICES = List.of("shm0", "tcp0");
    /** Providers created by class name (and reused by the scan), by class name. */
    private static final Map<String, VerbsProvider> BY_CLASS = new ConcurrentHashMap<>();
    private static volatile List<VerbsProvider> providers;
    /** Whether the other built-in providers were scheduled to load (once per JVM, see {@link #loadOthersLater}). */
    private static volatile boolean othersScheduled;

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
                    ServiceLoader.load(VerbsProvider.class, Verbs.class.getClassLoader()).stream().forEach(p ->
                        found.add(BY_CLASS.computeIfAbsent(p.type().getName(), k -> p.get())));
                    found.sort(Comparator.comparingInt(VerbsProvider::order).thenComparing(VerbsProvider::name));
                    loaded = List.copyOf(found);
                    providers = loaded;
                }
            }
        }
        return loaded;
    }

    /** The device from the built-in provider whose name prefixes {@code name}, or null (then: scan). */
    private static Device builtInDevice(String name) {
        if (providers != null) {
            return null; // scanned already: the list answers as fast
        }
        for (Map.Entry<String, String> e : BUILT_IN.entrySet()) {
            if (!name.startsWith(e.getKey())) {
                continue;
            }
            VerbsProvider provider = builtIn(e.getValue());
            if (provider == null) {
                return null;
            }
            for (Device device : provider.devices()) {
                if (device.name().equals(name)) {
                    return device;
                }
            }
            if (provider.name().equals(name) && !provider.devices().isEmpty()) {
                return provider.devices().getFirst();
            }
        }
        return null;
    }

    /**
     * Loads the built-in providers that {@link #device} skipped, once per JVM, on a daemon thread after the start-up
     * burst ({@link BackgroundLinking}): a provider's constructor may keep the host clean for everyone (the shm
     * provider removes the files of killed processes), and a job that uses only {@code tcp0} would otherwise never
     * load it. Loading is by class name, without the class-path scan; no device is opened.
     */
    private static void loadOthersLater() {
        if (othersScheduled) {
            return;
        }
        synchronized (Verbs.class) {
            if (othersScheduled) {
                return;
            }
            othersScheduled = true;
        }
        BackgroundLinking.start("jccl-providers", new LoadBuiltIns());
    }

    /** {@link #loadOthersLater}'s task (a named class: a lambda would be spun into a class at start-up). */
    private static final class LoadBuiltIns implements Runnable {
        @Override
        public void run() {
            for (String className : BUILT_IN.values()) {
                builtIn(className);
            }
        }
    }

    private static VerbsProvider builtIn(String className) {
        VerbsProvider known = BY_CLASS.get(className);
        if (known != null) {
            return known;
        }
        try {
            Class<?> type = Class.forName(className, true, Verbs.class.getClassLoader());
            if (!VerbsProvider.class.isAssignableFrom(type)) {
                return null;
            }
            VerbsProvider created = (VerbsProvider) type.getDeclaredConstructor().newInstance();
            VerbsProvider raced = BY_CLASS.putIfAbsent(className, created);
            return raced != null ? raced : created;
        } catch (ReflectiveOperationException | LinkageError | RuntimeException e) {
            return null; // not on the class path (or broken): the scan decides
        }
    }

    /**
     * The devices a program uses when it names none (a communicator without JCCL_TRANSPORT): the first device of each
     * provider JCCL ships, in provider order, known without scanning the class path (that scan costs tens of
     * milliseconds of start-up). A plug-in provider's devices are used when named.
     */
    public static List<String> defaultDeviceNames() {
        return DEFAULT_DEVICES;
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
        Device quick = builtInDevice(name);
        if (quick != null) {
            loadOthersLater();
            return quick;
        }
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
