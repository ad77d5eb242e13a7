package io.jccl.collectives.store;

import java.util.Arrays;
import java.util.concurrent.TimeUnit;

/**
 * Start-up cost of a store server and its first client, as rank 0 pays it: {@code new TcpStore("127.0.0.1", 0, true,
 * ...)} plus one set and get, then closed. Prints the first (cold: class loading included, what a job's rank 0
 * sees) and the median and 90th percentile of {@code n} more (warm). Run in fresh JVMs for the cold number:
 * {@code java -cp <test-classes>:<classes>:<jccl-common.jar> io.jccl.collectives.store.StoreStartupBench 200}.
 */
public final class StoreStartupBench {
    private StoreStartupBench() {
    }

    /**
     * {@code [n [job]]}: warm iterations (200); {@code job}: first load what a job's rank 0 loads anyway before or
     * right after it opens the store (settings through Config, logging, secure ids), so that only the store's own
     * cost is timed.
     */
    public static void main(String[] args) {
        int n = args.length > 0 ? Integer.parseInt(args[0]) : 200;
        if (args.length > 1 && args[1].equals("job")) {
            io.jccl.common.Config.value("JCCL_TIMEOUT");
            io.jccl.common.Log.get();
            io.jccl.common.SecureIds.nonce();
        }
        long cold = once();
        long[] warm = new long[n];
        for (int i = 0; i < n; i++) {
            warm[i] = once();
        }
        Arrays.sort(warm);
        System.out.printf("cold_ms %.2f warm_median_us %d warm_p90_us %d%n", cold / 1e6,
            warm[n / 2] / 1000, warm[(int) (n * 0.9)] / 1000);
    }

    private static long once() {
        long start = System.nanoTime();
        try (TcpStore store = new TcpStore("127.0.0.1", 0, true, TimeUnit.SECONDS.toNanos(5))) {
            store.set("k", new byte[] {1});
            store.get("k");
        }
        return System.nanoTime() - start;
    }
}
