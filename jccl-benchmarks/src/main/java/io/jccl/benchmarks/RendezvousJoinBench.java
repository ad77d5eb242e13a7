package io.jccl.benchmarks;

import io.jccl.collectives.Communicator;
import io.jccl.collectives.CommunicatorOptions;
import io.jccl.collectives.LaunchEnvironment;
import io.jccl.collectives.bootstrap.Bootstrap;
import io.jccl.collectives.store.PrefixStore;
import io.jccl.collectives.store.Store;
import io.jccl.services.rendezvous.Rendezvous;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * Joining a job through {@link Rendezvous} against joining through the store, one rank per process
 * ({@code jccl run -np 32 ...}; {@code bench/rendezvous} runs it). Each round, after a store barrier that releases
 * every rank together, each rank times, in the same processes and one after the other:
 *
 * <ul>
 *   <li>{@code rendezvous-join}: {@code Rendezvous.join} (device, queue pairs, the star's endpoint exchange through
 *       the store) then {@code publish} + {@code await} of every rank;</li>
 *   <li>{@code rendezvous-ready}: one more {@code publish} + {@code await} of every rank on the links just made;</li>
 *   <li>{@code store-join}: {@code Bootstrap.exchangeJoinRecords}, the store part of a communicator's (and the transfer
 *       engine's) join: every rank writes its record and reads all N;</li>
 *   <li>{@code store-barrier}: a counter in the store and a key the last rank sets, as torch's
 *       {@code store_based_barrier};</li>
 *   <li>{@code communicator}: {@code Communicator.create} without warm-up, the collectives' whole bootstrap through
 *       the store (records, device choice, a queue pair per peer, the direct path's mappings).</li>
 * </ul>
 * The job's time for a step is the slowest rank's; rank 0 prints, per step, the median over rounds of that, and the
 * median rank's. Output: one line per step.
 *
 * <pre>
 * jccl run -np 32 --jvm-opt=-Xmx48m io.jccl.benchmarks.RendezvousJoinBench [--rounds 5]
 * </pre>
 */
public final class RendezvousJoinBench {
    private static final String[] STEPS = {"rendezvous-join", "rendezvous-ready", "store-join", "store-barrier",
        "communicator"};

    private RendezvousJoinBench() {
    }

    /** Entry point. */
    public static void main(String[] args) throws Exception {
        int rounds = 5;
        for (int i = 0; i + 1 < args.length; i++) {
            if (args[i].equals("--rounds")) {
                rounds = Integer.parseInt(args[i + 1]);
            }
        }
        CommunicatorOptions options = CommunicatorOptions.fromEnvironment();
        LaunchEnvironment env = LaunchEnvironment.detect(System.getenv());
        int rank = env.rank();
        int size = env.worldSize();
        long timeoutNs = options.timeoutNs();
        String hostId = Bootstrap.hostIdentity(options);
        List<long[]> slowest = new ArrayList<>();
        List<long[]> median = new ArrayList<>();
        try (Store store = env.openStore(timeoutNs, options.authSecret())) {
            for (int round = 0; round < rounds; round++) {
                long[] mine = new long[STEPS.length];
                barrier(store, "b" + round + "a", size, timeoutNs);
                long t0 = System.nanoTime();
                Rendezvous r = Rendezvous.join(store, rank, size, options.withName("bench-" + round));
                r.publish(0);
                r.await(0, timeoutNs);
                mine[0] = System.nanoTime() - t0;
                barrier(store, "b" + round + "b", size, timeoutNs);
                t0 = System.nanoTime();
                r.publish(1);
                r.await(1, timeoutNs);
                mine[1] = System.nanoTime() - t0;
                barrier(store, "b" + round + "c", size, timeoutNs);
                t0 = System.nanoTime();
                Bootstrap.exchangeJoinRecords(new PrefixStore("bench-store-" + round, store), rank, size, options,
                    hostId, "bench", "", System.nanoTime() + timeoutNs);
                mine[2] = System.nanoTime() - t0;
                barrier(store, "b" + round + "d", size, timeoutNs);
                t0 = System.nanoTime();
                barrier(store, "sb" + round, size, timeoutNs);
                mine[3] = System.nanoTime() - t0;
                barrier(store, "b" + round + "f", size, timeoutNs);
                t0 = System.nanoTime();
                Communicator comm = Communicator.create(store, rank, size, options.withName("bench-comm-" + round)
                    .withWarmup(Duration.ZERO));
                mine[4] = System.nanoTime() - t0;
                store.setString("t/" + round + "/" + rank, Arrays.toString(mine), timeoutNs);
                // Everyone measured before anyone's links go (a closing hub would fail a late rank's wait).
                barrier(store, "b" + round + "e", size, timeoutNs);
                r.close();
                comm.close();
                if (rank == 0) {
                    long[][] all = new long[STEPS.length][size];
                    for (int j = 0; j < size; j++) {
                        String[] f = store.getString("t/" + round + "/" + j, timeoutNs).replaceAll("[\\[\\] ]", "")
                            .split(",");
                        for (int s = 0; s < STEPS.length; s++) {
                            all[s][j] = Long.parseLong(f[s]);
                        }
                    }
                    long[] max = new long[STEPS.length];
                    long[] mid = new long[STEPS.length];
                    for (int s = 0; s < STEPS.length; s++) {
                        Arrays.sort(all[s]);
                        max[s] = all[s][size - 1];
                        mid[s] = all[s][size / 2];
                    }
                    slowest.add(max);
                    median.add(mid);
                }
            }
            if (rank == 0) {
                System.out.printf("# %d ranks, %d rounds, device %s; per step: median over rounds of the slowest"
                    + " rank / of the median rank (ms)%n", size, rounds, options.transports().isBlank()
                    ? "default" : options.transports());
                for (int s = 0; s < STEPS.length; s++) {
                    System.out.printf("%-18s %9.2f %9.2f%n", STEPS[s], medianOf(slowest, s) / 1e6,
                        medianOf(median, s) / 1e6);
                }
            }
            barrier(store, "end", size, timeoutNs);
            // Rank 0 serves the store: it leaves last, once every rank has seen the end (else a slow rank's last
            // wait would find the store gone).
            store.add("left", 1, timeoutNs);
            if (rank == 0) {
                long deadline = System.nanoTime() + timeoutNs;
                while (store.add("left", 0, timeoutNs) < size && System.nanoTime() < deadline) {
                    Thread.sleep(5);
                }
            }
        }
    }

    private static double medianOf(List<long[]> rows, int step) {
        long[] v = rows.stream().mapToLong(r -> r[step]).sorted().toArray();
        return v[v.length / 2];
    }

    /** A store barrier: a counter, and a key the last rank to arrive sets. */
    private static void barrier(Store store, String name, int size, long timeoutNs) {
        if (store.add("barrier/" + name, 1, timeoutNs) == size) {
            store.setString("barrier/" + name + "/done", "1", timeoutNs);
        }
        store.waitFor(List.of("barrier/" + name + "/done"), TimeUnit.NANOSECONDS.toNanos(timeoutNs));
    }
}
