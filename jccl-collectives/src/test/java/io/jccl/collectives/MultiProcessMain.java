package io.jccl.collectives;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;

/** Entry point of the multi-JVM tests: one rank per process, configured by JCCL_* environment variables. */
public final class MultiProcessMain {
    private MultiProcessMain() {
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
                case "bench" -> Bench.run(c, args);
                default -> throw new IllegalArgumentException(mode);
            }
        }
    }
}
