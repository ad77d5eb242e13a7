package io.jccl.benchmarks;

import io.jccl.collectives.CommunicatorOptions;
import io.jccl.collectives.store.InMemoryStore;
import io.jccl.collectives.store.Store;
import io.jccl.services.transfer.LocalSegment;
import io.jccl.services.transfer.RemoteSegment;
import io.jccl.services.transfer.TransferBatch;
import io.jccl.services.transfer.TransferEngine;
import io.jccl.services.transfer.TransferSettings;
import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.Context;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.Reach;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.Verbs;
import io.jccl.verbs.WorkCompletion;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;

/**
 * The transfer engine against raw verbs on one device, in one run (issue 18): per-transfer overhead (batches of one
 * 4 KiB WRITE, submitted and awaited one after the other, against one signaled 4 KiB RDMA_WRITE posted and polled)
 * and bandwidth (batches of 64 × 64 KiB and of 1 × 64 MiB, against a raw WRITE stream of the same sizes over the same
 * number of queue pairs, 128 in flight per queue pair as {@code jccl perf write_bw}). Two more rows split the 64 KiB
 * case: the engine's batch against raw WRITEs posted the same way (64 round robin, all awaited, then the next: the
 * cost of the pattern apart from the engine's), and the engine with two batches in flight (the next submitted before
 * the last is awaited) against the raw stream. Two ranks run as threads of this JVM, each with its own engine and
 * device context. {@code bench/transfer} runs it beside
 * {@code jccl perf write_bw --local} on the same device.
 *
 * <pre>
 * java -cp ... io.jccl.benchmarks.TransferBench [--device shm0|tcp0] [--seconds 1] [--rounds 3]
 * </pre>
 */
public final class TransferBench {
    private static final int SMALL = 4096;
    private static final int MEDIUM = 64 * 1024;
    private static final int LARGE = 64 << 20;

    private TransferBench() {
    }

    /** Entry point. */
    public static void main(String[] args) throws Exception {
        String device = option(args, "--device", "shm0");
        double seconds = Double.parseDouble(option(args, "--seconds", "1"));
        int rounds = Integer.parseInt(option(args, "--rounds", "3"));
        long durationNs = (long) (seconds * 1e9);
        TransferSettings settings = TransferSettings.fromEnvironment();
        int qps = settings.queuePairsPerPeer();
        // [engine µs, engine GB/s 64 KiB, engine GB/s 64 MiB, raw µs, raw GB/s 64 KiB, raw GB/s 64 MiB]: each the
        // best of the rounds, engine and raw interleaved so that both see the same machine (shared, loaded cores).
        double[] best = engine(device, settings, durationNs, rounds);
        double[] engine = {best[0], best[1], best[2]};
        double rawOverheadUs = best[3];
        double rawMedium = best[4];
        double rawLarge = best[5];
        System.out.printf("transfer engine vs raw verbs on %s (%d QPs per peer, slices of %d B; best of %d rounds of "
            + "%.1f s per row)%n", device, qps, settings.sliceBytesFor(Verbs.device(device).linkLayer()), rounds,
            seconds);
        System.out.printf("%-34s %12s %12s %8s%n", "measure", "engine", "raw verbs", "ratio");
        System.out.printf("%-34s %9.2f us %9.2f us %+7.2f us added%n", "1 x 4 KiB WRITE per batch", engine[0],
            rawOverheadUs, engine[0] - rawOverheadUs);
        System.out.printf("%-34s %7.2f GB/s %7.2f GB/s %8.2f%n", "64 x 64 KiB WRITE per batch", engine[1], rawMedium,
            engine[1] / rawMedium);
        System.out.printf("%-34s %7.2f GB/s %7.2f GB/s %8.2f%n", "64 x 64 KiB, raw posted as a batch", engine[1],
            best[7], engine[1] / best[7]);
        System.out.printf("%-34s %7.2f GB/s %7.2f GB/s %8.2f%n", "64 x 64 KiB, two batches in flight", best[6],
            rawMedium, best[6] / rawMedium);
        System.out.printf("%-34s %7.2f GB/s %7.2f GB/s %8.2f%n", "1 x 64 MiB WRITE per batch", engine[2], rawLarge,
            engine[2] / rawLarge);
    }

    private static String option(String[] args, String name, String fallback) {
        for (int i = 0; i + 1 < args.length; i++) {
            if (args[i].equals(name)) {
                return args[i + 1];
            }
        }
        return fallback;
    }

    /**
     * Best of {@code rounds}: engine µs per 1 × 4 KiB batch, GB/s of 64 × 64 KiB batches, GB/s of 1 × 64 MiB
     * batches, then the same three for raw verbs.
     */
    private static double[] engine(String device, TransferSettings settings, long durationNs, int rounds)
        throws Exception {
        Store store = new InMemoryStore();
        CommunicatorOptions options = CommunicatorOptions.fromEnvironment().withTransports(device)
            .withTimeout(Duration.ofSeconds(120));
        CyclicBarrier barrier = new CyclicBarrier(2);
        CompletableFuture<double[]> result = new CompletableFuture<>();
        CompletableFuture<Void> target = new CompletableFuture<>();
        Thread.ofPlatform().daemon().start(() -> {
            try (TransferEngine e = TransferEngine.create(store, 1, 2, options, settings)) {
                e.registerSegment("bench/target", LARGE);
                barrier.await();
                barrier.await(); // the initiator is done
                target.complete(null);
            } catch (Throwable t) {
                target.completeExceptionally(t);
                barrier.reset();
            }
        });
        Thread.ofPlatform().start(() -> {
            try (TransferEngine e = TransferEngine.create(store, 0, 2, options, settings)) {
                LocalSegment source = e.registerSegment("bench/source", LARGE);
                barrier.await();
                RemoteSegment remote = e.openSegment("bench/target");
                double[] r = {Double.MAX_VALUE, 0, 0, Double.MAX_VALUE, 0, 0, 0, 0};
                int qps = settings.queuePairsPerPeer();
                try (TransferBatch one = e.newBatch(1); TransferBatch many = e.newBatch(64);
                     TransferBatch more = e.newBatch(64)) {
                    for (int round = 0; round < rounds; round++) {
                        r[3] = Math.min(r[3], rawLatencyUs(device, durationNs));
                        batches(one, source, remote, 1, SMALL, 200_000_000L);
                        long n = batches(one, source, remote, 1, SMALL, durationNs);
                        r[0] = Math.min(r[0], durationNs / 1e3 / n);
                        r[4] = Math.max(r[4], rawBandwidth(device, MEDIUM, qps, durationNs));
                        batches(many, source, remote, 64, MEDIUM, 200_000_000L);
                        r[1] = Math.max(r[1], batches(many, source, remote, 64, MEDIUM, durationNs) * 64.0 * MEDIUM
                            / durationNs);
                        r[7] = Math.max(r[7], rawBatchBandwidth(device, MEDIUM, 64, qps, durationNs));
                        r[6] = Math.max(r[6], twoInFlight(many, more, source, remote, MEDIUM, durationNs) * 64.0
                            * MEDIUM / durationNs);
                        r[5] = Math.max(r[5], rawBandwidth(device, LARGE, qps, durationNs));
                        batches(one, source, remote, 1, LARGE, 200_000_000L);
                        r[2] = Math.max(r[2], batches(one, source, remote, 1, LARGE, durationNs) * (double) LARGE
                            / durationNs);
                    }
                }
                barrier.await();
                result.complete(r);
            } catch (Throwable t) {
                result.completeExceptionally(t);
                barrier.reset();
            }
        });
        double[] r = result.get(600, TimeUnit.SECONDS);
        target.get(60, TimeUnit.SECONDS);
        return r;
    }

    /** Runs batches of {@code count} × {@code bytes} WRITEs until {@code durationNs} passed; returns how many. */
    private static long batches(TransferBatch batch, LocalSegment source, RemoteSegment remote, int count, int bytes,
                                long durationNs) {
        long n = 0;
        long end = System.nanoTime() + durationNs;
        do {
            if (!fill(batch, source, remote, count, bytes).submit().await()) {
                throw new IllegalStateException(batch.toString());
            }
            n++;
        } while (System.nanoTime() - end < 0);
        return n;
    }

    /**
     * Batches of 64 × {@code bytes} WRITEs, two in flight (the next is submitted before the last is awaited, as a
     * streaming user does), until {@code durationNs} passed; returns how many completed.
     */
    private static long twoInFlight(TransferBatch a, TransferBatch b, LocalSegment source, RemoteSegment remote,
                                    int bytes, long durationNs) {
        long n = 0;
        long end = System.nanoTime() + durationNs;
        TransferBatch inFlight = fill(a, source, remote, 64, bytes).submit();
        TransferBatch next = b;
        do {
            fill(next, source, remote, 64, bytes).submit();
            if (!inFlight.await()) {
                throw new IllegalStateException(inFlight.toString());
            }
            n++;
            TransferBatch t = inFlight;
            inFlight = next;
            next = t;
        } while (System.nanoTime() - end < 0);
        if (!inFlight.await()) {
            throw new IllegalStateException(inFlight.toString());
        }
        return n + 1;
    }

    /** Clears {@code batch} and adds {@code count} WRITEs of {@code bytes}, place i to place i. */
    private static TransferBatch fill(TransferBatch batch, LocalSegment source, RemoteSegment remote, int count,
                                      int bytes) {
        batch.clear();
        for (int i = 0; i < count; i++) {
            batch.write(source, (long) i * bytes, remote, (long) i * bytes, bytes);
        }
        return batch;
    }

    /** A connected pair of raw verbs setups (two contexts of one device), {@code qps} queue pairs. */
    private static final class RawPair implements AutoCloseable {
        final Context client;
        final Context server;
        final CompletionQueue cq;
        final QueuePair[] qps;
        final MemoryRegion source;
        final MemoryRegion target;
        final Thread serverPoller;
        volatile boolean closing;

        RawPair(String device, int qps, long bytes) {
            client = Verbs.device(device).open(Reach.HOST);
            server = Verbs.device(device).open(Reach.HOST);
            ProtectionDomain cpd = client.allocateProtectionDomain();
            ProtectionDomain spd = server.allocateProtectionDomain();
            cq = client.createCompletionQueue(4096);
            CompletionQueue scq = server.createCompletionQueue(4096);
            source = cpd.allocateMemory(bytes, AccessFlag.LOCAL_WRITE);
            target = spd.allocateMemory(bytes, AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE);
            this.qps = new QueuePair[qps];
            for (int k = 0; k < qps; k++) {
                QueuePair c = cpd.createQueuePair(QueuePairInitAttributes.of(cq).withDepths(128, 1));
                QueuePair s = spd.createQueuePair(QueuePairInitAttributes.of(scq).withDepths(4, 1));
                c.modify(QueuePairAttributes.toInit());
                s.modify(QueuePairAttributes.toInit(AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE));
                s.modify(QueuePairAttributes.toReadyToReceive(c.localEndpoint()));
                s.modify(QueuePairAttributes.toReadyToSend(s.initialPsn()));
                c.modify(QueuePairAttributes.toReadyToReceive(s.localEndpoint()));
                c.modify(QueuePairAttributes.toReadyToSend(c.initialPsn()));
                this.qps[k] = c;
            }
            // The passive side polls its completion queue as perf write_bw's server does (and as the engine's agent
            // does): some providers progress the responder there.
            serverPoller = Thread.ofPlatform().daemon().start(() -> {
                WorkCompletion[] wc = WorkCompletion.array(16);
                while (!closing) {
                    scq.poll(wc, wc.length, 10_000_000L);
                }
            });
        }

        @Override
        public void close() {
            closing = true;
            try {
                serverPoller.join();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            client.close();
            server.close();
        }
    }

    /** µs per signaled 4 KiB RDMA_WRITE, posted and polled one at a time. */
    private static double rawLatencyUs(String device, long durationNs) {
        try (RawPair p = new RawPair(device, 1, SMALL)) {
            SendWorkRequest wr = new SendWorkRequest(1).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
                .remote(p.target.address(), p.target.rkey()).local(p.source, 0, SMALL);
            WorkCompletion[] wc = WorkCompletion.array(16);
            loopLatency(p, wr, wc, 200_000_000L);
            long n = loopLatency(p, wr, wc, durationNs);
            return durationNs / 1e3 / n;
        }
    }

    private static long loopLatency(RawPair p, SendWorkRequest wr, WorkCompletion[] wc, long durationNs) {
        long n = 0;
        long end = System.nanoTime() + durationNs;
        do {
            p.qps[0].postSend(wr);
            while (p.cq.poll(wc, wc.length) == 0) {
                Thread.onSpinWait();
            }
            if (!wc[0].isSuccess()) {
                throw new IllegalStateException(wc[0].toString());
            }
            n++;
        } while (System.nanoTime() - end < 0);
        return n;
    }

    /**
     * GB/s of a stream of {@code bytes} RDMA_WRITEs over {@code qps} queue pairs, 128 in flight on each; WRITEs of
     * 64 KiB cycle over 64 places, as the engine's batch of 64 × 64 KiB does (the same cache footprint).
     */
    /** GB/s of a raw WRITE stream of {@code bytes} over {@code qps} queue pairs (also KvCacheBench's baseline). */
    static double rawBandwidth(String device, int bytes, int qps, long durationNs) {
        int places = bytes < (1 << 20) ? 64 : 1;
        try (RawPair p = new RawPair(device, qps, (long) bytes * places)) {
            SendWorkRequest wr = new SendWorkRequest(1).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED);
            WorkCompletion[] wc = WorkCompletion.array(64);
            int depth = bytes >= (1 << 20) ? 2 : 128;
            streamBandwidth(p, wr, wc, depth, bytes, places, 200_000_000L);
            return streamBandwidth(p, wr, wc, depth, bytes, places, durationNs) * (double) bytes / durationNs;
        }
    }

    /**
     * GB/s of raw WRITEs of {@code bytes} posted the way one engine batch of {@code count} is: all posted round
     * robin over the queue pairs, then every completion awaited, then the next; {@code count} places.
     */
    static double rawBatchBandwidth(String device, int bytes, int count, int qps, long durationNs) {
        try (RawPair p = new RawPair(device, qps, (long) bytes * count)) {
            SendWorkRequest wr = new SendWorkRequest(1).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED);
            WorkCompletion[] wc = WorkCompletion.array(64);
            rawBatches(p, wr, wc, bytes, count, 200_000_000L);
            return rawBatches(p, wr, wc, bytes, count, durationNs) * (double) count * bytes / durationNs;
        }
    }

    private static long rawBatches(RawPair p, SendWorkRequest wr, WorkCompletion[] wc, int bytes, int count,
                                   long durationNs) {
        long batches = 0;
        long end = System.nanoTime() + durationNs;
        do {
            for (int i = 0; i < count; i++) {
                long offset = (long) i * bytes;
                wr.remote(p.target.address() + offset, p.target.rkey()).local(p.source, offset, bytes);
                p.qps[i % p.qps.length].postSend(wr);
            }
            for (int left = count; left > 0; ) {
                int n = p.cq.poll(wc, wc.length);
                for (int i = 0; i < n; i++) {
                    if (!wc[i].isSuccess()) {
                        throw new IllegalStateException(wc[i].toString());
                    }
                }
                left -= n;
            }
            batches++;
        } while (System.nanoTime() - end < 0);
        return batches;
    }

    private static long streamBandwidth(RawPair p, SendWorkRequest wr, WorkCompletion[] wc, int depth, int bytes,
                                        int places, long durationNs) {
        int place = 0;
        int[] outstanding = new int[p.qps.length];
        long done = 0;
        long end = System.nanoTime() + durationNs;
        int next = 0;
        while (System.nanoTime() - end < 0) {
            for (int k = 0; k < p.qps.length; k++) {
                int q = (next + k) % p.qps.length;
                while (outstanding[q] < depth) {
                    long offset = (long) place * bytes;
                    place = place + 1 == places ? 0 : place + 1;
                    wr.remote(p.target.address() + offset, p.target.rkey()).local(p.source, offset, bytes);
                    p.qps[q].postSend(wr);
                    outstanding[q]++;
                }
            }
            next++;
            int n = p.cq.poll(wc, wc.length);
            for (int i = 0; i < n; i++) {
                if (!wc[i].isSuccess()) {
                    throw new IllegalStateException(wc[i].toString());
                }
                for (int k = 0; k < p.qps.length; k++) {
                    if (p.qps[k].queuePairNumber() == wc[i].queuePairNumber()) {
                        outstanding[k]--;
                    }
                }
            }
            done += n;
        }
        // drain
        int left = 0;
        for (int o : outstanding) {
            left += o;
        }
        while (left > 0) {
            left -= p.cq.poll(wc, wc.length);
        }
        return done;
    }
}
