package io.jccl.transport.roce;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.Context;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.WorkCompletion;
import org.junit.jupiter.api.Test;

import java.lang.management.ManagementFactory;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The packet paths allocate nothing in steady state: after a warm-up, thousands of multi-packet SENDs and WRITEs
 * leave the responder's receiving thread (datagram checks, ICRC, scatter, copy, ACK) and the requester's receiving
 * thread (ACKs, completions) with no new allocation (the posting thread, which also runs this test's polling, is
 * printed: about 2 bytes per round); a budget of a quarter byte per packet allows
 * for a stray JIT deoptimisation, not for an object per packet or per message (the requester's receive thread
 * used to allocate a lock queue node whenever it met the posting thread at the QP lock). Twice: with the receive
 * threads doing all receiving ({@code JCCL_ROCE_POLL_DRIVEN=0}), and with the responder's completion queue polled
 * by a thread of its own, which then receives ({@code recvmmsg} ring, batches, TOS) and is the one measured. A third
 * run has congestion control at work: every request packet leaves A marked Congestion Experienced (A's socket sets
 * TOS 0x03), B's notification point answers each with a CNP (interval 0) and A's receive thread handles them
 * (A's controller is off, so pacing does not slow the run): the notification point and the CNP path allocate
 * nothing either.
 */
class RoceAllocationTest {
    @org.junit.jupiter.api.AfterEach
    void clearProperties() {
        System.clearProperty("jccl.roce.poll.driven");
    }

    private static final int PACKETS_PER_ROUND = 4 + 4 + 2; // SEND 1000 B and WRITE 1000 B at MTU 256, two ACKs

    private static long allocated(long... threadIds) {
        com.sun.management.ThreadMXBean mx = (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
        long total = 0;
        for (long id : threadIds) {
            total += mx.getThreadAllocatedBytes(id);
        }
        return total;
    }

    private static long receiveThreadId(QueuePair qp) {
        String address = qp.localEndpoint().address();
        String name = "jccl-roce-rx-" + address.substring(address.lastIndexOf(':') + 1);
        return Thread.getAllStackTraces().keySet().stream().filter(t -> t.getName().equals(name)).findFirst()
            .orElseThrow().threadId();
    }

    private static void waitOne(CompletionQueue cq, WorkCompletion[] wc) {
        long deadline = System.nanoTime() + 20_000_000_000L; // a guard against hanging, not a timing assertion
        while (cq.poll(wc, 1) == 0) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("no completion within 20 s");
            }
            Thread.onSpinWait();
        }
        assertTrue(wc[0].isSuccess());
    }

    @Test
    void shouldNotAllocatePerPacketOnTheReceiveThreads() {
        System.setProperty("jccl.roce.poll.driven", "0");
        run(false);
    }

    @Test
    void shouldNotAllocatePerPacketOnAPollingThread() {
        run(true);
    }

    @Test
    void shouldNotAllocatePerPacketWhenEveryPacketGetsACnp() {
        System.setProperty("jccl.roce.poll.driven", "0");
        run(false, true);
    }

    /**
     * The JDK customizes a method handle (generates and loads bytecode for it, ~64 KiB) on the thread that makes its
     * 128th call from code not yet compiled. For {@code ppoll}, which a polling thread calls only after 256 empty
     * polls, that call came at any time, minutes into a stream (this class's polling-thread test failed 2 runs in 5
     * with 65 592 bytes). The downcalls are primed when they are linked; a fresh JVM, so that no earlier test in
     * this one has done the 128 calls already.
     */
    @Test
    void shouldNotCustomizeAMethodHandleOnTheThreadOfARarePath() throws Exception {
        java.util.List<String> cmd = new java.util.ArrayList<>(java.util.List.of(
            ProcessHandle.current().info().command().orElse("java"), "--enable-native-access=ALL-UNNAMED",
            "-XX:+UseSerialGC", "-Xmx64m", "-cp", System.getProperty("java.class.path"),
            RareDowncallMain.class.getName()));
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
        assertTrue(p.waitFor(60, java.util.concurrent.TimeUnit.SECONDS), out);
        org.junit.jupiter.api.Assumptions.assumeTrue(p.exitValue() != 2, out);
        java.util.regex.Matcher m = java.util.regex.Pattern.compile("allocated (\\d+)").matcher(out);
        assertTrue(m.find(), out);
        long bytes = Long.parseLong(m.group(1));
        assertTrue(bytes < 8192, bytes + " bytes allocated by 254 ppoll waits: " + out);
    }

    private void run(boolean responderPoller) {
        run(responderPoller, false);
    }

    private void run(boolean responderPoller, boolean ceMarks) {
        RoceSettings settings = new RoceSettings("127.0.0.1", 0, 256);
        try (Context ca = RoceProvider.device().open(settings); Context cb = RoceProvider.device().open(settings)) {
            if (ceMarks) {
                org.junit.jupiter.api.Assumptions.assumeTrue(((RoceContext) cb).reportsTos(),
                    "FFM sockets unavailable (the NIO fallback reports no TOS)");
                ((RoceContext) ca).congestion(RoceCongestionSettings.DEFAULT.withMode(CongestionMode.NONE));
                ((RoceContext) cb).congestion(new RoceCongestionSettings(CongestionMode.DCQCN, 100_000, 0,
                    RoceCongestionSettings.DEFAULT.targetDelayNs()));
                ((RoceContext) ca).trafficClass(EcnSource.CE);
            }
            LoopbackQueuePairs pair = LoopbackQueuePairs.connect(ca, cb, 64, AccessFlag.REMOTE_WRITE);
            ProtectionDomain pa = pair.pa();
            ProtectionDomain pb = pair.pb();
            CompletionQueue qa = pair.qa();
            CompletionQueue qb = pair.qb();
            QueuePair a = pair.a();
            QueuePair b = pair.b();
            MemoryRegion ma = pa.allocateMemory(4096, AccessFlag.LOCAL_WRITE);
            MemoryRegion mb = pb.allocateMemory(4096, AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE);
            ReceiveWorkRequest recv = new ReceiveWorkRequest().local(mb, 0, 4096);
            SendWorkRequest send = new SendWorkRequest().opcode(SendOpcode.SEND).flags(SendFlag.SIGNALED)
                .local(ma, 0, 1000);
            SendWorkRequest write = new SendWorkRequest().opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
                .local(ma, 0, 1000).remote(mb.address(), mb.rkey());
            WorkCompletion[] wc = WorkCompletion.array(1);
            java.util.concurrent.atomic.AtomicLong received = new java.util.concurrent.atomic.AtomicLong();
            java.util.concurrent.atomic.AtomicBoolean stop = new java.util.concurrent.atomic.AtomicBoolean();
            Thread poller = !responderPoller ? null : Thread.ofPlatform().name("roce-test-poller").start(() -> {
                WorkCompletion[] pwc = WorkCompletion.array(4);
                while (!stop.get()) { // the responder's application thread: polls, and so receives
                    int n = qb.poll(pwc, pwc.length);
                    for (int k = 0; k < n; k++) {
                        if (!pwc[k].isSuccess()) {
                            throw new AssertionError(pwc[k].status().toString());
                        }
                    }
                    if (n > 0) {
                        received.addAndGet(n);
                    } else {
                        Thread.onSpinWait();
                    }
                }
            });
            long[] threads = {Thread.currentThread().threadId(), receiveThreadId(a),
                poller != null ? poller.threadId() : receiveThreadId(b)};
            int warmUp = 10_000; // twice (two modes): 100,000 packets each are plenty for C2
            int measured = 5_000;
            long[] before = new long[3];
            long[] after = new long[3];
            try {
                for (int i = 0; i < warmUp + measured; i++) {
                    if (i == warmUp) {
                        for (int t = 0; t < 3; t++) {
                            before[t] = allocated(threads[t]);
                        }
                    }
                    b.postReceive(recv);
                    a.postSend(send);
                    waitOne(qa, wc);
                    if (poller != null) {
                        long deadline = System.nanoTime() + 20_000_000_000L; // a guard, not a timing assertion
                        while (received.get() <= i) {
                            assertTrue(System.nanoTime() < deadline, "no receive completion within 20 s");
                            Thread.onSpinWait();
                        }
                    } else {
                        waitOne(qb, wc);
                    }
                    a.postSend(write);
                    waitOne(qa, wc);
                }
                for (int t = 0; t < 3; t++) {
                    after[t] = allocated(threads[t]); // while the poller still runs (a dead thread reads -1)
                }
            } finally {
                stop.set(true);
            }
            long posting = after[0] - before[0];
            long requester = after[1] - before[1];
            long responder = after[2] - before[2];
            if (poller != null) {
                try {
                    poller.join();
                } catch (InterruptedException e) {
                    throw new AssertionError(e);
                }
            }
            long packets = (long) measured * PACKETS_PER_ROUND;
            if (ceMarks) {
                long cnps = cb.counters().getOrDefault(io.jccl.verbs.Counter.NP_CNP_SENT, 0L);
                System.out.println("roce allocation with CE marks: " + cnps + " CNPs sent, "
                    + ca.counters().getOrDefault(io.jccl.verbs.Counter.RP_CNP_IGNORED, 0L) + " handled by A");
                assertTrue(cnps >= (long) (warmUp + measured) * 8, cnps + " CNPs: every request packet answered");
            }
            System.out.println("roce allocation over " + measured + " rounds (" + packets + " packets, "
                + ((RoceContext) cb).ioKind() + "): posting thread " + posting + " B, requester receive thread "
                + requester + " B, responder " + (poller != null ? "polling" : "receive") + " thread " + responder
                + " B");
            if (poller != null) {
                assertTrue(((RoceContext) cb).pollerDrives() > 0, "the responder's poller received");
            }
            assertTrue(responder >= 0 && requester >= 0, "threads measured while alive");
            assertTrue(responder < packets / 4, responder + " bytes allocated by the responder over " + packets
                + " packets");
            assertTrue(requester < packets / 4, requester + " bytes allocated by the requester's receive thread over "
                + packets + " packets");
        }
    }
}
