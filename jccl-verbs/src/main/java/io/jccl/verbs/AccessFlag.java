package io.jccl.verbs;

import java.util.Set;

/**
 * Memory-region and queue-pair access rights, with the bit values of {@code enum ibv_access_flags}.
 *
 * <p>As the InfiniBand specification requires, {@link #REMOTE_WRITE} and {@link #REMOTE_ATOMIC} are only valid
 * together with {@link #LOCAL_WRITE}: the remote side may change memory only if the local side may.
 */
public enum AccessFlag {
    /** The local side may write the memory (receive buffers, READ and atomic result buffers). */
    LOCAL_WRITE(1),
    /** Remote peers may RDMA WRITE into the memory. */
    REMOTE_WRITE(2),
    /** Remote peers may RDMA READ the memory. */
    REMOTE_READ(4),
    /** Remote peers may run atomic operations on the memory. */
    REMOTE_ATOMIC(8);

    private final int bit;

    AccessFlag(int bit) {
        this.bit = bit;
    }

    /** The libibverbs bit value of this flag. */
    public int bit() {
        return bit;
    }

    /** Packs flags into an ibv_access_flags bit mask. */
    public static int toMask(AccessFlag... flags) {
        int mask = 0;
        for (AccessFlag flag : flags) {
            mask |= flag.bit;
        }
        return mask;
    }

    /** Packs flags into an ibv_access_flags bit mask. */
    public static int toMask(Set<AccessFlag> flags) {
        int mask = 0;
        for (AccessFlag flag : flags) {
            mask |= flag.bit;
        }
        return mask;
    }

    /** Whether {@code mask} contains this flag. */
    public boolean isSetIn(int mask) {
        return (mask & bit) != 0;
    }

    /**
     * Checks the rule that remote write and remote atomic access need local write access.
     *
     * @throws VerbsException with {@link VerbsException.Reason#INVALID_ARGUMENT} when the rule is broken
     */
    public static void validate(int mask) {
        if ((mask & ~0xF) != 0) {
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT,
                "unknown access flag bits 0x" + Integer.toHexString(mask & ~0xF));
        }
        if ((mask & (REMOTE_WRITE.bit | REMOTE_ATOMIC.bit)) != 0 && (mask & LOCAL_WRITE.bit) == 0) {
            throw new VerbsException(VerbsException.Reason.INVALID_ARGUMENT,
                "REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE (InfiniBand spec, as ibv_reg_mr enforces)");
        }
    }

    /** Human-readable list, for example {@code LOCAL_WRITE|REMOTE_READ}. */
    public static String describe(int mask) {
        StringBuilder sb = new StringBuilder();
        for (AccessFlag flag : values()) {
            if (flag.isSetIn(mask)) {
                if (!sb.isEmpty()) {
                    sb.append('|');
                }
                sb.append(flag.name());
            }
        }
        return sb.isEmpty() ? "none" : sb.toString();
    }
}
