package io.jccl.collectives;

import java.util.ArrayList;
import java.util.List;

/**
 * An always-on record of the last {@link #capacity()} operations of one rank: sequence number, operation, count,
 * type, operator, root or peer, algorithm, state and timing. Recording writes preallocated arrays (no allocation).
 * It is dumped to the log on timeout, abort and error, and can be read with {@link #dump()} at any time.
 */
public final class FlightRecorder {
    /** State of a recorded operation. */
    public enum State { ISSUED, RUNNING, COMPLETED, FAILED }

    private final int capacity;
    private final long[] seq;
    private final Collective[] op;
    private final long[] count;
    private final DataType[] type;
    private final ReduceOp[] redop;
    private final int[] peer;
    private final String[] algorithm;
    private final State[] state;
    private final long[] issuedNs;
    private final long[] startedNs;
    private final long[] endedNs;
    private final String[] detail;
    private long next;
    private final long originNs = System.nanoTime();

    /** A recorder of the last {@code capacity} operations. */
    public FlightRecorder(int capacity) {
        this.capacity = Math.max(1, capacity);
        seq = new long[this.capacity];
        op = new Collective[this.capacity];
        count = new long[this.capacity];
        type = new DataType[this.capacity];
        redop = new ReduceOp[this.capacity];
        peer = new int[this.capacity];
        algorithm = new String[this.capacity];
        state = new State[this.capacity];
        issuedNs = new long[this.capacity];
        startedNs = new long[this.capacity];
        endedNs = new long[this.capacity];
        detail = new String[this.capacity];
    }

    /** How many operations are kept. */
    public int capacity() {
        return capacity;
    }

    /** Records a newly issued operation and returns its slot handle. */
    public synchronized long issue(long sequence, Collective collective, long elements, DataType dataType,
                                   ReduceOp reduceOp, int rootOrPeer) {
        long handle = next++;
        fill((int) (handle % capacity), sequence, collective, elements, dataType, reduceOp, rootOrPeer, null,
            State.ISSUED, System.nanoTime(), 0);
        return handle;
    }

    /**
     * Records an operation that starts running now with {@code algo} ({@link #issue} + {@link #start} in one, with the
     * caller's clock reading, or 0: untimed until {@link #timeFrom}) and returns its slot handle. No lock: the
     * communicator calls it only from the thread holding its turn, so writers never overlap; a concurrent {@link
     * #dump()} may show that one entry half-written.
     */
    long begin(long sequence, Collective collective, long elements, DataType dataType, ReduceOp reduceOp,
               int rootOrPeer, String algo, long nowNs) {
        long handle = next;
        fill((int) (handle % capacity), sequence, collective, elements, dataType, reduceOp, rootOrPeer, algo,
            State.RUNNING, nowNs, nowNs);
        next = handle + 1;
        return handle;
    }

    /** Writes one entry (an operation issued at {@code issuedAtNs}, started at {@code startedAtNs} or 0). */
    private void fill(int i, long sequence, Collective collective, long elements, DataType dataType,
                      ReduceOp reduceOp, int rootOrPeer, String algo, State newState, long issuedAtNs,
                      long startedAtNs) {
        seq[i] = sequence;
        op[i] = collective;
        count[i] = elements;
        type[i] = dataType;
        redop[i] = reduceOp;
        peer[i] = rootOrPeer;
        algorithm[i] = algo;
        state[i] = newState;
        issuedNs[i] = issuedAtNs;
        startedNs[i] = startedAtNs;
        endedNs[i] = 0;
        detail[i] = null;
    }

    /** Marks the operation running with {@code algo}. */
    public synchronized void start(long handle, String algo) {
        if (next - handle > capacity) {
            return;
        }
        int i = (int) (handle % capacity);
        state[i] = State.RUNNING;
        algorithm[i] = algo;
        startedNs[i] = System.nanoTime();
    }

    /**
     * Starts timing an operation begun untimed ({@link #begin} with a zero clock reading) at {@code nowNs}: its
     * first wait that outlasted the spin. Called by the operation's own thread.
     */
    void timeFrom(long handle, long nowNs) {
        if (handle < 0 || next - handle > capacity) {
            return;
        }
        int i = (int) (handle % capacity);
        if (startedNs[i] == 0) {
            issuedNs[i] = nowNs;
            startedNs[i] = nowNs;
        }
    }

    /**
     * Marks the operation completed or failed (with a short reason), with its end time if it is timed. Called by
     * the operation's own thread.
     */
    public void end(long handle, boolean ok, String reason) {
        if (next - handle > capacity) {
            return;
        }
        int i = (int) (handle % capacity);
        state[i] = ok ? State.COMPLETED : State.FAILED;
        endedNs[i] = startedNs[i] != 0 ? System.nanoTime() : 0;
        detail[i] = reason;
    }

    /** The recorded operations, oldest first, one line each. */
    public synchronized List<String> dump() {
        List<String> lines = new ArrayList<>();
        long first = Math.max(0, next - capacity);
        for (long h = first; h < next; h++) {
            int i = (int) (h % capacity);
            StringBuilder sb = new StringBuilder();
            sb.append("#").append(seq[i]).append(' ').append(op[i].displayName()).append(" count=").append(count[i]);
            if (type[i] != null) {
                sb.append(' ').append(type[i]);
            }
            if (redop[i] != null) {
                sb.append(' ').append(redop[i]);
            }
            if (peer[i] >= 0) {
                sb.append(" root/peer=").append(peer[i]);
            }
            if (algorithm[i] != null) {
                sb.append(" algo=").append(algorithm[i]);
            }
            sb.append(' ').append(state[i]);
            if (issuedNs[i] != 0) {
                sb.append(String.format(" issued=+%.3fms", (issuedNs[i] - originNs) / 1e6));
            } else {
                sb.append(" untimed"); // never waited past the spin: not worth two clock readings (Communicator)
            }
            if (startedNs[i] != 0) {
                long end = endedNs[i] != 0 ? endedNs[i] : System.nanoTime();
                sb.append(String.format(" %s=%.1fus", endedNs[i] != 0 ? "took" : "running", (end - startedNs[i]) / 1e3));
            }
            if (detail[i] != null) {
                sb.append(" (").append(detail[i]).append(')');
            }
            lines.add(sb.toString());
        }
        return lines;
    }
}
