package io.jccl.collectives;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/** Entry point of the multi-JVM tests: one rank per process, configured by JCCL_* environment variables. */
public final class MultiProcessMain {
    private MultiProcessMain() {
    }

    /**
     * All-reduce, all-gather and broadcast at a few sizes (one element to past the chunk size, so that chunked and
     * pipelined paths run), every element checked: a short correctness run over a provider named by JCCL_TRANSPORT.
     */
    static void small(Communicator c) {
        int n = c.size();
        int r = c.rank();
        try (Arena arena = Arena.ofConfined()) {
            for (long count : new long[] {1, 1000, 70_000, 300_000}) {
                MemorySegment buf = arena.allocate(count * 4, 64);
                for (long i = 0; i < count; i++) {
                    buf.setAtIndex(ValueLayout.JAVA_INT, i, (int) (i * 7 + r));
                }
                c.allReduce(buf, count, DataType.INT32, ReduceOp.SUM);
                for (long i = 0; i < count; i++) {
                    int want = (int) (n * (i * 7) + (long) n * (n - 1) / 2);
                    check(buf.getAtIndex(ValueLayout.JAVA_INT, i) == want, "all-reduce", count, i);
                }
                MemorySegment send = arena.allocate(count * 4, 64);
                MemorySegment recv = arena.allocate(count * 4 * n, 64);
                for (long i = 0; i < count; i++) {
                    send.setAtIndex(ValueLayout.JAVA_INT, i, (int) (r * 1_000_003L + i));
                }
                c.allGather(send, recv, count, DataType.INT32);
                for (int j = 0; j < n; j++) {
                    for (long i = 0; i < count; i++) {
                        check(recv.getAtIndex(ValueLayout.JAVA_INT, j * count + i) == (int) (j * 1_000_003L + i),
                            "all-gather", count, j * count + i);
                    }
                }
                int root = (int) (count % n);
                for (long i = 0; i < count; i++) {
                    buf.setAtIndex(ValueLayout.JAVA_INT, i, r == root ? (int) (i ^ 0x5A5A5A5A) : -1);
                }
                c.broadcast(buf, count, DataType.INT32, root);
                for (long i = 0; i < count; i++) {
                    check(buf.getAtIndex(ValueLayout.JAVA_INT, i) == (int) (i ^ 0x5A5A5A5A), "broadcast", count, i);
                }
            }
        }
    }

    private static void check(boolean ok, String collective, long count, long index) {
        if (!ok) {
            throw new AssertionError(collective + " of " + count + " elements: wrong element " + index);
        }
    }

    public static void main(String[] args) throws Exception {
        String mode = args.length > 0 ? args[0] : "check";
        try (Communicator c = Communicator.fromEnvironment()) {
            System.out.println("JOINED rank " + c.rank() + " kernels=" + io.jccl.collectives.kernel.Kernels.get().name()
                + " direct=" + c.directAvailable() + " peer=" + c.transportOf((c.rank() + 1) % c.size()));
            System.out.flush();
            switch (mode) {
                case "check" -> {
                    CollectivesTest.everything(c, "multi-jvm", false);
                    System.out.println("OK rank " + c.rank());
                }
                case "loop" -> {
                    try (Arena arena = Arena.ofConfined()) {
                        long count = 1 << 18;
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
                            if (e instanceof CollectiveException.PeerFailure pf) {
                                System.out.println("NAMED rank " + pf.rank());
                            }
                            System.out.println("FAILED rank " + c.rank() + " after " + iterations + ": "
                                + e.getClass().getSimpleName() + ": " + e.getMessage());
                            System.out.flush();
                            c.abort();
                            System.exit(3);
                        }
                    }
                }
                case "timed" -> {
                    // allReduce of ones for the given seconds after the first 20, checking every result
                    try (Arena arena = Arena.ofConfined()) {
                        long count = 1 << 14;
                        MemorySegment buf = arena.allocate(count * 4);
                        long iterations = 0;
                        long endNs = Long.MAX_VALUE;
                        long seconds = Long.parseLong(args[1]);
                        MemorySegment flag = arena.allocate(8);
                        while (true) {
                            buf.fill((byte) 0);
                            for (long i = 0; i < count; i++) {
                                buf.setAtIndex(java.lang.foreign.ValueLayout.JAVA_FLOAT, i, 1f);
                            }
                            c.allReduce(buf, count, DataType.FLOAT32, ReduceOp.SUM);
                            float got = buf.getAtIndex(java.lang.foreign.ValueLayout.JAVA_FLOAT, count - 1);
                            if (got != c.size()) {
                                throw new AssertionError("iteration " + iterations + ": " + got);
                            }
                            if (++iterations == 20) {
                                System.out.println("RUNNING rank " + c.rank());
                                System.out.flush();
                                endNs = System.nanoTime() + seconds * 1_000_000_000L;
                            }
                            // agree on when to stop: rank 0's clock decides
                            if (iterations % 16 == 0) {
                                flag.set(java.lang.foreign.ValueLayout.JAVA_LONG, 0, System.nanoTime() >= endNs ? 1 : 0);
                                c.broadcast(flag, 1, DataType.INT64, 0);
                                if (flag.get(java.lang.foreign.ValueLayout.JAVA_LONG, 0) == 1) {
                                    break;
                                }
                            }
                        }
                        System.out.println("DONE rank " + c.rank() + " after " + iterations);
                    }
                }
                case "straggler" -> {
                    // rank 0 arrives 400 ms late at each of 5 barriers: the others wait, and run their health checks
                    for (int i = 0; i < 5; i++) {
                        if (c.rank() == 0) {
                            Thread.sleep(400);
                        }
                        c.barrier();
                    }
                    System.out.println("DONE rank " + c.rank());
                }
                case "small" -> {
                    small(c);
                    System.out.println("OK rank " + c.rank());
                }
                case "bench" -> Bench.run(c, args);
                case "revoke", "shrink" -> ResilienceMain.run(mode, c, args);
                case "fault" -> FaultInjectionMain.run(c, Long.parseLong(args[1]));
                case "partition" -> PartitionMain.run(c);
                default -> throw new IllegalArgumentException(mode);
            }
        }
    }
}
