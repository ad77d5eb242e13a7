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
            case "shrink" -> shrink(c, args.length > 1 && args[1].equals("linger"));
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
     * survivors, printed with the time the shrink took. With {@code linger} the survivors wait for a byte on stdin
     * before they close (rank 0 serves the store).
     */
    private static void shrink(Communicator c, boolean linger) throws java.io.IOException {
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
}
