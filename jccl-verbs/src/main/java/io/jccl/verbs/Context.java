package io.jccl.verbs;

import java.util.Map;

/** An open device ({@code struct ibv_context}): the root of protection domains and completion queues. */
public interface Context extends AutoCloseable {
    /** The device this context opened. */
    Device device();

    /** Device and port attributes (ibv_query_device + ibv_query_port). */
    DeviceAttributes query();

    /** Allocates a protection domain. */
    ProtectionDomain allocateProtectionDomain();

    /** Creates a completion queue holding at least {@code capacity} completions. */
    CompletionQueue createCompletionQueue(int capacity);

    /** A snapshot of this context's counters. */
    Map<Counter, Long> counters();

    /**
     * A share of this context's counters for one writer that moves data without work requests (see
     * {@link CounterShare}); contexts that keep no counters return {@link CounterShare#NONE}.
     */
    default CounterShare openCounterShare() {
        return CounterShare.NONE;
    }

    /** Closes the context and everything created from it that is still open. */
    @Override
    void close();
}
