package io.jccl.collectives;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Arrays;
import java.util.SplittableRandom;

/**
 * One rank of a fault-injection trial ({@link FaultInjectionTest}, run by {@link MultiProcessMain} as mode
 * {@code fault SEED}): runs an endless sequence of random collectives (all-reduce SUM and MAX, broadcast,
 * all-gather, barrier; random sizes; the same sequence on every rank, op k drawn from SEED and k) and checks every
 * result against a reference computed from the members' original ranks. When an operation fails (the test kills
 * ranks at random moments) it revokes, shrinks, learns the members' original ranks, agrees, and resumes at the
 * lowest op index any member has not completed. After {@link #OPS_AFTER_RECOVERY} checked ops since the last
 * recovery it agrees to stop and prints {@code DONE members [...] agreed V recoveries R}. A wrong result exits 2.
 */
final class FaultInjectionMain {
    /** Checked operations after the last recovery before a rank may stop. */
    static final int OPS_AFTER_RECOVERY = 30;
    private static final int MAX_COUNT = 1 << 16;

    private FaultInjectionMain() {
    }

    static void run(Communicator world, long seed) {
        int original = world.rank();
        Communicator c = world;
        int[] members = new int[world.size()];
        Arrays.setAll(members, i -> i);
        long op = 0;
        long sinceRecovery = 0;
        int recoveries = 0;
        boolean recovered = false;
        int agreed = -1;
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment send = arena.allocate((long) MAX_COUNT * 4 * 16);
            MemorySegment recv = arena.allocate((long) MAX_COUNT * 4 * 16);
            while (true) {
                try {
                    if (op == 5 && recoveries == 0) {
                        System.out.println("RUNNING rank " + original);
                        System.out.flush();
                    }
                    if (recovered && sinceRecovery >= OPS_AFTER_RECOVERY) {
                        // stop together: everyone still here agrees (a failure now is one more recovery)
                        Communicator.Agreement a = c.agree(1);
                        if (a.failedRanks().length == 0) {
                            agreed = a.value();
                            break;
                        }
                        throw new CollectiveException("agreement left out " + Arrays.toString(a.failedRanks()));
                    }
                    runOp(c, members, original, seed, op, send, recv);
                    op++;
                    sinceRecovery++;
                } catch (CollectiveException e) {
                    long failedNs = System.nanoTime();
                    String cause = e.getClass().getSimpleName() + ": " + e.getMessage();
                    Communicator.ShrinkTimes times = null;
                    while (true) {
                        // recover; a failure during the recovery (another rank killed) is one more round
                        c.revoke("fault injection: " + e.getMessage());
                        Communicator next = c.shrink();
                        times = c.lastShrinkTimes;
                        if (c != world) {
                            c.close();
                        }
                        c = next;
                        try {
                            // who is left, by original rank (also a first check of the new communicator)
                            int[] orig = new int[c.size()];
                            orig[c.rank()] = original;
                            c.allReduce(orig, ReduceOp.SUM);
                            for (int i = 1; i < orig.length; i++) {
                                if (orig[i] <= orig[i - 1]) {
                                    fail("members not in old order after the shrink: " + Arrays.toString(orig));
                                }
                            }
                            members = orig;
                            long[] resume = {op};
                            c.allReduce(resume, ReduceOp.MIN); // an op may have completed on some ranks only
                            op = resume[0];
                            break;
                        } catch (CollectiveException again) {
                            e = again;
                        }
                    }
                    recoveries++;
                    recovered = true;
                    sinceRecovery = 0;
                    long recoveredNs = System.nanoTime();
                    System.out.println("RECOVERED rank " + original + " members " + Arrays.toString(members)
                        + " resuming at op " + op + " at " + System.currentTimeMillis());
                    if (recoveries == 1 && times != null) {
                        // the phases of this rank's first recovery, as wall-clock ms (FaultInjectionTest's breakdown)
                        long[] j = times.joinStepsNs();
                        System.out.println("PHASES rank " + original + " failed " + wallMs(failedNs) + " start "
                            + wallMs(times.startNs()) + " decided " + wallMs(times.decidedNs()) + " records "
                            + wallMs(j[0]) + " devices " + wallMs(j[1]) + " qps " + wallMs(j[2]) + " connected "
                            + wallMs(j[3]) + " init " + wallMs(times.initNs()) + " ready " + wallMs(times.readyNs())
                            + " recovered " + wallMs(recoveredNs) + " attempts " + times.attempts() + " store "
                            + times.storeIndex() + " cause " + cause.replace('\n', ' '));
                    }
                    System.out.flush();
                }
            }
        }
        System.out.println("DONE rank " + original + " members " + Arrays.toString(members) + " agreed " + agreed
            + " recoveries " + recoveries + " ops " + op);
        System.out.flush();
        if (c != world) {
            c.close();
        }
    }

    /** {@link System#nanoTime()} {@code ns} as wall-clock milliseconds (with microseconds), comparable across JVMs. */
    private static String wallMs(long ns) {
        long offsetNs = System.currentTimeMillis() * 1_000_000L - System.nanoTime();
        return String.format(java.util.Locale.ROOT, "%.3f", (offsetNs + ns) / 1e6);
    }

    /** Op {@code k} of the sequence, its result checked. */
    private static void runOp(Communicator c, int[] members, int original, long seed, long k, MemorySegment send,
                              MemorySegment recv) {
        SplittableRandom r = new SplittableRandom(seed * 1_000_003L + k);
        int kind = r.nextInt(5);
        int count = 1 + r.nextInt(r.nextBoolean() ? 64 : MAX_COUNT);
        int size = c.size();
        long sumOrig = 0;
        int maxOrig = 0;
        for (int m : members) {
            sumOrig += m + 1;
            maxOrig = Math.max(maxOrig, m + 1);
        }
        switch (kind) {
            case 0 -> {
                for (int i = 0; i < count; i++) {
                    send.setAtIndex(ValueLayout.JAVA_INT, i, (original + 1) * (1 + i % 5));
                }
                c.allReduce(send, recv, count, DataType.INT32, ReduceOp.SUM);
                for (int i = 0; i < count; i++) {
                    check(recv.getAtIndex(ValueLayout.JAVA_INT, i) == sumOrig * (1 + i % 5), k, "all-reduce sum", i);
                }
            }
            case 1 -> {
                for (int i = 0; i < count; i++) {
                    send.setAtIndex(ValueLayout.JAVA_FLOAT, i, (original + 1) * 0.5f + i % 3);
                }
                c.allReduce(send, recv, count, DataType.FLOAT32, ReduceOp.MAX);
                for (int i = 0; i < count; i++) {
                    check(recv.getAtIndex(ValueLayout.JAVA_FLOAT, i) == maxOrig * 0.5f + i % 3, k, "all-reduce max", i);
                }
            }
            case 2 -> {
                int root = (int) (k % size);
                for (int i = 0; i < count; i++) {
                    send.setAtIndex(ValueLayout.JAVA_INT, i, c.rank() == root ? (original + 1) * 1000 + i % 13 : -1);
                }
                c.broadcast(send, count, DataType.INT32, root);
                for (int i = 0; i < count; i++) {
                    check(send.getAtIndex(ValueLayout.JAVA_INT, i) == (members[root] + 1) * 1000 + i % 13, k,
                        "broadcast", i);
                }
            }
            case 3 -> {
                int per = Math.max(1, count / size);
                for (int i = 0; i < per; i++) {
                    send.setAtIndex(ValueLayout.JAVA_INT, i, original * 100_000 + i);
                }
                c.allGather(send, recv, per, DataType.INT32);
                for (int j = 0; j < size; j++) {
                    for (int i = 0; i < per; i++) {
                        check(recv.getAtIndex(ValueLayout.JAVA_INT, (long) j * per + i) == members[j] * 100_000 + i, k,
                            "all-gather", j * per + i);
                    }
                }
            }
            default -> c.barrier();
        }
    }

    private static void check(boolean ok, long k, String what, long index) {
        if (!ok) {
            fail("op " + k + " (" + what + "): wrong element " + index);
        }
    }

    private static void fail(String message) {
        System.out.println("WRONG " + message);
        System.out.flush();
        Runtime.getRuntime().halt(2);
    }
}
