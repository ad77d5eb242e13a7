package io.jccl.verbs;

import java.lang.foreign.MemorySegment;

/**
 * A protection domain ({@code struct ibv_pd}): memory regions and queue pairs of one domain can only be used
 * together. A domain per peer (or per tenant) is the isolation ReDMArk recommends.
 */
public interface ProtectionDomain extends AutoCloseable {
    /** The context the domain belongs to. */
    Context context();

    /**
     * Allocates {@code length} bytes of zeroed off-heap memory that the provider can share with peers without
     * copies (for shm, a file under /dev/shm mapped into this process), and registers it.
     *
     * @param length bytes, at least 1 and at most the device's max_mr_size
     * @param access access rights; REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE
     */
    MemoryRegion allocateMemory(long length, AccessFlag... access);

    /**
     * Registers existing off-heap memory. Heap arrays are refused, because the garbage collector moves them: use
     * {@link #allocateMemory} or an off-heap segment from an {@link java.lang.foreign.Arena} instead.
     * The caller keeps ownership: the segment must stay alive until the region is closed. Segments of confined
     * arenas are accepted (the provider's own threads reach the bytes through a view of the same memory); once the
     * caller's arena is closed the region's keys are refused like deregistered ones, but closing the arena while a
     * request is in flight is a use-after-free, as freeing registered memory is with libibverbs.
     */
    MemoryRegion registerMemory(MemorySegment segment, AccessFlag... access);

    /** Creates a reliable-connected queue pair in the RESET state. */
    QueuePair createQueuePair(QueuePairInitAttributes attributes);

    /** Destroys the domain; fails if regions or queue pairs still use it, as ibv_dealloc_pd does (EBUSY). */
    @Override
    void close();
}
