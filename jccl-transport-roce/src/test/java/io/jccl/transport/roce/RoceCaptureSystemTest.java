package io.jccl.transport.roce;

import io.jccl.transport.roce.wire.UdpSourcePort;
import io.jccl.verbs.AccessFlag;
import io.jccl.verbs.CompletionQueue;
import io.jccl.verbs.Counter;
import io.jccl.verbs.MemoryRegion;
import io.jccl.verbs.ProtectionDomain;
import io.jccl.verbs.QueuePair;
import io.jccl.verbs.ReceiveWorkRequest;
import io.jccl.verbs.SendFlag;
import io.jccl.verbs.SendOpcode;
import io.jccl.verbs.SendWorkRequest;
import io.jccl.verbs.WorkCompletion;
import org.junit.jupiter.api.Test;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The packets roce0 really puts on the wire, checked by tools JCCL did not write: scapy captures them on loopback
 * ({@code scripts/roce-capture-check.py}), decodes the BTH and computes the ICRC, and reads the IPv4 header the
 * kernel wrote, which must carry Don't Fragment and identification 0, or k for segment k of a UDP GSO send (the
 * script cuts each GSO buffer loopback carries whole into the datagrams Linux would put on a wire, as the kernel
 * numbers them): a segment whose ICRC was computed for another identification fails scapy's check. The traffic
 * includes GSO sends (messages of several equal packets at MTU 256), and the test asserts it saw some where the
 * socket sends GSO. Every packet of a QP, GSO segments included, must leave from the UDP source port RoCEv2 derives
 * from the pair's flow label ({@code rdma_get_udp_sport}, {@link io.jccl.transport.roce.wire.UdpSourcePort}): two QP
 * pairs run, and the capture lists the source ports seen per destination QP. Needs root (a packet socket) and
 * python3-scapy; skipped, saying which is missing, elsewhere.
 */
class RoceCaptureSystemTest {
    private static final String PYTHON = "/usr/bin/python3";

    private static boolean root() throws Exception {
        for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
            if (line.startsWith("Uid:")) {
                return line.split("\\s+")[1].equals("0");
            }
        }
        return false;
    }

    private static boolean scapy() {
        try {
            Process p = new ProcessBuilder(PYTHON, "-c", "import scapy.contrib.roce").redirectErrorStream(true)
                .start();
            p.getInputStream().readAllBytes();
            return p.waitFor(60, TimeUnit.SECONDS) && p.exitValue() == 0;
        } catch (Exception e) {
            return false;
        }
    }

    private static int port(QueuePair qp) {
        String address = qp.localEndpoint().address();
        return Integer.parseInt(address.substring(address.lastIndexOf(':') + 1));
    }

    private static WorkCompletion poll(CompletionQueue cq) {
        WorkCompletion[] wc = WorkCompletion.array(1);
        long deadline = System.nanoTime() + 20_000_000_000L; // a guard against hanging, not a timing assertion
        while (System.nanoTime() < deadline) {
            if (cq.poll(wc, 1, 1_000_000L) == 1) {
                assertTrue(wc[0].isSuccess(), wc[0].toString());
                return wc[0];
            }
        }
        throw new AssertionError("no completion within 20 s");
    }

    @Test
    void shouldPutPacketsOnTheWireThatScapyDecodesAndChecks() throws Exception {
        assumeTrue(root(), "capturing needs root (a packet socket)");
        assumeTrue(scapy(), "no " + PYTHON + " with scapy.contrib.roce (apt-get install python3-scapy)");
        Path script = Path.of("scripts/roce-capture-check.py").toAbsolutePath();
        assumeTrue(Files.exists(script), "run from the module directory: " + script);
        RoceSettings settings = new RoceSettings("127.0.0.1", 0, 256);
        try (RoceContext ca = (RoceContext) RoceProvider.device().open(settings);
             RoceContext cb = (RoceContext) RoceProvider.device().open(settings)) {
            LoopbackQueuePairs pair = LoopbackQueuePairs.connect(ca, cb, 64, AccessFlag.REMOTE_WRITE);
            LoopbackQueuePairs second = LoopbackQueuePairs.connect(ca, cb, 64, AccessFlag.REMOTE_WRITE);
            ProtectionDomain pa = pair.pa();
            ProtectionDomain pb = pair.pb();
            CompletionQueue qa = pair.qa();
            CompletionQueue qb = pair.qb();
            QueuePair a = pair.a();
            QueuePair b = pair.b();
            Process sniffer = new ProcessBuilder(PYTHON, script.toString(), "lo", "4", String.valueOf(port(a)),
                String.valueOf(port(b))).redirectErrorStream(true).start();
            BufferedReader out = new BufferedReader(new InputStreamReader(sniffer.getInputStream(),
                StandardCharsets.UTF_8));
            String line;
            StringBuilder log = new StringBuilder();
            while ((line = out.readLine()) != null && !line.equals("ready")) {
                log.append(line).append('\n');
            }
            assertEquals("ready", line, "sniffer did not start: " + log);
            MemoryRegion ma = pa.allocateMemory(4096, AccessFlag.LOCAL_WRITE);
            MemoryRegion mb = pb.allocateMemory(4096, AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE);
            MemoryRegion ma2 = second.pa().allocateMemory(4096, AccessFlag.LOCAL_WRITE);
            MemoryRegion mb2 = second.pb().allocateMemory(4096, AccessFlag.LOCAL_WRITE, AccessFlag.REMOTE_WRITE);
            // Traffic until the capture ends: however late the packet socket really starts, it sees packets.
            long deadline = System.nanoTime() + 60_000_000_000L;
            int rounds = 0;
            while (sniffer.isAlive() && System.nanoTime() < deadline) {
                for (int size : new int[] {0, 3, 256, 1000}) {
                    b.postReceive(new ReceiveWorkRequest().local(mb, 0, 4096));
                    a.postSend(new SendWorkRequest().opcode(SendOpcode.SEND_WITH_IMM).immediateData(size)
                        .flags(SendFlag.SIGNALED).local(ma, 0, size));
                    poll(qa);
                    poll(qb);
                    a.postSend(new SendWorkRequest().opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
                        .local(ma, 0, size).remote(mb.address(), mb.rkey()));
                    poll(qa);
                    second.a().postSend(new SendWorkRequest().opcode(SendOpcode.RDMA_WRITE).flags(SendFlag.SIGNALED)
                        .local(ma2, 0, size).remote(mb2.address(), mb2.rkey()));
                    poll(second.qa());
                }
                rounds++;
                Thread.sleep(10); // a few thousand packets are plenty for the capture to check
            }
            assertTrue(rounds > 0);
            while ((line = out.readLine()) != null) {
                log.append(line).append('\n');
            }
            assertTrue(sniffer.waitFor(60, TimeUnit.SECONDS), "sniffer did not finish");
            assertEquals(0, sniffer.exitValue(), log.toString());
            assertTrue(log.toString().contains("ICRC mismatches 0"), log.toString());
            // each QP's packets (requests one way, ACKs the other) from its pair's flow-label port, and no other
            for (LoopbackQueuePairs p : new LoopbackQueuePairs[] {pair, second}) {
                int sport = UdpSourcePort.of(0, p.a().queuePairNumber(), p.b().queuePairNumber());
                for (QueuePair to : new QueuePair[] {p.a(), p.b()}) {
                    assertTrue(log.toString().contains("flow dqpn=0x" + Integer.toHexString(to.queuePairNumber())
                        + " sports=[" + sport + "]"), "QP 0x" + Integer.toHexString(to.queuePairNumber())
                        + " should receive only from port " + sport + ":\n" + log);
                }
            }
            assertEquals(0, ca.counters().getOrDefault(Counter.UDP_SPORT_FALLBACK, 0L));
            UdpIo flowSocket = ((RoceQueuePair) pair.a()).txSocket();
            if (flowSocket != null && flowSocket.gso()) {
                // a SEND of 1000 bytes at MTU 256 leaves the flow-label socket as one GSO send of four packets
                java.util.regex.Matcher gso = java.util.regex.Pattern.compile("GSO sends (\\d+)").matcher(log);
                assertTrue(gso.find() && Integer.parseInt(gso.group(1)) > 0, "no GSO send captured: " + log);
            }
            System.out.print("roce capture check: " + log);
        }
    }
}
