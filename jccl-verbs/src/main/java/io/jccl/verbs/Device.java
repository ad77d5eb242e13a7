package io.jccl.verbs;

/** A device of some provider ({@code struct ibv_device}). */
public interface Device {
    /** Device name, unique on this host (for example {@code shm0}, {@code tcp0}). */
    String name();

    /** The provider that serves the device. */
    String providerName();

    /** Node GUID. */
    long guid();

    /** What the device's ports are attached to; known without opening the device. */
    LinkLayer linkLayer();

    /**
     * Which peers its queue pairs can connect to; known without opening the device (a collective decides from it
     * which device serves each peer, and which devices it needs to open at all).
     */
    Reach reach();

    /** Opens the device. */
    Context open();

    /**
     * Opens the device for queue pairs that will only connect to peers within {@code peers}: a network device may
     * then listen where only such peers reach it (tcp0 binds loopback for {@link Reach#HOST} unless an address or
     * interface is configured). By default the same as {@link #open()}.
     */
    default Context open(Reach peers) {
        return open();
    }

    /**
     * Opens the device only to query it, as {@code ibv_devinfo} does: a network device need not take the port it
     * is configured to receive on, which a running job (or the kernel's rxe, for UDP 4791) may hold. By default
     * the same as {@link #open()}.
     */
    default Context openToQuery() {
        return open();
    }
}
