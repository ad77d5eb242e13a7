package io.jccl.verbs;

import java.lang.foreign.MemorySegment;

/**
 * Registered memory ({@code struct ibv_mr}): off-heap bytes with a local key for this side's work requests and a
 * remote key that peers present in one-sided requests. Keys are unpredictable (drawn from a CSPRNG, never
 * sequential). {@link #close()} deregisters: from then on both keys are refused, locally and at the responder.
 */
public interface MemoryRegion extends AutoCloseable {
    /** The registered memory. Valid until {@link #close()} (for memory the provider allocated). */
    MemorySegment segment();

    /** Native address of the first byte; remote peers name bytes by this address plus an offset. */
    long address();

    /** Length in bytes. */
    long length();

    /** Local key, for scatter/gather entries. */
    int lkey();

    /** Remote key, for peers' one-sided requests. */
    int rkey();

    /** The {@link AccessFlag} mask. */
    int access();

    /** The protection domain the region belongs to. */
    ProtectionDomain protectionDomain();

    /** Whether the region is still registered. */
    boolean isValid();

    /** Deregisters the region (idempotent). Memory the provider allocated is released. */
    @Override
    void close();
}
