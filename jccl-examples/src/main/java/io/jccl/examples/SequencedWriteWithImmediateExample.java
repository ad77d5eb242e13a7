package io.jccl.examples;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.Context;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.Verbs;
import io.jccl.verbs.WorkCompletion;
import io.jccl.verbs.WorkCompletionOpcode;

import java.lang.foreign.ValueLayout;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * RDMA WRITE_WITH_IMM carrying a sequence number: the client writes record {@code i} into slot {@code i} of the
 * server's log and puts {@code i} in the immediate data; the server asserts that immediates arrive in
 * order and that each record's bytes are already in place when its completion arrives (RC ordering). Setup is
 * explicit: endpoint records are swapped over a socket and each side drives its own QP states.
 *
 * <pre>java ... io.jccl.examples.SequencedWriteWithImmediateExample [--device shm0|tcp0] [--messages 10000]</pre>
 */
public final class SequencedWriteWithImmediateExample {
    private static final int SLOTS = 64;
    private static final int RECORD_BYTES = 256;

    private SequencedWriteWithImmediateExample() {
    }

    /** Entry point. */
    public static void main(String[] args) throws Exception {
        String device = ExampleSupport.option(args, "--device", "shm0");
        int messages = Integer.parseInt(ExampleSupport.option(args, "--messages", "10000"));
        System.out.println(run(device, messages));
    }

    /** Runs server and client in this process; returns the server's report. */
    public static String run(String device, int messages) throws Exception {
        try (ServerSocket exchange = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            CompletableFuture<String> server = CompletableFuture.supplyAsync(() -> serve(device, exchange, messages));
            try (Socket socket = new Socket(InetAddress.getLoopbackAddress(), exchange.getLocalPort())) {
                send(device, socket, messages);
            } catch (Exception clientFailure) {
                // The server's failure usually explains the client's (a closed exchange channel).
                try {
                    server.get(10, TimeUnit.SECONDS);
                } catch (java.util.concurrent.ExecutionException serverFailure) {
                    clientFailure.addSuppressed(serverFailure.getCause());
                }
                throw clientFailure;
            }
            return server.get(60, TimeUnit.SECONDS);
        }
    }

    private static String serve(String device, ServerSocket exchange, int messages) {
        try (Context context = Verbs.device(device).open();
             ProtectionDomain domain = context.allocateProtectionDomain();
             CompletionQueue queue = context.createCompletionQueue(2 * SLOTS);
             MemoryRegion ring = domain.allocateMemory((long) messages * RECORD_BYTES, AccessFlag.LOCAL_WRITE,
                 AccessFlag.REMOTE_WRITE);
             QueuePair queuePair = domain.createQueuePair(QueuePairInitAttributes.of(queue).withDepths(16, SLOTS));
             Socket socket = exchange.accept()) {
            // Receives can be posted from INIT on: post them before the peer can possibly send.
            queuePair.modify(io.jccl.verbs.QueuePairAttributes.toInit(AccessFlag.REMOTE_WRITE));
            ReceiveWorkRequest receive = new ReceiveWorkRequest().noData();
            for (int i = 0; i < SLOTS; i++) {
                queuePair.postReceive(receive.wrId(i));
            }
            var channel = new ExplicitSetup.LineChannel(socket);
            var remote = channel.exchange(queuePair.localEndpoint());
            ExplicitSetup.finish(queuePair, remote);
            // The client needs the log's address and key: one more line.
            channel.send(ring.address() + " " + ring.rkey());
            WorkCompletion[] completions = WorkCompletion.array(16);
            int expected = 0;
            long start = System.nanoTime();
            while (expected < messages) {
                int n = queue.poll(completions, completions.length, TimeUnit.SECONDS.toNanos(10));
                if (n == 0) {
                    throw new IllegalStateException("no completion for 10 s at message " + expected);
                }
                // Stop at the last record: once the client has its last completion it closes, and the receives still
                // posted here then flush (WR_FLUSH_ERR) — possibly within this very batch.
                for (int k = 0; k < n && expected < messages; k++) {
                    WorkCompletion completion = completions[k];
                    if (!completion.isSuccess() || completion.opcode() != WorkCompletionOpcode.RECV_RDMA_WITH_IMM) {
                        throw new IllegalStateException("unexpected completion " + completion);
                    }
                    if (completion.immediateData() != expected) {
                        throw new IllegalStateException("immediate " + completion.immediateData()
                            + " arrived where " + expected + " was due: order broken");
                    }
                    long slot = (long) expected * RECORD_BYTES;
                    int stamp = ring.segment().get(ValueLayout.JAVA_INT_UNALIGNED, slot + RECORD_BYTES - 4);
                    if (stamp != expected) {
                        throw new IllegalStateException("record " + expected + " not in place when its immediate "
                            + "arrived (found stamp " + stamp + ")");
                    }
                    queuePair.postReceive(receive.wrId(expected));
                    expected++;
                }
            }
            double seconds = (System.nanoTime() - start) / 1e9;
            return String.format("%s: %d WRITE_WITH_IMM records arrived in order, each in place before its "
                + "immediate (%.0f records/s)", device, messages, messages / seconds);
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    private static void send(String device, Socket socket, int messages) throws Exception {
        try (Context context = Verbs.device(device).open();
             ProtectionDomain domain = context.allocateProtectionDomain();
             CompletionQueue queue = context.createCompletionQueue(2 * SLOTS);
             MemoryRegion records = domain.allocateMemory((long) SLOTS * RECORD_BYTES, AccessFlag.LOCAL_WRITE);
             QueuePair queuePair = domain.createQueuePair(QueuePairInitAttributes.of(queue).withDepths(SLOTS, 16))) {
            var channel = new ExplicitSetup.LineChannel(socket);
            var remote = channel.exchange(queuePair.localEndpoint());
            ExplicitSetup.connect(queuePair, remote);
            String[] ringInfo = channel.receive().split(" ");
            long ringAddress = Long.parseLong(ringInfo[0]);
            int ringKey = Integer.parseInt(ringInfo[1]);
            SendWorkRequest write = new SendWorkRequest().opcode(SendOpcode.RDMA_WRITE_WITH_IMM)
                .flags(SendFlag.SIGNALED);
            WorkCompletion[] completions = WorkCompletion.array(16);
            int outstanding = 0;
            for (int i = 0; i < messages; i++) {
                // At most SLOTS/2 in flight: local record buffers are reused only after their WRITE completed.
                // When the server lags in re-posting receives, RNR retries (rnr_retry 7) hold the client back.
                while (outstanding >= SLOTS / 2) {
                    int n = queue.poll(completions, completions.length, TimeUnit.SECONDS.toNanos(10));
                    if (n == 0) {
                        throw new IllegalStateException("client: no completion for 10 s");
                    }
                    for (int k = 0; k < n; k++) {
                        if (!completions[k].isSuccess()) {
                            throw new IllegalStateException("client: " + completions[k]);
                        }
                    }
                    outstanding -= n;
                }
                long slot = (long) (i % SLOTS) * RECORD_BYTES;
                long target = (long) i * RECORD_BYTES;
                records.segment().asSlice(slot, RECORD_BYTES).fill((byte) i);
                records.segment().set(ValueLayout.JAVA_INT_UNALIGNED, slot + RECORD_BYTES - 4, i);
                write.wrId(i).immediateData(i).remote(ringAddress + target, ringKey).local(records, slot, RECORD_BYTES);
                queuePair.postSend(write);
                outstanding++;
            }
            while (outstanding > 0) {
                int n = queue.poll(completions, completions.length, TimeUnit.SECONDS.toNanos(10));
                if (n == 0) {
                    throw new IllegalStateException("client: no completion for 10 s while draining");
                }
                outstanding -= n;
            }
        }
    }
}
