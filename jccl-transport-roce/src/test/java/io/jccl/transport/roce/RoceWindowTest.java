package io.jccl.transport.roce;

import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.Counter;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.VerbsException;
import io.jccl.verbs.WorkCompletion;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.lang.foreign.ValueLayout;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * {@code JCCL_ROCE_WINDOW_PSNS}: how many PSNs a QP sends beyond the last acknowledged one, counted with the
 * responder's receive path held (so no ACK can come back): exactly the window leaves, then the requester waits.
 */
class RoceWindowTest {
    @AfterEach
    void clearProperties() {
        System.clearProperty("jccl.roce.window.psns");
    }

    @Test
    void shouldSendTheDefaultWindowOf128PsnsBeforeAnAck() {
        packetsBeforeAnAck(128);
    }

    @Test
    void shouldSendALargerWindowWhenSetAndTheSocketBufferHoldsIt() {
        System.setProperty("jccl.roce.window.psns", "160");
        packetsBeforeAnAck(160);
    }

    @Test
    void shouldHonourAWindowOfMegabytesWhereTheReceiveBufferIsForced() {
        // 1024 PSNs (4 MiB) need a receive buffer past the usual net.core.rmem_max (4 MiB, a window of 409 at
        // most): SO_RCVBUFFORCE gives it where the process may (CAP_NET_ADMIN, as CI's root)
        assumeTrue(FfmUdpSocket.available() && hasNetAdmin(), "needs FFM sockets and CAP_NET_ADMIN");
        System.setProperty("jccl.roce.window.psns", "1024");
        packetsBeforeAnAck(1024);
    }

    @Test
    void shouldForceTheReceiveBufferPastRmemMaxWhereAllowed() throws Exception {
        assumeTrue(FfmUdpSocket.available(), "FFM sockets: " + FfmUdpSocket.unavailableReason());
        try (RoceContext c = (RoceContext) RoceProvider.device().open(new RoceSettings("127.0.0.1", 0, 4096))) {
            long rmemMax = Long.parseLong(java.nio.file.Files.readString(
                java.nio.file.Path.of("/proc/sys/net/core/rmem_max")).trim());
            // Linux reports twice what was set (its bookkeeping overhead)
            if (hasNetAdmin()) {
                assertEquals(2L * UdpIo.FORCED_RECEIVE_BUFFER_BYTES, c.receiveBufferBytes(), "SO_RCVBUFFORCE");
            } else {
                assertEquals(2L * Math.min(rmemMax, UdpIo.SOCKET_BUFFER_BYTES), c.receiveBufferBytes(), "SO_RCVBUF");
            }
        }
    }

    /** Whether this process has CAP_NET_ADMIN (bit 12 of CapEff), which SO_RCVBUFFORCE needs. */
    private static boolean hasNetAdmin() {
        try {
            for (String line : java.nio.file.Files.readAllLines(java.nio.file.Path.of("/proc/self/status"))) {
                if (line.startsWith("CapEff:")) {
                    return (Long.parseUnsignedLong(line.substring(7).trim(), 16) & (1L << 12)) != 0;
                }
            }
        } catch (java.io.IOException | NumberFormatException e) {
            return false;
        }
        return false;
    }

    @Test
    void shouldRefuseAWindowOutsideItsRange() {
        System.setProperty("jccl.roce.window.psns", "1");
        VerbsException e = assertThrows(VerbsException.class,
            () -> RoceProvider.device().open(new RoceSettings("127.0.0.1", 0, 4096)).close());
        assertTrue(e.getMessage().contains("JCCL_ROCE_WINDOW_PSNS=1"), e.getMessage());
    }

    /** Each numeric roce0 setting refuses a value outside its range, naming the setting and what it means. */
    @Test
    void shouldRefuseEveryPollingSettingOutsideItsRange() {
        String[][] cases = {
            {"jccl.roce.rx.spin.us", "-1", "JCCL_ROCE_RX_SPIN_US=-1 outside 0..1000000"},
            {"jccl.roce.poll.driven", "2", "JCCL_ROCE_POLL_DRIVEN=2: use 1 (application polls receive)"},
            {"jccl.roce.poll.yield", "1000001", "JCCL_ROCE_POLL_YIELD=1000001 outside 0..1000000 (empty polls"},
            {"jccl.roce.poll.wait", "-5", "JCCL_ROCE_POLL_WAIT=-5 outside 0..1000000 (empty polls in a row before"},
            {"jccl.roce.flow.sport", "7", "JCCL_ROCE_FLOW_SPORT=7: use 1 (each QP sends from its flow-label"},
        };
        for (String[] c : cases) {
            System.setProperty(c[0], c[1]);
            try {
                VerbsException e = assertThrows(VerbsException.class,
                    () -> RoceProvider.device().open(new RoceSettings("127.0.0.1", 0, 4096)).close(), c[0]);
                assertTrue(e.getMessage().contains(c[2]), e.getMessage());
            } finally {
                System.clearProperty(c[0]);
            }
        }
    }

    /**
     * A WRITE at MTU 4096 of twice the window (at least 1 MiB) with B's receive held: A sends exactly {@code window} packets, or what
     * the receive buffer holds where that is less (a host with a small net.core.rmem_max; a window above 128 is then
     * not testable and skipped), before it must wait.
     */
    private static void packetsBeforeAnAck(int window) {
        RoceSettings settings = new RoceSettings("127.0.0.1", 0, 4096);
        try (RoceContext ca = (RoceContext) RoceProvider.device().open(settings);
             RoceContext cb = (RoceContext) RoceProvider.device().open(settings)) {
            // the window is capped by what the receive buffer holds (4 QPs' worth of window at this MTU)
            int fit = ca.receiveBufferBytes() / (4 * (4096 + 1024));
            org.junit.jupiter.api.Assumptions.assumeTrue(window <= RoceQueuePair.WINDOW_PSNS || fit >= window,
                "receive buffer of " + ca.receiveBufferBytes() + " B holds a window of " + fit
                    + " only (net.core.rmem_max)");
            int expected = Math.clamp(fit, 2, window);
            // no ACK timer: a host that stalls this thread past it would add a go-back-N's packets to the count
            LoopbackQueuePairs link = LoopbackQueuePairs.connect(ca, cb, 16, 0, AccessFlag.REMOTE_WRITE);
            ProtectionDomain pa = link.pa();
            ProtectionDomain pb = link.pb();
            CompletionQueue qa = link.qa();
            CompletionQueue qb = link.qb();
            QueuePair a = link.a();
            QueuePair b = link.b();
            int bytes = Math.max(1 << 20, 2 * window * 4096);
            MemoryRegion source = pa.allocateMemory(bytes, AccessFlag.LOCAL_WRITE);
            MemoryRegion target = pb.allocateMemory(bytes, AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE);
            for (int i = 0; i < bytes; i += 8) {
                source.segment().set(ValueLayout.JAVA_LONG, i, i * 0x9E3779B97F4A7C15L);
            }
            long sentBefore = ca.counters().getOrDefault(Counter.SENT_PKTS, 0L);
            cb.holdReceiveForTest(); // B receives nothing, so A gets no ACK
            long sent;
            try {
                a.postSend(new SendWorkRequest().opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
                    .local(source, 0, bytes).remote(target.address(), target.rkey()));
                sent = ca.counters().getOrDefault(Counter.SENT_PKTS, 0L) - sentBefore; // postSend sent them
                assertEquals(expected, sent, "packets before an ACK");
                assertEquals(expected, ((RoceQueuePair) a).windowPsns(), "the QP's window");
            } finally {
                cb.releaseReceiveForTest();
            }
            WorkCompletion[] wc = WorkCompletion.array(1);
            long deadline = System.nanoTime() + 20_000_000_000L; // a guard against hanging, not a timing assertion
            while (qa.poll(wc, 1) == 0) {
                qb.poll(wc, 0); // drives B's socket too (one thread, both ends)
                assertTrue(System.nanoTime() < deadline, "no completion in 20 s");
            }
            assertTrue(wc[0].isSuccess(), wc[0]::toString);
            assertEquals(-1L, target.segment().mismatch(source.segment()));
        }
    }
}
