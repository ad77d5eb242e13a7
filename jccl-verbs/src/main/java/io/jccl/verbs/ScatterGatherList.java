package io.jccl.verbs;

/**
 * A fixed-capacity scatter/gather list shared by send and receive work requests. The entries are allocated once;
 * {@link #setSgeCount(int)} says how many are in use, so a request can be re-posted with different lists without
 * allocating.
 */
public class ScatterGatherList {
    /** Entries a list holds unless asked for more; libibverbs devices commonly allow 4 to 32. */
    public static final int DEFAULT_CAPACITY = 4;

    private final ScatterGatherElement[] elements;
    private int count;

    ScatterGatherList(int capacity) {
        if (capacity < 1) {
            throw new IllegalArgumentException("scatter/gather capacity must be at least 1");
        }
        elements = new ScatterGatherElement[capacity];
        for (int i = 0; i < capacity; i++) {
            elements[i] = new ScatterGatherElement();
        }
    }

    /** The i-th entry (0-based), for filling in. */
    public ScatterGatherElement sge(int index) {
        return elements[index];
    }

    /** How many entries are in use. */
    public int sgeCount() {
        return count;
    }

    /** Sets how many entries are in use. */
    public void setSgeCount(int count) {
        if (count < 0 || count > elements.length) {
            throw new IllegalArgumentException("sge count " + count + " outside 0.." + elements.length);
        }
        this.count = count;
    }

    /** How many entries the list can hold. */
    public int sgeCapacity() {
        return elements.length;
    }

    /** Sum of the lengths of the entries in use. */
    public long totalLength() {
        long total = 0;
        for (int i = 0; i < count; i++) {
            total += elements[i].length();
        }
        return total;
    }

    /** Convenience: a single entry covering {@code length} bytes at {@code offset} within {@code region}. */
    protected void single(MemoryRegion region, long offset, int length) {
        elements[0].set(region, offset, length);
        count = 1;
    }
}
