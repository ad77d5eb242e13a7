package io.jccl.verbs;

/** Atomic guarantees of a device, as {@code enum ibv_atomic_cap}. */
public enum AtomicCapability {
    /** No atomics. */
    ATOMIC_NONE,
    /** Atomic only among operations arriving through this device (HCA). */
    ATOMIC_HCA,
    /** Atomic against every access, including CPU atomics on the memory (GLOB). */
    ATOMIC_GLOB
}
