import io.jccl.collectives.Communicator;
import io.jccl.collectives.CommunicatorOptions;
import io.jccl.collectives.DataType;
import io.jccl.collectives.ReduceOp;
import io.jccl.collectives.store.InMemoryStore;

import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.Arrays;

/**
 * An 8-byte all-reduce loop of RANKS ranks as threads of one JVM (as the collectives tests' Ranks helper runs
 * them) over shm0, so the direct path; prints the median over BLOCKS blocks of rank 0's ns per operation. Run with
 * java's source-file mode against any build's classpath (bench/observability/ab.sh), so the same loop measures a
 * build without the JFR events and one with them.
 *
 * <p>Arguments: RANKS (1 or 2) BLOCKS OPS_PER_BLOCK.
 */
public class SmallAllReduceLoop {
    public static void main(String[] args) throws Exception {
        int ranks = Integer.parseInt(args[0]);
        int blocks = Integer.parseInt(args[1]);
        int ops = Integer.parseInt(args[2]);
        CommunicatorOptions options = CommunicatorOptions.defaults().withTransports("shm0")
            .withTimeout(Duration.ofSeconds(60)).withName("loop8");
        InMemoryStore store = new InMemoryStore();
        double[] perBlockNs = new double[blocks];
        Thread[] threads = new Thread[ranks];
        Throwable[] failure = new Throwable[1];
        for (int r = 0; r < ranks; r++) {
            int rank = r;
            threads[r] = Thread.ofPlatform().name("rank-" + r).start(() -> {
                try (Communicator c = Communicator.create(store, rank, ranks, options)) {
                    MemorySegment buf = c.allocate(8);
                    for (int i = 0; i < 200_000; i++) { // JIT warm-up
                        c.allReduce(buf, 2, DataType.FLOAT32, ReduceOp.SUM);
                    }
                    for (int b = 0; b < blocks; b++) {
                        c.barrier();
                        long t0 = System.nanoTime();
                        for (int i = 0; i < ops; i++) {
                            c.allReduce(buf, 2, DataType.FLOAT32, ReduceOp.SUM);
                        }
                        if (rank == 0) {
                            perBlockNs[b] = (System.nanoTime() - t0) / (double) ops;
                        }
                    }
                } catch (Throwable e) {
                    failure[0] = e;
                }
            });
        }
        for (Thread t : threads) {
            t.join();
        }
        if (failure[0] != null) {
            throw new IllegalStateException(failure[0]);
        }
        double[] sorted = perBlockNs.clone();
        Arrays.sort(sorted);
        System.out.printf("median_ns %.1f min_ns %.1f%n", sorted[blocks / 2], sorted[0]);
    }
}
