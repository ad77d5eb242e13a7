package io.jccl.collectives;

import io.jccl.verbs.Counter;
import io.jccl.verbs.CounterShare;

/**
 * A communicator's operation counters: per {@link Collective}, the operations that completed, their bytes
 * (nccl-tests' size, as {@link Communicator} prices them) and the operations that failed. Read them with
 * {@link Communicator#statistics()}; {@code jccl-micrometer} binds them to Micrometer.
 *
 * <p>Cheap by design: plain {@code long} fields written only by the thread holding the communicator's turn (one
 * operation at a time), read racily by monitoring threads, which may see a value a little behind (never torn on a
 * 64-bit JVM). No atomic instruction and no allocation on the operation's path.
 *
 * <p>Direct-path operations also count into the device's counters ({@link Counter#PORT_XMIT_DATA} and the rest,
 * what {@code jccl devinfo -v --pid} shows): loads and stores on mapped memory post no work request that the
 * provider could count. Each rank adds the operation's bus bytes (nccl-tests': what a bandwidth-optimal algorithm
 * moves per rank in each direction, 2(n-1)/n of the size for all-reduce) to both data counters, and one to both
 * packet counters.
 */
public final class CollectiveStatistics {
    private static final int KINDS = Collective.values().length;

    private final long[] operations = new long[KINDS];
    private final long[] bytes = new long[KINDS];
    private final long[] errors = new long[KINDS];
    private long directOperations;
    /** The direct path's device counters and the world size that prices bus bytes; NONE without a direct path. */
    private CounterShare direct = CounterShare.NONE;
    private int size = 1;

    CollectiveStatistics() {
    }

    /** Operations of {@code collective} that completed on this rank. */
    public long operations(Collective collective) {
        return operations[collective.ordinal()];
    }

    /** Bytes (nccl-tests' size) of the operations of {@code collective} that completed on this rank. */
    public long bytes(Collective collective) {
        return bytes[collective.ordinal()];
    }

    /** Operations of {@code collective} that failed on this rank. */
    public long errors(Collective collective) {
        return errors[collective.ordinal()];
    }

    /** Operations that ran over the direct path (and were counted into the device's counters). */
    public long directOperations() {
        return directOperations;
    }

    /** Counts direct-path operations into {@code share} (the direct path's device) for {@code size} ranks. */
    void countDirectInto(CounterShare share, int size) {
        this.direct = share;
        this.size = size;
    }

    /** Stops counting into the device (closes the share: the device closes next). */
    void closeDirect() {
        CounterShare d = direct;
        direct = CounterShare.NONE;
        d.close();
    }

    /** An operation of {@code c} of {@code length} bytes completed; {@code onDirectPath} when it ran there. */
    void completed(Collective c, long length, boolean onDirectPath) {
        int i = c.ordinal();
        operations[i]++;
        bytes[i] += length;
        if (onDirectPath && size > 1) {
            directOperations++;
            long bus = busBytes(c, length, size);
            CounterShare d = direct;
            d.add(Counter.PORT_XMIT_DATA, bus);
            d.add(Counter.PORT_RCV_DATA, bus);
            d.add(Counter.PORT_XMIT_PACKETS, 1);
            d.add(Counter.PORT_RCV_PACKETS, 1);
        }
    }

    /** An operation of {@code c} failed. */
    void failed(Collective c) {
        errors[c.ordinal()]++;
    }

    /**
     * nccl-tests' bus bytes of an operation of {@code length} bytes among {@code n} ranks: 2(n-1)/n of it for
     * all-reduce, (n-1)/n for the gather family and all-to-all, all of it for broadcast and reduce, none for a
     * barrier. Computed without overflow for any length.
     */
    static long busBytes(Collective c, long length, int n) {
        return switch (c) {
            case ALL_REDUCE -> scale(length, 2L * (n - 1), n);
            case ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, GATHER, SCATTER -> scale(length, n - 1, n);
            case BROADCAST, REDUCE, SEND_RECV, WINDOW -> length;
            case BARRIER -> 0;
        };
    }

    /** {@code length × num / den} for {@code num < 2 den}, without overflowing {@code length × num}. */
    private static long scale(long length, long num, int den) {
        return length / den * num + length % den * num / den;
    }
}
