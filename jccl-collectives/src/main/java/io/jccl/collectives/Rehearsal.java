package io.jccl.collectives;

import io.jccl.collectives.store.Store;

import java.util.BitSet;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A rehearsal of the recovery path, once per JVM, on a daemon thread after a communicator's warm-up (as the warm-up
 * runs the collectives before the application does): the agreement ({@link Shrink}) runs once through the
 * communicator's own store, under keys of this rank only ({@code rehearsal/RANK/}), with peers that are "gone", and
 * failure report (exceptions, the JFR event, the flight recorder's dump) is built once and dropped.
 *
 * <p>Why: a recovery runs once per process, so it ran cold, at the moment it matters: its classes loaded, its
 * lambdas and string concatenations linked at first use, the store client's and server's check, wait and
 * compare-and-set paths never run before (a debug run at 8 ranks: ~60 ms of the agreement before the first store
 * answer). Here that happens while the job trains. It costs a few store calls per rank, once per JVM, and no
 * thread afterwards; off with {@code JCCL_WARMUP=0}, like the warm-up.
 */
final class Rehearsal implements Runnable {
    /** Whether this JVM started its rehearsal. */
    private static final AtomicBoolean STARTED = new AtomicBoolean();
    /** Rehearsals run in this JVM, to their end or to a failure (tests read it). */
    static final AtomicInteger RAN = new AtomicInteger();

    private final Store store;
    private final int rank;

    private Rehearsal(Store store, int rank) {
        this.store = store;
        this.rank = rank;
    }

    /**
     * Starts the rehearsal on {@code store} (a communicator's, namespaced) once per JVM, when warm-up is on and there
     * are peers; returns whether it started it now.
     */
    static boolean startOnce(Store store, int rank, int size, long warmupNs) {
        if (warmupNs <= 0 || size == 1 || !STARTED.compareAndSet(false, true)) {
            return false;
        }
        Thread t = new Thread(new Rehearsal(store, rank), "jccl-recovery-rehearsal");
        t.setDaemon(true);
        t.start();
        return true;
    }

    @Override
    public void run() {
        try {
            members(store, rank);
        } catch (RuntimeException e) {
            // only a head start: a real recovery links what it needs itself
        } finally {
            RAN.incrementAndGet();
        }
    }

    /**
     * The rehearsal itself: an agreement of this rank with peers that are all gone (as after kills), under
     * {@code rehearsal/RANK/}, and a wait for its own record; returns the members (this rank only).
     */
    static int[] members(Store store, int rank) {
        long timeoutNs = TimeUnit.SECONDS.toNanos(10);
        int size = rank + 2;
        String prefix = "rehearsal/" + rank + "/";
        Shrink.Decision d = Shrink.decide(store, prefix, rank, size, -1, new BitSet(size), j -> j != rank, timeoutNs,
            System.nanoTime() + timeoutNs);
        store.waitFor(java.util.List.of(prefix + "join/" + rank), timeoutNs);
        failureReport(rank);
        return d.members();
    }

    /**
     * What a failure costs before the application sees it, besides telling the peers (a debug run at 8 ranks, shm0:
     * 43 ms from the failed check to the failure handling, JFR's event 31-82 ms, the flight recorder's dump and its
     * log line 63 ms, all cold): an exception of each kind built, the JFR event prepared (nothing committed), a
     * one-operation flight recorder dumped (its number formatting); returns the dump's lines.
     */
    static int failureReport(int rank) {
        CollectiveException e = new CollectiveException.PeerFailure(rank, "rank " + rank + " rehearses a failure");
        e = new CollectiveException.Revoked(rank, e.getMessage(), "rank " + rank + ": revoked: " + e.getMessage());
        io.jccl.collectives.events.PeerFailureEvent.prepare();
        FlightRecorder recorder = new FlightRecorder(1);
        long handle = recorder.issue(0, Collective.ALL_REDUCE, 2, DataType.FLOAT32, ReduceOp.SUM, -1);
        recorder.start(handle, "rehearsal");
        recorder.end(handle, false, e.getClass().getSimpleName());
        StringBuilder sb = new StringBuilder();
        java.util.List<String> lines = recorder.dump();
        for (String line : lines) {
            sb.append("\n  ").append(line);
        }
        return sb.isEmpty() ? 0 : lines.size();
    }
}
