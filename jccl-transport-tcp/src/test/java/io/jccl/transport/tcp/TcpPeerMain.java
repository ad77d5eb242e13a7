package io.jccl.transport.tcp;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.Context;
import io.jccl.verbs.Endpoint;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.QueuePairAttributes;
import io.jccl.verbs.QueuePairInitAttributes;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.Verbs;
import io.jccl.verbs.WorkCompletion;
import io.jccl.verbs.WorkCompletionOpcode;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.util.SplittableRandom;

/**
 * A peer process for {@link TcpSystemTest} (run inside a network namespace) and {@link TcpLivenessTest} (on
 * loopback). Line protocol on stdin/stdout: it prints {@code READY <endpoint> <region address> <rkey>}, then answers
 * {@code CONNECT <endpoint> [<timeout> <retry count>]} (RTS attributes; perftest's 14 and 7 by default),
 * {@code EXERCISE <address> <rkey> <bytes>} (WRITE, READ back, atomics, SENDs with immediate against the peer),
 * {@code RECEIVE <n>} (wait for n SENDs and check them), {@code SEND_BYTES <value>} (one 64-byte SEND filled with
 * {@code value}), {@code RECEIVE_ONE} (wait for one SEND, answer its length and first byte, post the receive again),
 * {@code CHECK <offset> <length> <value>} (bytes of the region), {@code BUSY <ms>} (compute without polling or
 * posting anything), {@code STATE} (the QP's state) and {@code QUIT}. Answers start with OK or FAIL.
 */
public final class TcpPeerMain {
    private static final int REGION = 16 << 20;
    private static final int ATOMIC_OFFSET = REGION - 64;

    private TcpPeerMain() {
    }

    public static void main(String[] args) throws Exception {
        try (Context context = Verbs.device("tcp0").open()) {
            ProtectionDomain pd = context.allocateProtectionDomain();
            CompletionQueue cq = context.createCompletionQueue(1024);
            QueuePair qp = pd.createQueuePair(QueuePairInitAttributes.of(cq).withDepths(64, 64));
            qp.modify(QueuePairAttributes.toInit(AccessFlag.REMOTE_WRITE, AccessFlag.REMOTE_READ,
                AccessFlag.REMOTE_ATOMIC));
            MemoryRegion region = pd.allocateMemory(REGION, AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE,
                AccessFlag.REMOTE_READ, AccessFlag.REMOTE_ATOMIC);
            System.out.println("READY " + qp.localEndpoint().encode() + " " + region.address() + " " + region.rkey()
                + " " + context.query().ports().getFirst().gid());
            System.out.flush();
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            String line;
            while ((line = in.readLine()) != null) {
                String[] w = line.trim().split(" ");
                try {
                    String answer = switch (w[0]) {
                        case "CONNECT" -> {
                            Endpoint peer = Endpoint.decode(w[1]);
                            qp.modify(QueuePairAttributes.toReadyToReceive(peer));
                            QueuePairAttributes rts = QueuePairAttributes.toReadyToSend(qp.initialPsn());
                            if (w.length >= 4) {
                                rts.timeout(Integer.parseInt(w[2])).retryCount(Integer.parseInt(w[3]));
                            }
                            qp.modify(rts);
                            ReceiveWorkRequest recv = new ReceiveWorkRequest();
                            for (int i = 0; i < 8; i++) {
                                recv.wrId(i);
                                recv.local(region, 8L * 1024 * 1024 + i * 4096L, 4096);
                                qp.postReceive(recv);
                            }
                            yield "OK connected";
                        }
                        case "EXERCISE" -> exercise(qp, cq, region, Long.parseLong(w[1]), Integer.parseInt(w[2]),
                            Integer.parseInt(w[3]));
                        case "RECEIVE" -> receive(cq, region, Integer.parseInt(w[1]));
                        case "WRITE_STATUS" -> writeStatus(qp, cq, region, Long.parseLong(w[1]),
                            Integer.parseInt(w[2]));
                        case "BANDWIDTH" -> bandwidth(qp, cq, region, Long.parseLong(w[1]), Integer.parseInt(w[2]),
                            Integer.parseInt(w[3]), Integer.parseInt(w[4]));
                        case "LATENCY" -> latency(qp, cq, region, Long.parseLong(w[1]), Integer.parseInt(w[2]),
                            Integer.parseInt(w[3]));
                        case "SEND_BYTES" -> {
                            region.segment().asSlice(0, 64).fill((byte) Integer.parseInt(w[1]));
                            qp.postSend(new SendWorkRequest().wrId(6).opcode(SendOpcode.SEND).flags(SendFlag.SIGNALED)
                                .local(region, 0, 64));
                            await(cq);
                            yield "OK sent";
                        }
                        case "RECEIVE_ONE" -> {
                            WorkCompletion wc = await(cq);
                            long base = 8L * 1024 * 1024 + wc.wrId() * 4096L;
                            byte first = region.segment().get(ValueLayout.JAVA_BYTE, base);
                            qp.postReceive(new ReceiveWorkRequest().wrId(wc.wrId()).local(region, base, 4096));
                            yield "OK " + wc.byteLength() + " " + first;
                        }
                        case "CHECK" -> {
                            long offset = Long.parseLong(w[1]);
                            int length = Integer.parseInt(w[2]);
                            byte value = (byte) Integer.parseInt(w[3]);
                            for (int i = 0; i < length; i++) {
                                if (region.segment().get(ValueLayout.JAVA_BYTE, offset + i) != value) {
                                    yield "FAIL byte " + i + " is " + region.segment().get(ValueLayout.JAVA_BYTE,
                                        offset + i);
                                }
                            }
                            yield "OK checked";
                        }
                        case "BUSY" -> "OK busy " + busy(Long.parseLong(w[1]));
                        case "STATE" -> "OK " + qp.state().shortName();
                        case "QUIT" -> "OK bye";
                        default -> "FAIL unknown command " + w[0];
                    };
                    System.out.println(answer);
                } catch (RuntimeException e) {
                    System.out.println("FAIL " + e);
                }
                System.out.flush();
                if (w[0].equals("QUIT")) {
                    break;
                }
            }
        }
    }

    /**
     * Computes for {@code ms} milliseconds without touching the verbs API: no poll, no post (an application busy in
     * its own work). Returns a checksum so that the loop is not optimised away.
     */
    private static long busy(long ms) {
        long end = System.nanoTime() + ms * 1_000_000L;
        long x = 1;
        while (System.nanoTime() < end) {
            for (int i = 0; i < 10_000; i++) {
                x = x * 6364136223846793005L + 1442695040888963407L;
            }
        }
        return x & 0xFFFF;
    }

    private static WorkCompletion await(CompletionQueue cq) {
        WorkCompletion[] wc = WorkCompletion.array(1);
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (System.nanoTime() < deadline) {
            if (cq.poll(wc, 1, 10_000_000L) == 1) {
                if (!wc[0].isSuccess()) {
                    throw new IllegalStateException("completion " + wc[0].status() + " for wr " + wc[0].wrId());
                }
                return wc[0];
            }
        }
        throw new IllegalStateException("no completion within 30 s");
    }

    private static String exercise(QueuePair qp, CompletionQueue cq, MemoryRegion region, long address, int rkey,
                                   int bytes) {
        SplittableRandom random = new SplittableRandom(bytes);
        for (long i = 0; i < bytes; i += 8) {
            region.segment().set(ValueLayout.JAVA_LONG, i, random.nextLong());
        }
        long start = System.nanoTime();
        SendWorkRequest wr = new SendWorkRequest();
        qp.postSend(wr.wrId(1).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED).remote(address, rkey)
            .local(region, 0, bytes));
        await(cq);
        long writeNs = System.nanoTime() - start;
        qp.postSend(wr.wrId(2).opcode(SendOpcode.RDMA_READ).remote(address, rkey).local(region, bytes, bytes));
        await(cq);
        long mismatch = region.segment().asSlice(0, bytes).mismatch(region.segment().asSlice(bytes, bytes));
        if (mismatch >= 0) {
            return "FAIL READ returned different bytes at " + mismatch;
        }
        for (int i = 0; i < 100; i++) {
            qp.postSend(wr.wrId(3).opcode(SendOpcode.ATOMIC_FETCH_AND_ADD).atomic(1, 0)
                .remote(address + ATOMIC_OFFSET, rkey).local(region, ATOMIC_OFFSET, 8));
            await(cq);
        }
        long seen = region.segment().get(ValueLayout.JAVA_LONG, ATOMIC_OFFSET);
        qp.postSend(wr.wrId(4).opcode(SendOpcode.ATOMIC_CMP_AND_SWP).atomic(100, 4242)
            .remote(address + ATOMIC_OFFSET, rkey).local(region, ATOMIC_OFFSET, 8));
        await(cq);
        long swapped = region.segment().get(ValueLayout.JAVA_LONG, ATOMIC_OFFSET);
        for (int i = 0; i < 4; i++) {
            region.segment().fill((byte) 0);
            region.segment().asSlice(0, 1000).fill((byte) (i + 1));
            qp.postSend(wr.wrId(5).opcode(SendOpcode.SEND_WITH_IMM).immediateData(1000 + i).local(region, 0, 1000));
            await(cq);
        }
        return "OK write " + bytes + " B in " + writeNs / 1000 + " us, fetch-add saw " + seen + ", swap saw "
            + swapped;
    }

    private static String receive(CompletionQueue cq, MemoryRegion region, int n) {
        StringBuilder sb = new StringBuilder("OK");
        for (int i = 0; i < n; i++) {
            WorkCompletion wc = await(cq);
            if (wc.opcode() != WorkCompletionOpcode.RECV || wc.byteLength() != 1000
                || wc.immediateData() != 1000 + i) {
                return "FAIL receive " + i + ": " + wc.opcode() + " " + wc.byteLength() + " " + wc.immediateData();
            }
            long base = 8L * 1024 * 1024 + wc.wrId() * 4096L;
            for (int b = 0; b < 1000; b++) {
                if (region.segment().get(ValueLayout.JAVA_BYTE, base + b) != (byte) (i + 1)) {
                    return "FAIL receive " + i + " byte " + b;
                }
            }
            sb.append(" imm=").append(wc.immediateData());
        }
        long counter = region.segment().get(ValueLayout.JAVA_LONG, ATOMIC_OFFSET);
        return sb.append(" atomic=").append(counter).toString();
    }

    /** Pipelined WRITEs of {@code size} bytes, 8 outstanding, for {@code seconds}. */
    private static String bandwidth(QueuePair qp, CompletionQueue cq, MemoryRegion region, long address, int rkey,
                                    int size, int seconds) {
        SendWorkRequest wr = new SendWorkRequest();
        WorkCompletion[] wc = WorkCompletion.array(16);
        long end = System.nanoTime() + seconds * 1_000_000_000L;
        long t0 = System.nanoTime();
        long posted = 0;
        long done = 0;
        int slots = Math.max(1, Math.min(8, (REGION / 2) / size));
        while (System.nanoTime() < end || done < posted) {
            while (posted - done < slots && System.nanoTime() < end) {
                long offset = (posted % slots) * (long) size;
                qp.postSend(wr.wrId(posted).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
                    .remote(address + offset, rkey).local(region, offset, size));
                posted++;
            }
            int n = cq.poll(wc, 16);
            for (int i = 0; i < n; i++) {
                if (!wc[i].isSuccess()) {
                    return "FAIL " + wc[i].status();
                }
            }
            done += n;
        }
        double s = (System.nanoTime() - t0) / 1e9;
        return String.format("OK bandwidth %d B x %d: %.3f GB/s", size, done, done * (double) size / s / 1e9);
    }

    /** WRITE of {@code size} bytes, post to completion, {@code iterations} times; median and p99. */
    private static String latency(QueuePair qp, CompletionQueue cq, MemoryRegion region, long address, int rkey,
                                  int iterations) {
        SendWorkRequest wr = new SendWorkRequest();
        WorkCompletion[] wc = WorkCompletion.array(1);
        long[] samples = new long[iterations];
        for (int i = 0; i < iterations; i++) {
            long t0 = System.nanoTime();
            qp.postSend(wr.wrId(i).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED | SendFlag.INLINE)
                .remote(address, rkey).local(region, 0, 8));
            while (cq.poll(wc, 1) == 0) {
                Thread.onSpinWait();
            }
            samples[i] = System.nanoTime() - t0;
        }
        java.util.Arrays.sort(samples, iterations / 2, iterations);
        long[] s = java.util.Arrays.copyOfRange(samples, iterations / 2, iterations);
        return String.format("OK latency write 8 B: median %.1f us, p99 %.1f us", s[s.length / 2] / 1e3,
            s[(int) (s.length * 0.99)] / 1e3);
    }

    /** One 64 KiB WRITE; answers with its completion status and how long it took, whatever the status. */
    private static String writeStatus(QueuePair qp, CompletionQueue cq, MemoryRegion region, long address,
                                      int rkey) {
        long t0 = System.nanoTime();
        qp.postSend(new SendWorkRequest().wrId(9).opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
            .remote(address, rkey).local(region, 0, 65536));
        WorkCompletion[] wc = WorkCompletion.array(1);
        long deadline = t0 + 60_000_000_000L;
        while (System.nanoTime() < deadline) {
            if (cq.poll(wc, 1, 10_000_000L) == 1) {
                long ms = (System.nanoTime() - t0) / 1_000_000;
                // The error completion is queued just before the QP's state changes: give it a moment.
                long stateDeadline = System.nanoTime() + 5_000_000_000L;
                while (!wc[0].isSuccess() && qp.state() != io.jccl.verbs.QueuePairState.ERROR
                    && System.nanoTime() < stateDeadline) {
                    Thread.onSpinWait();
                }
                return "OK status=" + wc[0].status() + " after " + ms + " ms, qp " + qp.state().shortName();
            }
        }
        return "FAIL no completion within 60 s";
    }
}
