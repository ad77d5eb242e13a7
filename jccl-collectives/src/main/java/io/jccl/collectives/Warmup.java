package io.jccl.collectives;

import io.jccl.collectives.kernel.Kernels;
import io.jccl.collectives.kernel.ReduceKernels;
import io.jccl.common.Log;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Locale;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Warm-up at communicator creation (JCCL_WARMUP; issue 16, bug 8): the ranks run the small-message all-reduces an
 * application starts with, on the communicator's own buffers, until this JVM's warm-up window has passed on every
 * rank.
 *
 * <p>Why: the first 8 B all-reduce of a fresh JVM took milliseconds (classes loaded and linked on first use, the
 * reduction kernels chosen, everything interpreted) against half a microsecond warm; the tools hide it with seconds
 * of warm-up, but a training job paid it in its first steps. Here the JVM loads, links and profiles those paths while
 * the job is starting anyway, and the JIT compiles them in the background.
 *
 * <p>Every rank must run the same number of rounds (they are collectives). Each round starts with an 8 B all-reduce
 * whose first element counts the ranks that are done, so all ranks read the same sum and stop together, after the
 * round in which the last of them became done. A rank is done when its JVM's window, which starts at the JVM's first
 * warm-up, has passed: a later communicator in the same JVM (a split, a second job step) runs one round. At most
 * {@link #MAX_ROUNDS} rounds, whatever the windows.
 *
 * <p>Most of a cold first all-reduce is the reduction kernels: the Vector API's classes load at the first reduction
 * (they are chosen then) and run interpreted, very slowly, until C2 compiles them. With JCCL_VECTOR=0 the first 8 B
 * all-reduce took 20–115 ms here, with the vector kernels 600–810 ms (2 ranks, shared 2-core VM at load 15). So
 * {@link #startKernels} selects and exercises the kernels on a daemon thread from the start of creation, alongside
 * joining (which mostly waits for the store and the peers), once per JVM.
 */
final class Warmup {
    /** Rounds at most: C2 compiles a method after some 10 000 calls, and then there is nothing left to gain. */
    static final int MAX_ROUNDS = 20_000;
    /** When this JVM's warm-up window began (0: no warm-up yet). */
    private static final AtomicLong WINDOW_START_NS = new AtomicLong();
    /** Whether this JVM's kernel warm-up thread was started. */
    private static final AtomicBoolean KERNELS_STARTED = new AtomicBoolean();
    /** Kernel calls of the background warm-up at most (C2 compiles after some 10 000). */
    static final int MAX_KERNEL_CALLS = 20_000;

    private Warmup() {
    }

    /**
     * Starts, once per JVM and only when warm-up is on and there are peers, a daemon thread that selects the
     * reduction kernels (loading the Vector API) and runs float32 sums of 8 B and 1 KiB on its own buffers, for at
     * most {@code windowNs} or {@link #MAX_KERNEL_CALLS} calls. Returns whether it started the thread now.
     */
    static boolean startKernels(long windowNs, int size) {
        if (windowNs <= 0 || size == 1 || !KERNELS_STARTED.compareAndSet(false, true)) {
            return false;
        }
        Thread t = new Thread(new KernelWarmup(windowNs), "jccl-kernel-warmup");
        t.setDaemon(true);
        t.start();
        return true;
    }

    /** The kernel warm-up (a named class: a lambda would be spun into a class at start-up). */
    private record KernelWarmup(long windowNs) implements Runnable {
        @Override
        public void run() {
            long startNs = System.nanoTime();
            ReduceKernels kernels = Kernels.selected();
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment a = arena.allocate(1024, 64);
                MemorySegment b = arena.allocate(1024, 64);
                MemorySegment[] sources = {a, b};
                long[] offsets = new long[2];
                for (int i = 0; i < MAX_KERNEL_CALLS && System.nanoTime() - startNs < windowNs; i++) {
                    long count = (i & 1) == 0 ? 2 : 256;
                    kernels.reduce(DataType.FLOAT32, ReduceOp.SUM, a, 0, b, 0, a, 0, count, 1);
                    kernels.reduce(DataType.FLOAT32, ReduceOp.SUM, sources, offsets, 2, b, 0, count, 1);
                }
            } catch (RuntimeException | LinkageError e) {
                // only a head start: the first collective selects the kernels itself (and reports a problem)
            }
        }
    }

    /**
     * The operations {@code rounds} warm-up rounds ran: four per round, one in the last (its 8 B all-reduce said
     * stop). They count in the operation numbers ({@code op #N}) like any operation.
     */
    static int operations(int rounds) {
        return rounds == 0 ? 0 : 4 * (rounds - 1) + 1;
    }

    /**
     * Warms {@code comm}'s small all-reduces (8 B out of place and in place, 1 KiB, a {@code float[]}) for up to
     * {@code windowNs} of this JVM's time; returns the rounds run (0 when off or alone).
     */
    static int run(Communicator comm, long windowNs) {
        return run(comm, windowNs, WINDOW_START_NS);
    }

    /** {@link #run(Communicator, long)} with the window's start kept in {@code windowStart} (tests: a JVM each). */
    static int run(Communicator comm, long windowNs, AtomicLong windowStart) {
        if (windowNs <= 0 || comm.size() == 1) {
            return 0;
        }
        MemorySegment send = comm.allocate(1024);
        MemorySegment recv = comm.allocate(1024);
        float[] heap = new float[2];
        long startNs = System.nanoTime();
        windowStart.compareAndSet(0, startNs);
        long windowStartNs = windowStart.get();
        int rounds = 0;
        while (rounds < MAX_ROUNDS) {
            boolean done = System.nanoTime() - windowStartNs >= windowNs;
            send.set(ValueLayout.JAVA_FLOAT, 0, done ? 1f : 0f);
            comm.allReduce(send, recv, 2, DataType.FLOAT32, ReduceOp.SUM);
            rounds++;
            if (recv.get(ValueLayout.JAVA_FLOAT, 0) >= comm.size()) {
                break;
            }
            comm.allReduce(recv, 2, DataType.FLOAT32, ReduceOp.SUM);
            comm.allReduce(send, recv, 256, DataType.FLOAT32, ReduceOp.SUM);
            heap[0] = 0f;
            heap[1] = 0f;
            comm.allReduce(heap, ReduceOp.SUM);
        }
        int done = rounds;
        double ms = (System.nanoTime() - startNs) / 1e6;
        Log.get().info(comm.rank(), Log.Subsys.INIT, () -> String.format(Locale.ROOT, "warm-up: %d rounds of small "
            + "all-reduces in %.1f ms (JCCL_WARMUP=0 turns it off)", done, ms));
        return rounds;
    }
}
