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
}
