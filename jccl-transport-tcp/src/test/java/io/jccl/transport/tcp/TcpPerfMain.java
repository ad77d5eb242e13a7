package io.jccl.transport.tcp;

import io.jccl.transport.tcp.TcpTestSupport.Side;
import io.jccl.verbs.Context;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.WorkCompletion;

import java.util.Arrays;

/**
 * Quick loopback numbers for the tcp provider (not a test): WRITE round trip (post → completion, which needs the
 * responder's ACK), SEND/RECV ping-pong half round trip, and pipelined WRITE bandwidth.
 * Run: java -cp target/classes:target/test-classes:$(verbs jar) io.jccl.transport.tcp.TcpPerfMain
 */
public final class TcpPerfMain {
    private TcpPerfMain() {
    }

    public static void main(String[] args) {
        try (Context ca = TcpTestSupport.open(); Context cb = TcpTestSupport.open()) {
            Side a = Side.create(ca, QueuePairInitAttributes.of(ca.createCompletionQueue(4)).withDepths(64, 64));
            Side b = Side.create(cb, QueuePairInitAttributes.of(cb.createCompletionQueue(4)).withDepths(64, 64));
            TcpTestSupport.connect(a.qp(), b.qp());
            int big = 1 << 20;
            MemoryRegion ma = a.pd().allocateMemory(16L * big, TcpTestSupport.ALL);
            MemoryRegion mb = b.pd().allocateMemory(16L * big, TcpTestSupport.ALL);
            WorkCompletion[] wc = WorkCompletion.array(16);
            SendWorkRequest wr = new SendWorkRequest();

            // WRITE 8 B round trip
            int iters = 20000;
            long[] samples = new long[iters];
            for (int i = 0; i < iters; i++) {
                long t0 = System.nanoTime();
                a.qp().postSend(wr.wrId(i).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED | SendFlag.INLINE)
                    .remote(mb.address(), mb.rkey()).local(ma, 0, 8));
                while (a.cq().poll(wc, 1) == 0) {
                    Thread.onSpinWait();
                }
                samples[i] = System.nanoTime() - t0;
            }
            report("write 8 B, post to completion", samples, iters / 2);
            for (int i = 0; i < iters; i++) {
                long t0 = System.nanoTime();
                a.qp().postSend(wr.wrId(i).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
                    .remote(mb.address(), mb.rkey()).local(ma, 0, 4096));
                while (a.cq().poll(wc, 1) == 0) {
                    Thread.onSpinWait();
                }
                samples[i] = System.nanoTime() - t0;
            }
            report("write 4 KiB, post to completion", samples, iters / 2);

            // SEND/RECV ping-pong (b echoes)
            ReceiveWorkRequest recv = new ReceiveWorkRequest();
            for (int i = 0; i < 32; i++) {
                recv.local(ma, 8L * big, 64);
                a.qp().postReceive(recv);
                recv.local(mb, 8L * big, 64);
                b.qp().postReceive(recv);
            }
            SendWorkRequest echo = new SendWorkRequest();
            for (int i = 0; i < iters; i++) {
                long t0 = System.nanoTime();
                a.qp().postSend(wr.wrId(i).opcode(SendOpcode.SEND).flags(SendFlag.INLINE).local(ma, 0, 8));
                awaitRecv(b, wc);
                b.qp().postReceive(recv);
                b.qp().postSend(echo.wrId(i).opcode(SendOpcode.SEND).flags(SendFlag.INLINE).local(mb, 0, 8));
                awaitRecv(a, wc);
                recv.local(ma, 8L * big, 64);
                a.qp().postReceive(recv);
                recv.local(mb, 8L * big, 64);
                samples[i] = (System.nanoTime() - t0) / 2;
            }
            report("send 8 B ping-pong, half round trip", samples, iters / 2);

            // bandwidth: writes of 4 KiB .. 1 MiB, 8 outstanding
            int depth = args.length > 0 ? Integer.parseInt(args[0]) : 8;
            for (int size : new int[] {4096, 65536, big, big}) {
                int messages = (int) Math.min(200_000, (2000L * big) / size);
                int posted = 0;
                int done = 0;
                long t0 = System.nanoTime();
                while (done < messages) {
                    while (posted - done < depth && posted < messages) {
                        a.qp().postSend(wr.wrId(posted).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
                            .remote(mb.address() + (posted % 8) * (long) big, mb.rkey()).local(ma, (posted % 8)
                                * (long) big, size));
                        posted++;
                    }
                    int n = a.cq().poll(wc, 16);
                    for (int k = 0; k < n; k++) {
                        if (!wc[k].isSuccess()) {
                            throw new IllegalStateException(wc[k].status().toString());
                        }
                    }
                    done += n;
                }
                double seconds = (System.nanoTime() - t0) / 1e9;
                System.out.printf("write %d B x %d, %d outstanding: %.3f GB/s, %.0f msg/s%n", size, messages, depth,
                    messages * (double) size / seconds / 1e9, messages / seconds);
            }
        }
    }

    private static void awaitRecv(Side side, WorkCompletion[] wc) {
        while (true) {
            int n = side.cq().poll(wc, 1);
            if (n == 1 && !wc[0].isSuccess()) {
                throw new IllegalStateException(wc[0].status().toString());
            }
            if (n == 1 && wc[0].opcode().isReceive()) {
                return;
            }
        }
    }

    private static void report(String what, long[] samples, int warmup) {
        long[] s = Arrays.copyOfRange(samples, warmup, samples.length);
        Arrays.sort(s);
        double mean = Arrays.stream(s).average().orElse(0);
        System.out.printf("%s: median %.1f us, p99 %.1f us, p99.9 %.1f us, mean %.1f us%n", what,
            s[s.length / 2] / 1e3, s[(int) (s.length * 0.99)] / 1e3, s[(int) (s.length * 0.999)] / 1e3, mean / 1e3);
    }
}
