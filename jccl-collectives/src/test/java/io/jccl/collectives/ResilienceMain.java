package io.jccl.collectives;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/** The multi-JVM modes of ResilienceProcessTest (run by {@link MultiProcessMain}): revoke and shrink. */
final class ResilienceMain {
    private ResilienceMain() {
    }

    static void run(String mode, Communicator c, String[] args) throws Exception {
        switch (mode) {
            case "revoke" -> revoke(c, Integer.parseInt(args[1]));
            case "shrink" -> shrink(c, args.length > 1 ? args[1] : "");
            default -> throw new IllegalArgumentException(mode);
        }
    }

    /** All-reduces until rank {@code revoker} revokes after 20 of them; every rank prints who revoked. */
    private static void revoke(Communicator c, int revoker) {
        try (Arena arena = Arena.ofConfined()) {
            long count = 1 << 16;
            MemorySegment buf = arena.allocate(count * 4);
            for (long i = 0; ; i++) {
                if (i == 20 && c.rank() == revoker) {
                    c.revoke("revoked by the test");
                }
                try {
                    c.allReduce(buf, count, DataType.FLOAT32, ReduceOp.SUM);
                } catch (CollectiveException.Revoked e) {
                    System.out.println("REVOKED rank " + c.rank() + " by " + e.revoker() + " after " + i + ": "
                        + e.getMessage());
                    break;
                }
            }
        }
        System.out.flush();
    }

    /**
     * All-reduces until a rank dies (the test kills one), then shrinks: an all-reduce of old rank + 1 over the
     * survivors, printed with the time the shrink took. {@code how}: {@code linger}: the survivors wait for a byte on
     * stdin before they close (rank 0 serves the store); {@code twice}: the survivors all-reduce on the shrunk
     * communicator until a second rank dies and shrink again (SHRUNK2); {@code agree}: the survivors agree first
     * (AGREED, each clearing its own bit of 0xFF); {@code die-in-shrink}: rank 1 halts at a
     * random moment (0-300 ms) after it entered shrink, while the protocol runs.
     */
    private static void shrink(Communicator c, String how) throws java.io.IOException {
        if (how.equals("split-agree")) {
            // a split communicator (every rank, in reverse order: the store's host, world rank 0, is its last rank)
            // agrees and shrinks through the parent's standby stores when the store's host dies
            Communicator split = c.split(0, -c.rank());
            shrink(split, "agree");
            split.close();
            c.abort(); // the world communicator lost rank 0 too: no closing barrier with it
            return;
        }
        boolean linger = how.equals("linger");
        if (how.equals("twice")) {
            Communicator s = shrinkAfterFailure(c, "");
            if (s != null) {
                try (Communicator first = s; Communicator second = shrinkAfterFailure(first, "2")) {
                    if (second != null) {
                        report(second, "SHRUNK2", 0);
                        second.barrier();
                    }
                }
            }
            c.close();
            return;
        }
        try (Arena arena = Arena.ofConfined()) {
            long count = 1 << 16;
            MemorySegment buf = arena.allocate(count * 4);
            long iterations = 0;
            try {
                while (true) {
                    c.allReduce(buf, count, DataType.FLOAT32, ReduceOp.SUM);
                    if (++iterations == 20) {
                        System.out.println("RUNNING rank " + c.rank());
                        System.out.flush();
                    }
                }
            } catch (CollectiveException e) {
                System.out.println("FAILED rank " + c.rank() + " after " + iterations + ": "
                    + e.getClass().getSimpleName() + ": " + e.getMessage());
            }
            if (how.equals("agree")) {
                // each rank clears its own bit: the AND names the ranks that took part
                Communicator.Agreement a = c.agree(0xFF & ~(1 << c.rank()));
                System.out.println("AGREED rank " + c.rank() + " value " + Integer.toBinaryString(a.value())
                    + " failed " + java.util.Arrays.toString(a.failedRanks()));
            }
            if (how.equals("die-in-shrink")) {
                dieInShrink(c);
                return;
            }
            long t0 = System.nanoTime();
            Communicator shrunk;
            try {
                shrunk = c.shrink();
            } catch (CollectiveException e) {
                System.out.println("SHRINK FAILED rank " + c.rank() + " after " + (System.nanoTime() - t0) / 1_000_000
                    + " ms: " + e.getMessage());
                System.out.flush();
                c.abort();
                System.exit(4);
                return;
            }
            try (Communicator s = shrunk) {
                long ms = (System.nanoTime() - t0) / 1_000_000;
                MemorySegment v = arena.allocate(16 * 4);
                for (int i = 0; i < 16; i++) {
                    v.setAtIndex(ValueLayout.JAVA_FLOAT, i, c.rank() + 1);
                }
                s.allReduce(v, 16, DataType.FLOAT32, ReduceOp.SUM);
                System.out.println("SHRUNK rank " + c.rank() + " newRank " + s.rank() + " size " + s.size() + " sum "
                    + (int) v.getAtIndex(ValueLayout.JAVA_FLOAT, 15) + " in " + ms + " ms");
                System.out.flush();
                if (linger) {
                    System.in.read(); // the store stays up until the test says (a stopped rank wakes meanwhile)
                }
                s.barrier(); // nobody closes (rank 0: the store) before all have printed
            }
        }
    }

    /**
     * All-reduces on {@code c} until it fails (prints RUNNING{@code tag} after 20), then shrinks; null (after printing
     * SHRINK FAILED) when the shrink fails.
     */
    private static Communicator shrinkAfterFailure(Communicator c, String tag) {
        try (Arena arena = Arena.ofConfined()) {
            long count = 1 << 14;
            MemorySegment buf = arena.allocate(count * 4);
            long iterations = 0;
            try {
                while (true) {
                    c.allReduce(buf, count, DataType.FLOAT32, ReduceOp.SUM);
                    if (++iterations == 20) {
                        System.out.println("RUNNING" + tag + " rank " + c.rank());
                        System.out.flush();
                    }
                }
            } catch (CollectiveException e) {
                System.out.println("FAILED" + tag + " rank " + c.rank() + ": " + e.getMessage());
            }
        }
        long t0 = System.nanoTime();
        try {
            Communicator s = c.shrink();
            if (tag.isEmpty()) {
                report(s, "SHRUNK", (System.nanoTime() - t0) / 1_000_000);
            }
            return s;
        } catch (CollectiveException e) {
            System.out.println("SHRINK FAILED" + tag + " rank " + c.rank() + ": " + e.getMessage());
            System.out.flush();
            return null;
        }
    }

    /** All-reduces rank + 1 of the original communicator (read from JCCL_RANK) and prints the sum. */
    private static void report(Communicator s, String what, long ms) {
        int original = Integer.parseInt(System.getenv("JCCL_RANK"));
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment v = arena.allocate(16 * 4);
            for (int i = 0; i < 16; i++) {
                v.setAtIndex(ValueLayout.JAVA_FLOAT, i, original + 1);
            }
            s.allReduce(v, 16, DataType.FLOAT32, ReduceOp.SUM);
            System.out.println(what + " rank " + original + " newRank " + s.rank() + " size " + s.size() + " sum "
                + (int) v.getAtIndex(ValueLayout.JAVA_FLOAT, 15) + " in " + ms + " ms");
            System.out.flush();
        }
    }

    /**
     * Rank 1 halts 0-300 ms into its shrink (at once if the shrink returned sooner); the others shrink, and shrink
     * again while the new communicator fails (rank 1 may have been a member that died after the decision).
     */
    private static void dieInShrink(Communicator c) {
        if (c.rank() == 1) {
            long delayMs = new java.util.Random().nextInt(300);
            Thread.ofPlatform().daemon().start(() -> {
                try {
                    Thread.sleep(delayMs);
                } catch (InterruptedException ignored) {
                    // halting anyway
                }
                Runtime.getRuntime().halt(9);
            });
        }
        long t0 = System.nanoTime();
        Communicator cur = c;
        while (true) {
            Communicator s;
            try {
                s = cur.shrink();
            } catch (CollectiveException e) {
                System.out.println("SHRINK FAILED rank " + c.rank() + ": " + e.getMessage());
                System.out.flush();
                Runtime.getRuntime().halt(4);
                return;
            }
            if (c.rank() == 1) {
                Runtime.getRuntime().halt(9); // never a member that lives on
            }
            try {
                report(s, "SHRUNK", (System.nanoTime() - t0) / 1_000_000);
                s.barrier();
                s.close();
                return;
            } catch (CollectiveException e) {
                System.out.println("RETRY rank " + c.rank() + " after " + e.getMessage());
                cur = s;
            }
        }
    }
}
