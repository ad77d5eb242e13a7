package io.jccl.collectives;

import io.jccl.collectives.store.Store;
import io.jccl.collectives.store.StoreException;
import io.jccl.collectives.store.StoreTimeoutException;
import io.jccl.common.Config;
import io.jccl.common.Log;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.BitSet;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.function.IntPredicate;

/**
 * How the survivors of a communicator agree on who is in the shrunk one ({@link Communicator#shrink}), through the
 * old communicator's store, or the first live store of its {@link StoreSuccession} when the store's host died:
 * <ol>
 * <li>each survivor writes its join record, {@code shrinkE/join/RANK} (E: the shrink epoch, counted per
 * communicator, so every survivor's E agrees), with the ranks it knows dead;</li>
 * <li>it waits for the join records of the ranks it does not know to be failed (the failure detector's verdicts,
 * the ranks the caller named, a same-host process found gone while it waits, the ranks the records it read name
 * dead), at most the peer timeout
 * ({@code JCCL_PEER_TIMEOUT}: a rank silent that long is failed, the failure detector's one policy);</li>
 * <li>it proposes the ranks whose records it has seen with a compare-and-set on {@code shrinkE/members} against
 * absence: the first proposal wins, every survivor reads it back (a survivor that finds the decision made stops
 * waiting and takes it). So every survivor gets the same member list, hence the same failed set, even when their
 * failure detectors disagreed; a rank that joins after the decision finds itself left out and fails with
 * {@link CollectiveException.Refused}.</li>
 * </ol>
 * The winning list, in old-rank order, renumbers the survivors. Not on any hot path.
 */
final class Shrink {
    /** Between two looks at the store while waiting (a grow's joiner waiting for an offer). */
    static final long POLL_NS = TimeUnit.MILLISECONDS.toNanos(5);
    /**
     * The longest wait in the store for the awaited join records before this rank looks again (for a decision that
     * another survivor took without a rank this one awaits, a record naming a rank dead, a process gone).
     */
    static final long SLICE_NS = TimeUnit.MILLISECONDS.toNanos(10);

    private Shrink() {
    }

    /** What the survivors agreed on: the members (old ranks, ascending) and the AND of their values. */
    record Decision(int[] members, int value) {
    }

    /**
     * Agrees on the members of shrink {@code epoch} of the {@code size}-rank communicator whose store is
     * {@code store}: returns them (old ranks, ascending). {@code suspected} (changed in place) holds the ranks not
     * waited for; {@code gone} says whether a rank is known dead now (re-asked while waiting).
     */
    static int[] members(Store store, int epoch, int rank, int size, BitSet suspected, IntPredicate gone,
                         long waitNs, long deadlineNs) {
        return decide(store, "shrink" + epoch + "/", rank, size, -1, suspected, gone, waitNs, deadlineNs).members();
    }

    /**
     * The same protocol under {@code prefix}, with a value per rank: the decision also carries the bitwise AND of
     * the members' values ({@link Communicator#agree}).
     */
    static Decision decide(Store store, String prefix, int rank, int size, int value, BitSet suspected,
                           IntPredicate gone, long waitNs, long deadlineNs) {
        try {
            return decideThroughStore(store, prefix, rank, size, value, suspected, gone, waitNs, deadlineNs, null, null,
                null);
        } catch (StoreException e) {
            // the store is a peer too: silent for the peer timeout, it is failed (and with it this recovery)
            throw new CollectiveException("rank " + rank + ": " + prefix + " needs the communicator's store, which"
                + " did not answer within " + TimeUnit.NANOSECONDS.toMillis(waitNs) + " ms (JCCL_PEER_TIMEOUT); its"
                + " host may be the rank that died, which shrink and agree survive only through standby stores (a"
                + " fromEnvironment job with JCCL's TCP store and JCCL_STANDBY_STORES > 0; docs/fault-tolerance.md)"
                + ": " + e.getMessage(), e);
        }
    }

    /**
     * The protocol on one store of a {@link StoreSuccession}: a {@link StoreException} (the store did not answer)
     * propagates, so that the caller moves on to the next store; null when {@code movedAbove} said, just before this
     * rank would propose, that survivors gather on a later store of the succession (this rank then joins them there).
     */
    static Decision decideOrMove(Store store, String prefix, int rank, int size, int value, BitSet suspected,
                                 IntPredicate gone, long waitNs, long deadlineNs, BooleanSupplier movedAbove) {
        return decideThroughStore(store, prefix, rank, size, value, suspected, gone, waitNs, deadlineNs, movedAbove,
            null, null);
    }

    /**
     * {@link #decideOrMove} with this rank's liveness address ({@code "address port"}, or null) in its record, and
     * {@code learned} told every other rank's address that its record carries (rank, address).
     */
    static Decision decideOrMove(Store store, String prefix, int rank, int size, int value, BitSet suspected,
                                 IntPredicate gone, long waitNs, long deadlineNs, BooleanSupplier movedAbove,
                                 String liveAddress, java.util.function.BiConsumer<Integer, String> learned) {
        return decideThroughStore(store, prefix, rank, size, value, suspected, gone, waitNs, deadlineNs, movedAbove,
            liveAddress, learned);
    }

    private static Decision decideThroughStore(Store store, String prefix, int rank, int size, int value,
                                               BitSet suspected, IntPredicate gone, long waitNs, long deadlineNs,
                                               BooleanSupplier movedAbove, String liveAddress,
                                               java.util.function.BiConsumer<Integer, String> learned) {
        long startNs = System.nanoTime();
        String decisionKey = prefix + "members";
        // the record carries the ranks this rank knows dead: each survivor may know a different dead rank (the
        // neighbour of each), and a survivor that waited for a rank only another knows dead would wait for it until
        // JCCL_PEER_TIMEOUT (30 s by default) when its links, broken by the revocation, can no longer tell
        // and its liveness address: the job's store, where the addresses were published, may be what died (rank 0),
        // and a member killed after the decision is then found gone at the new join only through this copy
        store.setString(prefix + "join/" + rank, value + ";" + format(suspected)
            + (liveAddress != null ? ";" + liveAddress : ""), callNs(deadlineNs, waitNs));
        if (movedAbove != null) {
            // one key that says "survivors gather here", for ranks that look at this store from an earlier one
            store.setString(prefix + StoreSuccession.ACTIVE_KEY, "1", callNs(deadlineNs, waitNs));
        }
        long recordNs = System.nanoTime();
        BitSet joined = new BitSet(size);
        joined.set(rank);
        int[] values = new int[size];
        values[rank] = value;
        long waitUntil = System.nanoTime() + waitNs;
        int polls = 0;
        boolean allThere = false;
        while (true) {
            polls++;
            if (store.check(decisionKey, callNs(deadlineNs, waitNs))) {
                Decision d = parse(store.getString(decisionKey, callNs(deadlineNs, waitNs)), size);
                logTimes(rank, prefix, "read the decision", startNs, recordNs, polls, 0, 0);
                return d;
            }
            boolean waiting = false;
            for (int j = 0; j < size; j++) {
                if (joined.get(j) || suspected.get(j)) {
                    continue;
                }
                // after a wait that saw every awaited record there, read them without a look first
                if (allThere || store.check(prefix + "join/" + j, callNs(deadlineNs, waitNs))) {
                    joined.set(j);
                    values[j] = adopt(store.getString(prefix + "join/" + j, callNs(deadlineNs, waitNs)), rank, j,
                        suspected, size, learned);
                } else if (gone.test(j)) {
                    suspected.set(j);
                } else {
                    waiting = true;
                }
            }
            if (waiting) {
                // a record read in this round may have named a rank dead that was waited for before it was read
                waiting = false;
                for (int j = 0; j < size; j++) {
                    waiting |= !joined.get(j) && !suspected.get(j);
                }
            }
            long now = System.nanoTime();
            if (!waiting || now - waitUntil > 0) {
                if (waiting) {
                    BitSet silent = new BitSet(size);
                    silent.set(0, size);
                    silent.andNot(joined);
                    silent.andNot(suspected);
                    Log.get().warn(rank, Log.Subsys.INIT, prefix + ": ranks " + silent + " did not join"
                        + " within " + TimeUnit.NANOSECONDS.toMillis(waitNs) + " ms (JCCL_PEER_TIMEOUT): left out");
                }
                // a suspected rank that joined all the same (a wrong suspicion) is a member
                for (int j = suspected.nextSetBit(0); j >= 0; j = suspected.nextSetBit(j + 1)) {
                    if (!joined.get(j) && j != rank && store.check(prefix + "join/" + j, callNs(deadlineNs, waitNs))) {
                        joined.set(j);
                        values[j] = valueOf(store.getString(prefix + "join/" + j, callNs(deadlineNs, waitNs)));
                    }
                }
                int and = -1;
                for (int j = joined.nextSetBit(0); j >= 0; j = joined.nextSetBit(j + 1)) {
                    and &= values[j];
                }
                long lookNs = System.nanoTime();
                if (movedAbove != null && !store.check(decisionKey, callNs(deadlineNs, waitNs))
                    && movedAbove.getAsBoolean()) {
                    return null; // others gather on a later store (this one looked dead to them): decide there
                }
                long proposeNs = System.nanoTime();
                if (majorityRequired() && 2 * joined.cardinality() <= size) {
                    // a partition's minority (which may reach a standby store of its own) must not decide: two
                    // strict majorities always share a member, so at most one side goes on
                    throw new CollectiveException.Refused("rank " + rank + ": " + prefix + " would keep ranks "
                        + joined + ", " + joined.cardinality() + " of " + size + ", not a majority"
                        + " (JCCL_SHRINK_QUORUM=majority): this rank may be on the minority side of a partition;"
                        + " the others (if alive) decide without it");
                }
                byte[] proposal = (format(joined) + ";" + and).getBytes(StandardCharsets.UTF_8);
                store.compareAndSet(decisionKey, null, proposal, callNs(deadlineNs, waitNs)); // the first one wins
                Decision d = parse(store.getString(decisionKey, callNs(deadlineNs, waitNs)), size);
                logTimes(rank, prefix, "proposed", startNs, recordNs, polls, proposeNs - lookNs,
                    System.nanoTime() - proposeNs);
                return d;
            }
            if (now - deadlineNs > 0) {
                throw new CollectiveException.Timeout("rank " + rank + ": " + prefix + " found no decision"
                    + " before the deadline (JCCL_TIMEOUT)");
            }
            allThere = awaitRecords(store, prefix, size, joined, suspected,
                Math.min(waitUntil - now, deadlineNs - now));
        }
    }

    /**
     * Waits in the store (not polling it) until every record still awaited is there, at most one {@link #SLICE_NS}
     * (then the caller looks again: for a decision, for records naming ranks dead, for processes gone). Why: the
     * survivors polled every 5 ms, each look a store round trip per awaited rank, 7 clients on one store thread at 8
     * ranks, and the last record was seen up to a poll late; the store now answers when it arrives. Returns whether
     * every awaited record is there (the next look then reads them without checking for them first).
     */
    private static boolean awaitRecords(Store store, String prefix, int size, BitSet joined, BitSet suspected,
                                        long leftNs) {
        java.util.List<String> awaited = new java.util.ArrayList<>();
        for (int j = 0; j < size; j++) {
            if (!joined.get(j) && !suspected.get(j)) {
                awaited.add(prefix + "join/" + j);
            }
        }
        try {
            store.waitFor(awaited, Math.max(1, Math.min(leftNs, SLICE_NS)));
            return true;
        } catch (StoreTimeoutException e) {
            return false; // a slice passed without all of them: look again
        }
    }

    /**
     * The value of rank {@code from}'s join record ({@code VALUE;DEAD,RANKS[;ADDRESS PORT]}); adds the ranks it names
     * dead to {@code suspected} and tells {@code learned} (if any) the liveness address it carries.
     */
    static int adopt(String record, int rank, int from, BitSet suspected, int size,
                     java.util.function.BiConsumer<Integer, String> learned) {
        int semicolon = record.indexOf(';');
        if (semicolon >= 0 && semicolon + 1 < record.length()) {
            int second = record.indexOf(';', semicolon + 1);
            String dead = second < 0 ? record.substring(semicolon + 1) : record.substring(semicolon + 1, second);
            for (String r : dead.isEmpty() ? new String[0] : dead.split(",")) {
                int d = Integer.parseInt(r);
                if (d >= 0 && d < size && d != rank) {
                    suspected.set(d); // a wrong suspicion costs nothing: a suspected rank that joined is a member
                }
            }
            if (second >= 0 && second + 1 < record.length() && learned != null) {
                learned.accept(from, record.substring(second + 1));
            }
        }
        return valueOf(record);
    }

    private static int valueOf(String record) {
        int semicolon = record.indexOf(';');
        return Integer.parseInt(semicolon < 0 ? record : record.substring(0, semicolon));
    }

    /** The agreement's steps at INFO (the recovery breakdown of docs/fault-tolerance.md). */
    private static void logTimes(int rank, String prefix, String how, long startNs, long recordNs, int polls,
                                 long lookNs, long proposeNs) {
        long endNs = System.nanoTime();
        Log.get().info(rank, Log.Subsys.INIT, () -> String.format(java.util.Locale.ROOT, "%s %s after %.1f ms: own"
            + " record %.1f ms, %d looks at the records, look at later stores %.1f ms, proposal %.1f ms", prefix, how,
            (endNs - startNs) / 1e6, (recordNs - startNs) / 1e6, polls, lookNs / 1e6, proposeNs / 1e6));
    }

    /** JCCL_SHRINK_QUORUM: {@code none} (default: any survivors decide) or {@code majority} (more than half). */
    static boolean majorityRequired() {
        String quorum = Config.value("JCCL_SHRINK_QUORUM", "none");
        return switch (quorum) {
            case "none" -> false;
            case "majority" -> true;
            default -> throw new IllegalArgumentException("JCCL_SHRINK_QUORUM=" + quorum
                + " is not one of: none, majority");
        };
    }

    /** The members as {@link #format(BitSet)} writes them. */
    static String format(int[] members) {
        BitSet b = new BitSet();
        for (int r : members) {
            b.set(r);
        }
        return format(b);
    }

    static String format(BitSet members) {
        StringBuilder sb = new StringBuilder();
        for (int j = members.nextSetBit(0); j >= 0; j = members.nextSetBit(j + 1)) {
            if (!sb.isEmpty()) {
                sb.append(',');
            }
            sb.append(j);
        }
        return sb.toString();
    }

    static Decision parse(String decision, int size) {
        int semicolon = decision.indexOf(';');
        int[] ranks = Arrays.stream(decision.substring(0, semicolon).split(",")).mapToInt(Integer::parseInt).sorted()
            .toArray();
        for (int r : ranks) {
            if (r < 0 || r >= size) {
                throw new CollectiveException("decision names rank " + r + " outside 0.." + (size - 1) + ": '"
                    + decision + "'");
            }
        }
        return new Decision(ranks, Integer.parseInt(decision.substring(semicolon + 1)));
    }

    /** A store call's timeout: the rest of the deadline, at most the peer timeout (a store silent that long is gone). */
    private static long callNs(long deadlineNs, long peerTimeoutNs) {
        return Math.max(1, Math.min(deadlineNs - System.nanoTime(), peerTimeoutNs));
    }
}
