package io.jccl.transport.shm;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.WorkCompletion;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;

/**
 * A quick, single-JVM sanity probe of the data path (two contexts, two busy-polling threads): 8-byte WRITE and
 * SEND/RECV ping-pong latency and 1 MiB WRITE bandwidth. Not a test and not the project benchmark; run with
 * {@code java --enable-native-access=ALL-UNNAMED -cp <test classpath> io.jccl.transport.shm.ShmPerfProbe}.
 */
public final class ShmPerfProbe {
    private static final VarHandle LONG = ValueLayout.JAVA_LONG.varHandle();

    private ShmPerfProbe() {
    }

    /** Entry point. */
    public static void main(String[] args) throws Exception {
        int iterations = args.length > 0 ? Integer.parseInt(args[0]) : 200_000;
        try (ShmTestSupport.Side a = new ShmTestSupport.Side(); ShmTestSupport.Side b = new ShmTestSupport.Side()) {
            ShmTestSupport.connect(a, b);
            MemoryRegion ra = a.pd.allocateMemory(2 << 20, ShmTestSupport.ALL_REMOTE);
            MemoryRegion rb = b.pd.allocateMemory(2 << 20, ShmTestSupport.ALL_REMOTE);
            for (int round = 0; round < 3; round++) {
                System.out.printf("WRITE 8 B one-way: %.3f us%n", writePingPong(a, b, ra, rb, iterations));
                System.out.printf("SEND  8 B one-way: %.3f us%n", sendPingPong(a, b, ra, rb, iterations / 2));
                System.out.printf("WRITE 1 MiB: %.1f GB/s%n", writeBandwidth(a, ra, rb, 4000));
            }
        }
    }

    private static double writePingPong(ShmTestSupport.Side a, ShmTestSupport.Side b, MemoryRegion ra,
                                        MemoryRegion rb, int iterations) throws Exception {
        MemorySegment flagA = ra.segment();
        MemorySegment flagB = rb.segment();
        LONG.setVolatile(flagA, 0L, 0L);
        LONG.setVolatile(flagB, 0L, 0L);
        Thread pong = new Thread(() -> {
            SendWorkRequest w = new SendWorkRequest();
            for (long i = 1; i <= iterations; i++) {
                while ((long) LONG.getAcquire(flagB, 0L) != i) {
                    Thread.onSpinWait();
                }
                flagB.set(ValueLayout.JAVA_LONG, 64, i);
                b.qp.postSend(w.opcode(SendOpcode.RDMA_WRITE).flags(0).local(rb, 64, 8).remote(ra.address(),
                    ra.rkey()));
            }
        });
        pong.start();
        SendWorkRequest w = new SendWorkRequest();
        long start = System.nanoTime();
        for (long i = 1; i <= iterations; i++) {
            flagA.set(ValueLayout.JAVA_LONG, 64, i);
            a.qp.postSend(w.opcode(SendOpcode.RDMA_WRITE).flags(0).local(ra, 64, 8).remote(rb.address(), rb.rkey()));
            while ((long) LONG.getAcquire(flagA, 0L) != i) {
                Thread.onSpinWait();
            }
        }
        long ns = System.nanoTime() - start;
        pong.join();
        return ns / 1000.0 / iterations / 2;
    }

    private static double sendPingPong(ShmTestSupport.Side a, ShmTestSupport.Side b, MemoryRegion ra,
                                       MemoryRegion rb, int iterations) throws Exception {
        ReceiveWorkRequest r = new ReceiveWorkRequest();
        for (int i = 0; i < 16; i++) {
            a.qp.postReceive(r.wrId(i).local(ra, 4096, 64));
            b.qp.postReceive(r.wrId(i).local(rb, 4096, 64));
        }
        Thread pong = new Thread(() -> {
            SendWorkRequest w = new SendWorkRequest();
            ReceiveWorkRequest rr = new ReceiveWorkRequest();
            WorkCompletion[] wc = WorkCompletion.array(4);
            for (int i = 0; i < iterations; i++) {
                while (b.cq.poll(wc, 1) == 0) {
                    Thread.onSpinWait();
                }
                b.qp.postReceive(rr.local(rb, 4096, 64));
                b.qp.postSend(w.opcode(SendOpcode.SEND).flags(SendFlag.INLINE).local(rb, 0, 8));
            }
        });
        pong.start();
        SendWorkRequest w = new SendWorkRequest();
        WorkCompletion[] wc = WorkCompletion.array(4);
        long start = System.nanoTime();
        for (int i = 0; i < iterations; i++) {
            a.qp.postSend(w.opcode(SendOpcode.SEND).flags(SendFlag.INLINE).local(ra, 0, 8));
            while (a.cq.poll(wc, 1) == 0) {
                Thread.onSpinWait();
            }
            a.qp.postReceive(r.local(ra, 4096, 64));
        }
        long ns = System.nanoTime() - start;
        pong.join();
        // drain the spare receives so the next round starts clean
        return ns / 1000.0 / iterations / 2;
    }

    private static double writeBandwidth(ShmTestSupport.Side a, MemoryRegion ra, MemoryRegion rb, int count) {
        SendWorkRequest w = new SendWorkRequest();
        WorkCompletion[] wc = WorkCompletion.array(16);
        int length = 1 << 20;
        long start = System.nanoTime();
        for (int i = 0; i < count; i++) {
            boolean signaled = (i & 63) == 63;
            a.qp.postSend(w.opcode(SendOpcode.RDMA_WRITE).flags(signaled ? SendFlag.SIGNALED : 0)
                .local(ra, 0, length).remote(rb.address(), rb.rkey()));
            if (signaled) {
                while (a.cq.poll(wc, 16) == 0) {
                    Thread.onSpinWait();
                }
            }
        }
        long ns = System.nanoTime() - start;
        return (double) count * length / ns;
    }
}
